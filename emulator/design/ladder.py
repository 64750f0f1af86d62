"""The tier ladder: the kinds of rung a checkpoint climbs, nearest first, and a design's rungs.

A rung kind (emulator/design/rungs/) says what a tier is: which failure classes its copies survive,
whether the ranks write their files there, whether it is on the node and whether it lives in host
memory. A rung is one tier of a design: its kind, the every-N-th checkpoint it takes, how many it
keeps. Every module asks the ladder about tiers instead of naming them: a new rung kind is one
module in rungs/ plus one line in :data:`KINDS`, as a new storage backend is one module plus one
line in tiers/__init__.py.
"""
from __future__ import annotations

from dataclasses import dataclass

from emulator.design.rungs import global_store, local, memory, peer
from emulator.design.rungs.kind import RungKind

#: the rung kinds, nearest first: the order a checkpoint climbs them
KINDS = {k.name: k for k in (memory.KIND, peer.KIND, local.KIND, global_store.KIND)}


def kind(name: str) -> RungKind:
    return KINDS[name]


def names() -> tuple:
    """Every rung kind's name, nearest first."""
    return tuple(KINDS)


def _where(test) -> tuple:
    return tuple(n for n, k in KINDS.items() if test(k))


def file_tiers() -> tuple:
    """The kinds the ranks write their files to (and restore from), nearest first."""
    return _where(lambda k: k.files)


def node_file_tiers() -> tuple:
    """The node's own tiers holding its ranks' files (host memory, NVMe), nearest first."""
    return _where(lambda k: k.files and k.node_local)


def lasting_file_tiers() -> tuple:
    """The file tiers outside host memory (NVMe, global storage): the ladder before memory tiers."""
    return _where(lambda k: k.files and not k.volatile)


def stages() -> dict:
    """{tier: phase} of the copies a node makes between its first write and the drain to the farthest
    rung (a peer's send, the NVMe's copy from memory)."""
    return {n: k.copy_phase for n, k in KINDS.items() if k.copy_phase and n != names()[-1]}


def survivors(cls: str) -> tuple:
    """The kinds whose copies survive a failure of class ``cls``, nearest first."""
    return _where(lambda k: cls in k.survives)


def survives(cls: str, name: str) -> bool:
    return cls in KINDS[name].survives


def in_order(names_) -> tuple:
    """``names_`` in ladder order, nearest first (names of no kind left out)."""
    return tuple(n for n in KINDS if n in names_)


def nearest_file_tier(names_) -> str | None:
    """The tier a checkpoint going to ``names_`` is written to: the nearest file tier among them."""
    return next((n for n in file_tiers() if n in names_), None)


@dataclass(frozen=True)
class Rung:
    """One rung of a design's ladder: tier ``name`` takes every ``every``-th checkpoint, keeps ``keep``."""

    name: str
    every: int
    keep: int

    @property
    def kind(self) -> RungKind:
        return KINDS[self.name]


def ladder_of(cfg) -> tuple:
    """The rungs of ``cfg``'s configured tiers, nearest first."""
    every, keep = cfg.tier_every, cfg.checkpoint.keep
    return tuple(Rung(name, every[name], getattr(cfg.tiers.entry(name), "keep", None) or keep)
                 for name in cfg.tiers.configured())
