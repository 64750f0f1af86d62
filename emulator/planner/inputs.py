"""A design as the planner model's inputs: per tier its stall and lag, per failure class its rate and
recovery, all from the design's closed forms (emulator/design/costs.py), for one mode and one cell.

- **sync**: a checkpoint stalls for all of it: the snapshot and the fixed costs with the nearest
  tier, then each tier's own copy as it takes the checkpoint (global storage: its commit too); no lag;
- **async**: only the snapshot stalls; each tier's copy is durable ``costs.lag_seconds`` after it
  (the copies before it that take the same checkpoint, one after another), and each background copy
  costs training the design's interference share of its time (a calibration measures it; 0 without);
- **classes**: process, node and group at the design's rates, each recovering from the nearest tier
  that survives it, at its detection, restart or replacement and restore (``costs.recovery_seconds``);
- **retention**: after each checkpoint the oldest one is deleted (``costs.retention_seconds``), and
  the next checkpoint waits for it.

A cell is a base interval and an ``every`` per tier: a tier's lag depends on which of the tiers
before it take the same checkpoints, so every cell gets its own lags (cached: a few per tier).
"""
from __future__ import annotations

from emulator.design import Design, costs
from emulator.design.failures import CLASSES
from emulator.planner.model import FailureRate, Level, LevelInputs


class DesignLevels:
    """Builds the model's inputs for ``design`` in ``mode`` (sync or async) at any cell."""

    def __init__(self, design: Design, mode: str):
        if mode not in ("sync", "async"):
            raise ValueError(f"unknown mode {mode!r} (use sync, async)")
        self.design, self.mode = design, mode
        self.names = design.tiers
        self.copy_s = {n: costs.copy_seconds(design, n) for n in self.names}
        self.snapshot_s = costs.snapshot_seconds(design)
        self.restore_s = {n: costs.restore_seconds(design, n) for n in self.names}
        self.classes = tuple(FailureRate(c, design.failures.rate(c), design.recovery_tier(c),
                                          costs.recovery_seconds(design, c)) for c in CLASSES)
        self.retention_s = costs.retention_seconds(design, taking=())  # the listings, after every checkpoint
        self.deletes_s = {n: costs.retention_seconds(design, taking=(n,)) - self.retention_s for n in self.names}
        self._lags: dict = {}

    @property
    def every(self) -> dict:
        """The design's own ``every`` per tier (its ladder)."""
        return {t.name: t.every for t in self.design.ladder}

    def _lag(self, name: str, every: dict) -> float:
        names = self.names
        mine = every[name]
        key = (name, tuple(n for n in names[:names.index(name)] if mine % every[n] == 0))
        if key not in self._lags:
            self._lags[key] = costs.lag_seconds(self.design, name, every)
        return self._lags[key]

    def _stall(self, name: str) -> float:
        d, first = self.design, name == self.names[0]
        if self.mode == "async":
            return (self.snapshot_s if first else 0.0) + d.interference_share * self.copy_s[name]
        stall = self.copy_s[name]
        if first:
            stall += self.snapshot_s + d.fixed_pre_s
        if name == "global":
            stall += d.fixed_post_s + (d.link("global").latency_s if d.link("global") else 0.0)
        return stall

    def levels(self, every: dict | None = None) -> tuple:
        every = {**self.every, **(every or {})}
        return tuple(Level(n, every[n], self._stall(n), self._lag(n, every) if self.mode == "async" else 0.0,
                           self.restore_s[n], self.deletes_s[n]) for n in self.names)

    def inputs(self, base_interval_s: float | None = None, every: dict | None = None) -> LevelInputs:
        """The cell (``base_interval_s``, ``every``); None: the design's own."""
        t = self.design.base_interval_s if base_interval_s is None else base_interval_s
        return LevelInputs(t, self.levels(every), self.classes, retention_s=self.retention_s)
