"""The design: one model of the job and its storage that every command reads (no torch, no I/O).

- ``job``       the job's nodes, the layout that fills them, every node's checkpoint bytes
- ``links``     every link and who shares it: the one place a node's rate is decided
- ``ladder``    the tier ladder: the registry of rung kinds (``rungs/``), a design's rungs
- ``failures``  the failure classes (process, node, group), their rates and recovery costs
- ``snapshot``  a checkpoint's blocking time as parts: fixed, per tensor, bytes, DCP's planning
- ``model``     :func:`resolve`: a config, a calibration and overrides -> :class:`Design`
- ``costs``     each phase's and each recovery's closed form, what ``plan`` computes with

The three engines read it: the emulator (``rank/``, ``checkpoint/``, ``tiers/``) paces its nodes
by it, ``simulation/`` shares its links event by event, ``planner/`` optimises its intervals.
"""
from emulator.design.ladder import Rung
from emulator.design.model import Calibration, Design, resolve, run_emulation, run_peer_link
from emulator.design.snapshot import Snapshot

__all__ = ["Calibration", "Design", "Rung", "Snapshot", "resolve", "run_emulation", "run_peer_link"]
