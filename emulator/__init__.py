"""ckpt-emu: a tiered checkpoint emulator for LLM training storage.

The packages, top to bottom; each imports only from those below it
(tests/unit/project/test_layering.py keeps this true; docs/architecture.md draws it):

- ``cli``         the command line, one module per subcommand; nothing imports it
- ``launch``      the CLI process's side of a run: preflight, claims, torchrun, progress
- ``rank``        the torchrun worker: set-up, training loop, collectives
- ``mlperf``      MLPerf Storage's checkpoint protocol, its figures and DLIO's folder
- ``results``     rank records -> figures, report.txt, results.json, timeline
- ``checkpoint``  one rank's checkpoint I/O: save, drain, restore, manifests, retries, faults
- ``workload``    what is checkpointed, in memory: the state, its bytes, staging, the device
- ``job``         one run's lifetime: its results folder, ownership, lifelines, its tiers
- ``simulation``  the whole cluster by discrete-event simulation
- ``config``      YAML -> validated frozen dataclasses
- ``design``      a storage design in an architect's terms; a node's share of a shared link
- the kernel:     ``errors``, ``units``, ``sizing``, ``planner``, ``metrics``

Where bytes live is the ``tiers`` package beside this one, which imports nothing of it.
"""
