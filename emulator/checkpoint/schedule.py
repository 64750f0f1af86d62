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

#: the tiers that hold files a rank writes or a copy lands in, nearest first (a peer holds
#: copies of the memory tier in other nodes' memory)
ORDER = ("memory", "peer", "local", "global")
FILE_TIERS = ("memory", "local", "global")


@dataclass(frozen=True)
class Schedule:
    every: dict  # tier name -> takes every N-th checkpoint (N >= 1)
    keep: dict   # tier name -> complete checkpoints kept

    @classmethod
    def from_config(cls, cfg) -> "Schedule":
        keep = {n: cfg.tiers.entry(n).keep or cfg.checkpoint.keep for n in cfg.tiers.configured()}
        return cls(cfg.tier_every, keep)

    @classmethod
    def two_tier(cls, local: bool, keep: int) -> "Schedule":
        """Every checkpoint to the local tier (if any) and the global tier: the design before levels."""
        names = ("local", "global") if local else ("global",)
        return cls({n: 1 for n in names}, {n: keep for n in names})

    def due(self, count: int) -> tuple[str, ...]:
        """The tiers that take the mode's ``count``-th checkpoint (1-based), nearest first."""
        return tuple(n for n in ORDER if n in self.every and count % self.every[n] == 0)

    @staticmethod
    def first(due) -> str | None:
        """The tier a rank writes its file to: the nearest file tier that takes the checkpoint."""
        return next((n for n in FILE_TIERS if n in due), None)

    def interval_steps(self, name: str, base: int) -> int:
        return self.every[name] * base
