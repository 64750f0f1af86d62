"""The rank process torchrun starts, one per emulated accelerator (``python -m emulator.rank``).

- ``run``       set-up, resume or recovery, the modes, the loads, its result
- ``training``  the training loop of one mode
- ``comm``      the few collectives (gloo), and a single-process stand-in
"""
