"""Whole-cluster checkpoint simulation (``ckpt-emu simulate``).

The emulator runs real I/O on the one or two nodes a user has; this package
answers the same questions for thousands of nodes with a discrete-event model
(SimPy) driven by the same config, whose per-byte and per-request costs come
from the config's tier rates or from a real emulation run (``--calibrate``).

Modules, one concern each:

- ``design``: node groups and per-phase costs, from a config (+ calibration)
- ``sharing``: how ``shared_by`` turns a rate into link limits, and back
- ``link``: a bandwidth shared fairly among concurrent transfers (SimPy)
- ``model``: the job: training, checkpoint pipeline, failures, restarts
- ``failures``: Poisson arrivals and failure traces
- ``calibrate``: results.json -> costs (the one reader of results.json)
- ``sweep``, ``plot``, ``report``, ``cli``: grids, pictures, tables, the command
- ``recommend``: what ``ckpt-emu tune`` asks when the cluster is too big to emulate
"""
