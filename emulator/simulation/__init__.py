"""Whole-cluster checkpoint simulation (``ckpt-emu simulate``, emulator/cli/simulate.py).

The emulator runs real I/O on the one or two nodes a user has; this package answers the same
questions for thousands of nodes with one discrete-event model (SimPy) of the design
(emulator/design): its tiers, links and failure classes, calibrated by a real run where one
is given (``--calibrate``). Nothing here decides a rate or holds a failure model: it reads them.

Modules, one concern each:

- ``model``: the job: training, the checkpoint pipeline on every tier, failures and recoveries
- ``link``: a link of the design shared event by event (max-min fair, SimPy)
- ``outcome``: what a run measured and reports
- ``arrivals``: failure arrivals from the design's failure model, or a trace
- ``calibrate``: results.json -> the design's Calibration (the one reader of results.json)
- ``study``, ``sweep``, ``recommend``: runs of a design; grids and their optimum; ``tune --nodes``
- ``planning``: what the analytic planner recommends for a design (the one place it is asked)
- ``output``, ``report``, ``plot``, ``s3cost``: description, tables, pictures, S3 figures
"""
