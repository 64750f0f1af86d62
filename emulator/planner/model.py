"""The planner's model: goodput of a ladder of checkpoint levels, and the best cell of a grid.

Pure math, no I/O, instant; emulator/planner/inputs.py builds its inputs from a design. A job checkpoints every base interval T (start to start, as the
planner's interval); checkpoint number n (counted from the job's start, across failures) goes to
every level whose ``every`` divides n: host memory every one, a peer replica every k_peer-th, node
NVMe every k_local-th, global storage every k_global-th. A failure class (process crash, node loss,
the loss of a replica group) destroys the levels below the lowest one that survives it and
recovers from that one: restart, restore, and the work since its newest durable checkpoint is lost.

First-order model, in the style of Moody et al., "Design, modeling, and evaluation of a scalable
multi-level checkpointing system" (SC10, SCR) and Di et al., "Optimization of multi-level
checkpoint model for large scale HPC applications" (IPDPS 2014). Per level l: every e_l, stall
s_l, lag d_l (stall end to durable); per class c: rate lambda_c, recovering at level l(c) at a
cost R_c (detection, restart or replacement, and the restore from that level)::

    S    = sum_l s_l / e_l                       mean stall per base checkpoint
    S_l  = sum_j s_j e_l / lcm(e_j, e_l)         mean stall of a checkpoint that goes to l
    W_l  = max(0, S_l + d_l - e_l T)             wait for l's previous copy (staging reuse)
    W_R  = mean_n max(0, S_n + d_n + R_n - T)    wait for checkpoint n's retention R_n (d_n: the lag
                                                 of the farthest level n goes to; R_n: the listings,
                                                 and the deletes on the levels n goes to); async:
                                                 max(0, S_n + d_n + R_n + d_n+1 - 2T), the next
                                                 checkpoint's copies absorbing one interval
    P    = T + sum_l W_l / e_l + W_R             mean period between base checkpoints
    f    = (T - S) / P                           working fraction between failures
    L_c  = R_c + e_l(c) P / 2 + d_l(c)          per failure: recovery, lost work
    G    = f * max(0, 1 - sum_c lambda_c L_c)

Assumptions: failures of each class are Poisson and independent; rates are small against the
intervals (at most one failure per period, so no second failure during a recovery or before the
destroyed levels are written again: second-order terms dropped); a failure is uniform in time, so
on average half a level's period plus its lag is lost; a copy becomes durable ``lag_s`` after its
checkpoint's stall ends; copies to one level are serialised (the next waits for the previous).
With one level and one class this is exactly :func:`emulator.planner.reference.goodput` (sync:
lag 0; async: lag = D). A class without its own ``recovery_s`` costs the inputs' ``restart_s`` plus
its level's ``restore_s`` (one restart for every class, as older callers give it).
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from typing import Mapping

#: the standard ladder, lowest first: a class whose ``nearest`` level is absent from the inputs
#: recovers from the next level of this ladder that is present
LADDER = ("memory", "peer", "local", "global")


@dataclass(frozen=True)
class Level:
    """One level. ``every``: it takes every N-th base checkpoint (the first level normally 1);
    ``stall_s``: training time it costs per checkpoint it takes (the blocking part); ``lag_s``:
    from the end of that checkpoint's stall until the copy is durable here (background);
    ``restore_s``: reading the checkpoint back from here, *after* the restart
    (:attr:`LevelInputs.restart_s`), for a class without a ``recovery_s`` of its own."""

    name: str
    every: int
    stall_s: float
    lag_s: float
    restore_s: float = 0.0
    #: the retention's deletes on this level after a checkpoint it takes (the next one waits for them)
    retention_s: float = 0.0

    def __post_init__(self):
        if isinstance(self.every, bool) or not isinstance(self.every, int) or self.every < 1:
            raise ValueError(f"level {self.name}: every must be a whole number >= 1, got {self.every!r}")
        for key in ("stall_s", "lag_s", "restore_s", "retention_s"):
            v = getattr(self, key)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"level {self.name}: {key} must be a finite number >= 0, got {v!r}")


@dataclass(frozen=True)
class FailureRate:
    """Failures of one kind: Poisson at ``rate_per_s``; ``nearest`` names the lowest level that
    survives them (process -> memory, node -> peer, group -> global); the levels below are lost.
    ``recovery_s``: what one costs until training resumes (detection, restart or replacement, the
    restore); None: the inputs' ``restart_s`` plus the level's ``restore_s``."""

    name: str
    rate_per_s: float
    nearest: str
    recovery_s: float | None = None

    def __post_init__(self):
        v = self.rate_per_s
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise ValueError(f"class {self.name}: rate_per_s must be a finite number >= 0, got {v!r}")
        r = self.recovery_s
        if r is not None and not (isinstance(r, (int, float)) and math.isfinite(r) and r >= 0):
            raise ValueError(f"class {self.name}: recovery_s must be a finite number >= 0, got {r!r}")


@dataclass(frozen=True)
class LevelInputs:
    """A design: the base interval, its levels (lowest first), the failure classes, the restart."""

    base_interval_s: float
    levels: tuple
    classes: tuple
    restart_s: float = 0.0
    #: after each checkpoint's last copy, its retention's listings on every level (a level it went to
    #: adds its deletes: :attr:`Level.retention_s`), which the next checkpoint waits for
    retention_s: float = 0.0

    def __post_init__(self):
        if not (math.isfinite(self.base_interval_s) and self.base_interval_s > 0):
            raise ValueError(f"base_interval_s must be > 0, got {self.base_interval_s!r}")
        for key in ("restart_s", "retention_s"):
            v = getattr(self, key)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{key} must be >= 0, got {v!r}")
        names = [lv.name for lv in self.levels]
        if not names or len(set(names)) != len(names):
            raise ValueError(f"levels must be one or more, with distinct names: {names}")
        ranks = [LADDER.index(n) for n in names if n in LADDER]
        if ranks != sorted(ranks):
            raise ValueError(f"levels must be listed lowest first ({', '.join(LADDER)}): {names}")
        recovery_levels(self)  # every class has a level to recover from


def recovery_levels(inputs: LevelInputs) -> tuple:
    """Per class, the index of the level it recovers from: its ``nearest``, or where that is
    absent, the next level up the :data:`LADDER`. A class destroys the levels below it."""
    names = [lv.name for lv in inputs.levels]
    out = []
    for c in inputs.classes:
        if c.nearest in names:
            out.append(names.index(c.nearest))
            continue
        if c.nearest not in LADDER:
            raise ValueError(f"class {c.name}: nearest {c.nearest!r} is neither a level ({names}) "
                             f"nor on the ladder {LADDER}")
        above = [i for i, n in enumerate(names) if n in LADDER and LADDER.index(n) > LADDER.index(c.nearest)]
        if not above:
            raise ValueError(f"class {c.name}: no level at or above {c.nearest!r} survives it")
        out.append(above[0])
    return tuple(out)


def recovery_cost(inputs: LevelInputs, k: int, level: int) -> float:
    """Seconds class ``k`` costs until training resumes when it restores from level ``level``."""
    c = inputs.classes[k]
    return c.recovery_s if c.recovery_s is not None else inputs.restart_s + inputs.levels[level].restore_s


# --------------------------------------------------------------------------- goodput

@dataclass(frozen=True)
class ClassCost:
    """One class's share of wall time: its recovery (``recovery``) and lost work (``lost``)."""

    name: str
    level: str
    recovery: float
    lost: float


