"""One run's lifetime, shared by the CLI process and the ranks.

- ``outdir``      the names of every file and folder in the results folder
- ``ownership``   one run owns its results folder and tiers for its lifetime
- ``lifeline``    processes that die with their parent
- ``rank_tiers``  a rank's tiers from the config's registry entries
"""
