"""What a rung kind is: the properties of a tier of the ladder that every engine asks about."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RungKind:
    """One kind of tier. ``survives``: the failure classes its copies outlive (emulator/design/failures.py);
    ``files``: the ranks write their checkpoint files there (a peer only holds copies of another tier's);
    ``node_local``: on the node itself, lost with it; ``volatile``: in host memory, gone with the
    host's power and given back when a run ends; ``copy_phase``: the phase a copy into it from a
    nearer tier is timed and counted under (None: never a copy's destination)."""

    name: str
    survives: tuple
    files: bool
    node_local: bool
    volatile: bool
    copy_phase: str | None = None
