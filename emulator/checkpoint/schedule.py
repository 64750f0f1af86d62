"""Which tiers take which checkpoint, and how many each keeps.

Every tier takes every N-th checkpoint of a mode: N is its ``interval_steps`` over
the base ``checkpoint.interval_steps`` (the config makes it a whole number). Memory
every checkpoint, a peer every 2nd, NVMe every 5th and global storage every 10th is
NVIDIA's resiliency extension's and Gemini's kind of design. A checkpoint is written
to the nearest file tier that takes it; the farther tiers that take it get copies of
that file (a peer from memory, NVMe from memory, global from the nearest node tier
holding it), so the pipeline between tiers follows the intervals.
"""
from __future__ import annotations

from dataclasses import dataclass

from emulator.design import ladder


@dataclass(frozen=True)
class Schedule:
    every: dict  # tier name -> takes every N-th checkpoint (N >= 1)
    keep: dict   # tier name -> complete checkpoints kept

    @classmethod
    def of(cls, rungs) -> "Schedule":
        """The schedule of a design's ladder (its :class:`~emulator.design.ladder.Rung` s)."""
        return cls({r.name: r.every for r in rungs}, {r.name: r.keep for r in rungs})

    @classmethod
    def two_tier(cls, local: bool, keep: int) -> "Schedule":
        """Every checkpoint to the local tier (if any) and the global tier: the design before levels."""
        names = tuple(n for n in ladder.lasting_file_tiers() if local or not ladder.kind(n).node_local)
        return cls({n: 1 for n in names}, {n: keep for n in names})

    def due(self, count: int) -> tuple[str, ...]:
        """The tiers that take the mode's ``count``-th checkpoint (1-based), nearest first."""
        return tuple(n for n in ladder.in_order(self.every) if count % self.every[n] == 0)

    @staticmethod
    def first(due) -> str | None:
        """The tier a rank writes its file to: the nearest file tier that takes the checkpoint."""
        return ladder.nearest_file_tier(due)

    def interval_steps(self, name: str, base: int) -> int:
        return self.every[name] * base