@dataclass(frozen=True)
class Breakdown:
    """Goodput and where the rest goes, as fractions of wall time: 1 = goodput + stall + wait +
    sum of the classes' recovery and lost (unless failures take all the time: goodput 0)."""

    goodput: float
    stall: float
    wait: float
    period_s: float
    classes: tuple


def breakdown(inputs: LevelInputs) -> Breakdown:
    """The model of the module docstring, term by term."""
    T, levels = inputs.base_interval_s, inputs.levels
    mean_stall = sum(lv.stall_s / lv.every for lv in levels)
    waits = [max(0.0, _co_stall(levels, lv) + lv.lag_s - lv.every * T) for lv in levels]
    period = T + sum(w / lv.every for w, lv in zip(waits, levels)) + _retention_wait(inputs)
    working = max(0.0, T - mean_stall) / period
    costs, failing = [], 0.0
    for k, (c, i) in enumerate(zip(inputs.classes, recovery_levels(inputs))):
        lv = levels[i]
        recovery = c.rate_per_s * recovery_cost(inputs, k, i)
        lost = c.rate_per_s * (lv.every * period / 2 + lv.lag_s)
        failing += recovery + lost
        costs.append(ClassCost(c.name, lv.name, working * recovery, working * lost))
    return Breakdown(working * max(0.0, 1.0 - failing), mean_stall / period, (period - T) / period,
                     period, tuple(costs))


