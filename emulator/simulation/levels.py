"""Multi-level checkpointing as a SimPy model of one synchronous job (issue 24).

The same :class:`emulator.multilevel.LevelInputs` as the first-order model, simulated event by
event, so the model's optimum can be checked against a brute-force sweep:

- **cycles**: the job trains ``base_interval_s`` less the coming checkpoint's stall, waits for the
  previous copy to any level this checkpoint goes to that is not yet durable (copies to one level
  are serialised), then stalls for the sum of the stalls of the levels it goes to. Checkpoint n
  (counted from the start, across failures) goes to every level whose ``every`` divides n. Its copy
  to level l is durable ``lag_s`` after the stall ends. One SimPy timeout per cycle: a failure
  inside one splits it into work, wait and stall by the time elapsed.
- **failures**: each class is a Poisson process of its own (seeded by ``seed`` and the class's
  name, so every cell of a sweep sees the same failures). A failure abandons every copy in flight
  (the job's processes restart), destroys the levels below the one its class recovers from,
  then rolls back to the nearest surviving level holding a durable checkpoint (the job's start
  counts as one at every level; the newest one where several hold one, nearest first among
  equals, as the emulator restores) and pays ``restart_s`` + that level's ``restore_s``. The work
  since that checkpoint is lost; no surviving level holds a newer one. A failure during a recovery
  starts another.

Goodput is the progress at the horizon (useful, surviving work) over the horizon.
"""
from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass

import simpy

from emulator.planner.model import Grid, LevelInputs, recovery_cost, recovery_levels


@dataclass(frozen=True)
class ClassTally:
    """One class over the run: how many failures, their recovery (restart + restore) and lost work."""

    name: str
    failures: int
    recovery_s: float
    lost_work_s: float


@dataclass(frozen=True)
class LevelOutcome:
    """One run: goodput and where the rest of the wall time went, in seconds."""

    horizon_s: float
    goodput: float
    stall_s: float
    wait_s: float
    checkpoints: int
    classes: tuple


def arrivals(inputs: LevelInputs, seed: int):
    """(time, class index) of every failure, in time order, lazily (Poisson arrivals never end)."""
    def one(i, c):
        rng, t = random.Random(f"{seed}/{c.name}"), 0.0
        while c.rate_per_s > 0:
            t += rng.expovariate(c.rate_per_s)
            yield t, i
    return heapq.merge(*(one(i, c) for i, c in enumerate(inputs.classes)))


def _schedule(levels) -> list:
    """Per checkpoint number modulo the levels' common period: the levels it goes to, its stall."""
    period = math.lcm(*(lv.every for lv in levels))
    out = []
    for n in range(period):
        to = tuple(i for i, lv in enumerate(levels) if n % lv.every == 0)
        out.append((to, sum(levels[i].stall_s for i in to)))
    return out


