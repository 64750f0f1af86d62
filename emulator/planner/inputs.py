"""A design as the planner model's inputs: per position of the ladder's cycle its stall, pipeline and
retention, per failure class its rate and each restore, all from the design's closed forms
(emulator/design/costs.py), for one mode and one cell.

- **sync**: a checkpoint stalls for the snapshot, then its pipeline (the fixed costs, each tier's
  copy as it takes the checkpoint, global storage's commit: ``costs.pipeline_seconds``);
- **async**: only the snapshot stalls; each tier's copy is durable as the pipeline reaches it,
  and each background copy costs training the design's interference share of its time (a
  calibration measures it; 0 without);
- **classes**: process, node and group at the design's rates; at each position of the cycle, the
  copy a failure of the class restores and what that costs (``costs.restore_choice`` and
  ``costs.recovery_seconds``: the newest copy a surviving tier holds, the other nodes reading
  the same step where they hold it nearer);
- **retention**: after each checkpoint the oldest one is deleted (``costs.retention_seconds``), and
  the next checkpoint's pipeline waits for it.

A cell is a base interval and an ``every`` per tier: the positions depend on which tiers take which
checkpoint, so every ``every`` gets its own cycle (its positions cached: a few kinds of checkpoint).
"""
from __future__ import annotations

import math

from emulator.design import Design, costs, ladder
from emulator.design.failures import CLASSES
from emulator.planner.cycle import Checkpoint
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
        self.retention_s = costs.retention_seconds(design, taking=())  # the listings, after every checkpoint
        self.deletes_s = {n: costs.retention_seconds(design, taking=(n,)) - self.retention_s for n in self.names}
        self._positions: dict = {}
        self._restores: dict = {}

    @property
    def every(self) -> dict:
        """The design's own ``every`` per tier (its ladder)."""
        return {t.name: t.every for t in self.design.ladder}

    @property
    def classes(self) -> tuple:
        """The failure classes at the design's own cell."""
        return self.failure_rates(self.every)

    # ------------------------------------------------------------------ levels, for reports and tests

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
        lag = {n: costs.lag_seconds(self.design, n, every) if self.mode == "async" else 0.0 for n in self.names}
        return tuple(Level(n, every[n], self._stall(n), lag[n], self.restore_s[n], self.deletes_s[n])
                     for n in self.names)

    # ------------------------------------------------------------------ the cycle

    def _taking(self, every: dict, n: int) -> tuple:
        return tuple(t for t in self.names if n % every[t] == 0) or self.names[:1]

    def _position(self, due: tuple) -> Checkpoint:
        if due not in self._positions:
            d = self.design
            durable = costs.pipeline_seconds(d, due)
            first = ladder.nearest_file_tier(due)
            copies = sum(costs.copy_seconds(d, n, first=n == first) for n in due)
            interference = d.interference_share * copies if self.mode == "async" else 0.0
            self._positions[due] = Checkpoint(tuple(self.names.index(n) for n in due), self.snapshot_s,
                                              tuple(durable[n] for n in due), max(durable.values()),
                                              costs.retention_seconds(d, taking=due), interference)
        return self._positions[due]

    def _restore(self, cls: str, due: tuple) -> tuple:
        """(level index, pieces) of a failure of ``cls`` restoring the checkpoint that went to ``due``
        (model.restores_of): the seconds until training resumes while the other nodes hold that step on
        each nearer tier of ``due`` (until its retention deletes it there), then reading it where the
        survivors read it; (None, ()) where no tier that survives ``cls`` took it."""
        key = (cls, due)
        if key not in self._restores:
            d = self.design
            tier, _ = costs.restore_choice(d, cls, {n: (1,) for n in due})
            if tier is None:
                self._restores[key] = (None, ())
            else:
                nearer = due[:due.index(tier)]
                pieces = tuple((self.names.index(n), d.tier(n).keep, costs.recovery_seconds(d, cls, tier, n))
                               for n in nearer)
                self._restores[key] = (self.names.index(tier),
                                       pieces + ((None, 0, costs.recovery_seconds(d, cls, tier, tier)),))
        return self._restores[key]

    def dues(self, every: dict) -> tuple:
        """The tiers each checkpoint of the cycle of ``every`` goes to, its position by position."""
        return tuple(self._taking(every, n) for n in range(1, math.lcm(*every.values()) + 1))

    def failure_rates(self, every: dict) -> tuple:
        d, dues = self.design, self.dues({**self.every, **every})
        return tuple(FailureRate(c, d.failures.rate(c), d.recovery_tier(c), costs.recovery_seconds(d, c),
                                 tuple(n for n in self.names if d.survives(c, n)),
                                 tuple(self._restore(c, due) for due in dues),
                                 {i: costs.recovery_seconds(d, c, n, n) for i, n in enumerate(self.names)
                                  if d.survives(c, n)}) for c in CLASSES)

    def inputs(self, base_interval_s: float | None = None, every: dict | None = None) -> LevelInputs:
        """The cell (``base_interval_s``, ``every``); None: the design's own."""
        t = self.design.base_interval_s if base_interval_s is None else base_interval_s
        every = {**self.every, **(every or {})}
        return LevelInputs(t, self.levels(every), self.failure_rates(every), retention_s=self.retention_s,
                           cycle=tuple(self._position(due) for due in self.dues(every)),
                           blocking=self.mode == "sync")
