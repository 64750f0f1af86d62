"""Whole-cluster checkpoint simulation (``ckpt-emu simulate``, emulator/cli/simulate.py).

The emulator runs real I/O on the one or two nodes a user has; this package
answers the same questions for thousands of nodes with a discrete-event model
(SimPy) driven by the same config, whose per-byte and per-request costs come
from the config's tier rates or from a real emulation run (``--calibrate``).

Modules, one concern each:

- ``design``: node groups and per-phase costs, from a config (+ calibration)
- ``inputs``: what a design reads of a tier's config, and the calibration's measured costs
- ``sharing``: how ``shared_by`` turns a rate into link limits, and back
- ``link``: a bandwidth shared fairly among concurrent transfers (SimPy)
- ``model``: the job: training, checkpoint pipeline, failures, restarts
- ``arrivals``: failure arrivals, Poisson or from a trace
- ``calibrate``: results.json -> costs (the one reader of results.json)
- ``sweep``, ``plot``, ``report``, ``output``: grids, pictures, tables, files
- ``study``: one simulation study (design, arrivals, interval), run and summed up
- ``recommend``: what ``ckpt-emu tune`` asks when the cluster is too big to emulate
"""