class LevelJob:
    """Build with inputs, a seed and a horizon, then :meth:`run` once. ``failures``, a list of
    (time, class name) in time order, replaces the seeded arrivals (tests, traces)."""

    def __init__(self, inputs: LevelInputs, seed: int, horizon_s: float, failures=None):
        if not horizon_s > 0:
            raise ValueError(f"horizon_s must be > 0, got {horizon_s!r}")
        self.inp, self.horizon_s = inputs, horizon_s
        self.env = simpy.Environment()
        self.recovery = recovery_levels(inputs)
        n, k = len(inputs.levels), len(inputs.classes)
        self.durable = [0.0] * n      # per level, the progress of its newest durable checkpoint (None: none)
        self.pending = [None] * n     # per level, (durable at, progress) of the copy in flight
        self.progress = 0.0
        self.count = 0                # checkpoints taken
        self.schedule = _schedule(inputs.levels)
        self.cycle = None             # (start, train, wait) of the cycle under way
        self.owed = None              # (class, seconds) of the recovery owed
        self.recovering = None        # (class, start) of the recovery under way
        self.stall_s = self.wait_s = 0.0
        self.failures, self.recovery_s, self.lost_s = [0] * k, [0.0] * k, [0.0] * k
        self.proc = self.env.process(self._train())
        if failures is not None:
            index = {c.name: k for k, c in enumerate(inputs.classes)}
            events = [(t, index[name]) for t, name in failures]
        else:
            events = arrivals(inputs, seed)
        self.env.process(self._failures(events))

    # ------------------------------------------------------------------ training

    def _train(self):
        while True:
            try:
                if self.owed is not None:
                    yield from self._recover()
                yield from self._cycle()
            except simpy.Interrupt as intr:
                self._fail(intr.cause)

    def _cycle(self):
        env, levels = self.env, self.inp.levels
        n = self.count + 1
        to, stall = self.schedule[n % len(self.schedule)]
        train = max(0.0, self.inp.base_interval_s - stall)
        start = env.now
        ready = max((self.pending[i][0] for i in to if self.pending[i] is not None), default=start)
        wait = max(0.0, ready - (start + train))
        self.cycle = (start, train, wait)
        yield env.timeout(train + wait + stall)
        self._close_cycle()
        for i in to:
            if self.pending[i] is not None:  # the previous copy, durable before this stall began
                self.durable[i] = self.pending[i][1]
            self.pending[i] = (env.now + levels[i].lag_s, self.progress)
        self.count = n

    def _close_cycle(self) -> None:
        """Account the cycle under way up to now: work, then wait, then stall."""
        start, train, wait = self.cycle
        elapsed = self.env.now - start
        worked = min(elapsed, train)
        waited = min(elapsed - worked, wait)
        self.progress += worked
        self.wait_s += waited
        self.stall_s += elapsed - worked - waited
        self.cycle = None

    def _promote(self) -> None:
        """Copies whose lag has passed are durable (checked when it matters: at a failure)."""
        for i, p in enumerate(self.pending):
            if p is not None and p[0] <= self.env.now:
                self.durable[i], self.pending[i] = p[1], None

    # ------------------------------------------------------------------ failures

    def _failures(self, events):
        env = self.env
        for t, c in events:
            if t >= self.horizon_s:
                return
            yield env.timeout(t - env.now)
            self.proc.interrupt(c)

    def _fail(self, c: int) -> None:
        if self.cycle is not None:
            self._close_cycle()
        self._end_recovery()
        self._promote()
        self.pending = [None] * len(self.pending)  # copies in flight are abandoned
        r = self.recovery[c]
        for i in range(r):
            self.durable[i] = None  # the class destroys the levels below the one that survives it
        # the newest checkpoint a surviving level holds, nearest first among equals (as the emulator
        # restores); the top level is never destroyed, and nothing it holds is newer, so one is found
        held = [j for j in range(r, len(self.durable)) if self.durable[j] is not None]
        i = max(held, key=lambda j: (self.durable[j], -j))
        restored = self.durable[i]
        self.failures[c] += 1
        self.lost_s[c] += self.progress - restored
        self.progress = restored
        self.owed = (c, recovery_cost(self.inp, c, i))

    def _recover(self):
        c, seconds = self.owed
        self.recovering = (c, self.env.now)
        yield self.env.timeout(seconds)
        self._end_recovery()
        self.owed = None

    def _end_recovery(self) -> None:
        if self.recovering is not None:
            c, start = self.recovering
            self.recovery_s[c] += self.env.now - start
            self.recovering = None

    # ------------------------------------------------------------------ run

    def run(self) -> LevelOutcome:
        self.env.run(until=self.horizon_s)
        if self.cycle is not None:
            self._close_cycle()
        self._end_recovery()
        classes = tuple(ClassTally(c.name, self.failures[k], self.recovery_s[k], self.lost_s[k])
                        for k, c in enumerate(self.inp.classes))
        return LevelOutcome(self.horizon_s, self.progress / self.horizon_s, self.stall_s, self.wait_s,
                            self.count, classes)


def simulate(inputs: LevelInputs, seed: int, horizon_s: float) -> LevelOutcome:
    return LevelJob(inputs, seed, horizon_s).run()


# --------------------------------------------------------------------------- sweep

@dataclass(frozen=True)
class Cell:
    inputs: LevelInputs
    outcome: LevelOutcome


@dataclass(frozen=True)
class LevelSweep:
    """Every cell of the grid, in :meth:`Grid.cells` order, and the best (the first of equals)."""

    cells: tuple
    best: Cell


def sweep(inputs: LevelInputs, grid: Grid, seed: int, horizon_s: float) -> LevelSweep:
    """:func:`simulate` every cell of ``grid`` (as :func:`emulator.multilevel.optimize` searches it),
    all with the same failures."""
    cells = tuple(Cell(c, simulate(c, seed, horizon_s)) for c in grid.cells(inputs))
    return LevelSweep(cells, max(cells, key=lambda cell: cell.outcome.goodput))
