"""A run's records -> its figures and files (rank 0, after the run).

- ``summary``      the numbers, per mode against the no-checkpoint baseline (worst rank decides)
- ``scale_notes``  what a scaled run cannot show of the full-size design
- ``report``       report.txt and results.json
- ``timeline``     the timeline picture
- ``verdict``      whether the design met its goals (the exit status under --fail-on-miss)
"""