def _retention_wait(inputs: LevelInputs) -> float:
    """The mean wait for a previous checkpoint's retention (W_R): checkpoint n ends when its copy to
    the farthest level it goes to is durable, then its retention runs. Synchronous (no lags): the
    next checkpoint, T later, waits for it. Asynchronous: the next one's copies wait for it, and
    training only when the one after (2T later) waits for that next one to be durable; and the
    pipeline, copies and retentions one after another, sets the period where it is the bottleneck."""
    levels, T = inputs.levels, inputs.base_interval_s
    if inputs.retention_s <= 0 and not any(lv.retention_s > 0 for lv in levels):
        return 0.0
    cycle = math.lcm(*(lv.every for lv in levels))

    def taking(n: int) -> list:
        return [lv for lv in levels if n % lv.every == 0] or [levels[0]]
    background = any(lv.lag_s > 0 for lv in levels)
    total, busy = 0.0, 0.0
    for n in range(1, cycle + 1):
        now = taking(n)
        lag = max(lv.lag_s for lv in now)
        done = sum(lv.stall_s for lv in now) + lag
        retention = inputs.retention_s + sum(lv.retention_s for lv in now)
        busy += lag + retention
        if background:
            total += max(0.0, done + retention + max(lv.lag_s for lv in taking(n + 1)) - 2 * T)
        else:
            total += max(0.0, done + retention - T)
    if background:  # the copies and retentions run one after another: no faster than they take
        return max(total / cycle, busy / cycle - T)
    return total / cycle


def _co_stall(levels, lv: Level) -> float:
    """The mean stall of the checkpoints that go to ``lv``: each level j joins one in e_l / lcm(e_j, e_l)."""
    return sum(o.stall_s * lv.every / math.lcm(o.every, lv.every) for o in levels)


def goodput(inputs: LevelInputs) -> float:
    """Expected useful, surviving fraction of wall time (:func:`breakdown` has the terms)."""
    return breakdown(inputs).goodput


def young_every(inputs: LevelInputs, name: str) -> float:
    """The first-order best ``every`` of one level, the others held: Young's (1974)
    T_l = sqrt(2 C / lambda) for that level alone, in base intervals.

    Level l's own terms in 1 - G are s_l / (e_l T) + Lambda_l e_l T / 2 (no wait, f ~ 1), with
    Lambda_l the rate of the classes recovering at l; their minimum is at e_l T =
    sqrt(2 s_l / Lambda_l). inf when no class recovers at l; 0 for a level that stalls nothing.
    A starting point for :func:`optimize`'s grid, not a substitute: the levels interact (shared
    stalls, waits) and ``every`` is a whole number.
    """
    i = [lv.name for lv in inputs.levels].index(name)
    lam = sum(c.rate_per_s for c, r in zip(inputs.classes, recovery_levels(inputs)) if r == i)
    if lam == 0:
        return math.inf
    return math.sqrt(2 * inputs.levels[i].stall_s / lam) / inputs.base_interval_s


# --------------------------------------------------------------------------- search

@dataclass(frozen=True)
class Grid:
    """Candidates: ``every`` per level name (levels not named keep theirs) and base intervals
    (empty: the inputs' own)."""

    every: Mapping = field(default_factory=dict)
    base_interval_s: tuple = ()

    def combos(self, names, own: Mapping) -> list:
        """Every combination of ``every`` as {level: every}, levels not named at ``own``'s value."""
        unknown = set(self.every) - set(names)
        if unknown:
            raise ValueError(f"grid names levels that the inputs lack: {sorted(unknown)}")
        axes = [tuple(self.every.get(n, (own[n],))) for n in names]
        return [dict(zip(names, combo)) for combo in itertools.product(*axes)]

    def cells(self, inputs: LevelInputs) -> list:
        """Every combination as inputs with the same stalls and lags, in a fixed order (base
        interval outermost). A design's lags change with ``every``: emulator/planner/search.py
        builds its cells from the design instead."""
        names = [lv.name for lv in inputs.levels]
        combos = self.combos(names, {lv.name: lv.every for lv in inputs.levels})
        intervals = tuple(self.base_interval_s) or (inputs.base_interval_s,)
        return [replace(inputs, base_interval_s=t,
                        levels=tuple(replace(lv, every=c[lv.name]) for lv in inputs.levels))
                for t in intervals for c in combos]


@dataclass(frozen=True)
class Cell:
    """One evaluated cell: the model's inputs and its goodput, term by term."""

    inputs: LevelInputs
    terms: Breakdown

    @property
    def goodput(self) -> float:
        return self.terms.goodput

    @property
    def every(self) -> dict:
        return {lv.name: lv.every for lv in self.inputs.levels}

    @property
    def base_interval_s(self) -> float:
        return self.inputs.base_interval_s


def evaluate(inputs: LevelInputs) -> Cell:
    return Cell(inputs, breakdown(inputs))


def best_of(cells) -> Cell:
    """The cell with the highest :func:`goodput` (the first of equals)."""
    best = None
    for inputs in cells:
        cell = evaluate(inputs)
        if best is None or cell.goodput > best.goodput:
            best = cell
    return best


def optimize(inputs: LevelInputs, grid: Grid) -> Cell:
    """The cell of ``grid`` with the highest :func:`goodput` (the first of equals).

    Exhaustive search, as SCR's model is evaluated (Moody et al. SC10) rather than solved: the
    ``every`` values are whole numbers, levels interact through shared stalls and waits, and a
    grid of a few values per level is thousands of cells at most, each a few sums.
    """
    return best_of(grid.cells(inputs))
