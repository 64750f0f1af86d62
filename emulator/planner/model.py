"""The planner's model: goodput of a ladder of checkpoint levels, and the best cell of a grid.

Pure math, no I/O; emulator/planner/inputs.py builds its inputs from a design. The job trains
``T`` (the base interval: training time between checkpoints, as the emulator and the simulator
take it) and then checkpoints; checkpoint n (counted from the job's start, across failures) goes to
every level whose ``every`` divides n: host memory every one, a peer replica every k_peer-th, node
NVMe every k_local-th, global storage every k_global-th. A failure class (process crash, node loss,
the loss of a replica group) destroys the levels that do not survive it; the job restores the
newest checkpoint a surviving level holds (the nearest level among equals), and loses the work
since.

Two parts, in the style of Moody et al., "Design, modeling, and evaluation of a scalable multi-level
checkpointing system" (SC10, SCR) and Daly's exact restart model (2006):

- **Without failures** the ladder's checkpoints settle into a periodic schedule
  (emulator/planner/cycle.py): per cycle of lcm(every) checkpoints its length P, the training L*T
  in it (f = L*T / P), its stalls, waits (a checkpoint waiting for the previous one, or for a
  retention) and the interference its background copies cost; each checkpoint's start (the progress
  it saves) and when it is durable on each level.
- **Failures** are Poisson at rate lambda (the classes' rates lambda_c summed), whatever the job is
  doing. After a recovery the job runs until the next failure, X ~ Exp(lambda) later; a run phase
  keeps the progress of the newest checkpoint durable on a level that survives the failure that
  ends it. With m_k the earliest time any checkpoint from the k-th on is durable there (a run phase
  starting at the end of checkpoint phi's stall, a_phi), the progress a run phase keeps is::

      E[W_c] = T * sum_phi w_phi * sum_{k > phi} exp(-lambda (m_k - a_phi))

  (w_phi: the chance a run phase starts at phi, stationary over the chain of phases: the count goes on
  after a restart, so the next phase starts where the failure struck, emulator/planner/phases.py; the
  sum is a geometric series over cycles). A recovery of class c costs R_c: detection, restart or
  replacement, and the restore of the copy it restores, read where the other nodes read that step (its
  mix over the cycle: a nearer tier holds it until its retention deletes it). A failure during a
  recovery starts another, from an older copy where the new class spares less (nothing was written
  since): the chain's time and the progress it throws away (:func:`recovery_chains`). A run phase ended
  by a class that spares less than the one before it falls back to an older copy unless it made a new
  one, and by the deficit the earlier phases carried: each restore of a lighter class is ahead of the
  newest copy a heavier class spares, by more after every phase that made none (:func:`deficit_chains`).
  With a run phase's recoveries taking ``recovery``::

      G = (sum_c (lambda_c / lambda) E[W_c] - thrown) / (recovery + 1 / lambda)

  For lambda P << 1 this is the first-order model G = f (1 - sum_c lambda_c (R_c + e_c P / 2 + d_c)),
  e_c P / 2 + d_c the age of the newest surviving copy; with one level and one class it is
  :func:`emulator.planner.reference.goodput`.

Assumptions: failures of each class are Poisson and independent; a run phase after a recovery
follows the settled schedule from where the count stood, its backlog included (a restart empties
the pipeline: where checkpoints wait most of the time, an open counterexample of the agreement
tests); the deficit a phase starts with is independent of how it ends (its expectation is carried).
"""
from __future__ import annotations

import copy
import itertools
import math
from dataclasses import dataclass, field, replace
from typing import Mapping

import numpy as np


from emulator.design import ladder
from emulator.planner import phases
from emulator.planner.cycle import Checkpoint, steady
from emulator.planner.renewal import Areas, behind_on_average, class_terms, deletions, newest_times

#: the standard ladder, lowest first (emulator/design/ladder.py): a class whose ``nearest`` level is
#: absent from the inputs recovers from the next level of this ladder that is present
LADDER = ladder.names()


def _finite(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


@dataclass(frozen=True)
class Level:
    """One level. ``every``: it takes every N-th base checkpoint (the first level normally 1);
    ``stall_s``: the training time it blocks per checkpoint it takes; ``lag_s``: from the end of that
    checkpoint's stall until the copy is durable here (background); ``restore_s``: reading the
    checkpoint back from here, *after* the restart (:attr:`LevelInputs.restart_s`), for a class
    without a recovery of its own; ``retention_s``: the deletes here after a checkpoint it takes."""

    name: str
    every: int
    stall_s: float
    lag_s: float
    restore_s: float = 0.0
    retention_s: float = 0.0

    def __post_init__(self):
        if isinstance(self.every, bool) or not isinstance(self.every, int) or self.every < 1:
            raise ValueError(f"level {self.name}: every must be a whole number >= 1, got {self.every!r}")
        for key in ("stall_s", "lag_s", "restore_s", "retention_s"):
            if not _finite(getattr(self, key)):
                raise ValueError(f"level {self.name}: {key} must be a finite number >= 0, got {getattr(self, key)!r}")


@dataclass(frozen=True)
class FailureRate:
    """Failures of one kind: Poisson at ``rate_per_s``; ``nearest`` names the lowest level that survives
    them (process -> memory, node -> peer, group -> global), ``survives`` every level that does (None:
    ``nearest`` and the levels above it). ``recovery_s``: what one costs until training resumes
    (None: the inputs' ``restart_s`` plus the level's ``restore_s``); ``restores``: per position of the
    inputs' cycle, (the index of the level its copy is restored from or None, the recovery's seconds),
    where the design decides both (emulator/planner/inputs.py)."""

    name: str
    rate_per_s: float
    nearest: str
    recovery_s: float | None = None
    survives: tuple | None = None
    restores: tuple | None = None
    #: {level index: seconds} of a restore of an older copy from that level, every node reading it there
    fallback: Mapping | None = None

    def __post_init__(self):
        if not _finite(self.rate_per_s):
            raise ValueError(f"class {self.name}: rate_per_s must be a finite number >= 0, got {self.rate_per_s!r}")
        if self.recovery_s is not None and not _finite(self.recovery_s):
            raise ValueError(f"class {self.name}: recovery_s must be a finite number >= 0, got {self.recovery_s!r}")


@dataclass(frozen=True)
class LevelInputs:
    """A design: the base interval (training between checkpoints), its levels (lowest first), the
    failure classes, the restart. ``cycle``: its checkpoints' positions (emulator/planner/cycle.py),
    None to derive them from the levels; ``blocking``: whether a checkpoint's copies block training
    (sync; None: where no level has a lag)."""

    base_interval_s: float
    levels: tuple
    classes: tuple
    restart_s: float = 0.0
    #: after each checkpoint's last copy, its retention's listings on every level (a level it went to
    #: adds its deletes: :attr:`Level.retention_s`), which the next checkpoint's pipeline waits for
    retention_s: float = 0.0
    cycle: tuple | None = None
    blocking: bool | None = None

    def __post_init__(self):
        if not (math.isfinite(self.base_interval_s) and self.base_interval_s > 0):
            raise ValueError(f"base_interval_s must be > 0, got {self.base_interval_s!r}")
        for key in ("restart_s", "retention_s"):
            if not _finite(getattr(self, key)):
                raise ValueError(f"{key} must be >= 0, got {getattr(self, key)!r}")
        names = [lv.name for lv in self.levels]
        if not names or len(set(names)) != len(names):
            raise ValueError(f"levels must be one or more, with distinct names: {names}")
        ranks = [LADDER.index(n) for n in names if n in LADDER]
        if ranks != sorted(ranks):
            raise ValueError(f"levels must be listed lowest first ({', '.join(LADDER)}): {names}")
        recovery_levels(self)  # every class has a level to recover from

    @property
    def is_blocking(self) -> bool:
        return self.blocking if self.blocking is not None else not any(lv.lag_s > 0 for lv in self.levels)


def recovery_levels(inputs: LevelInputs) -> tuple:
    """Per class, the index of the nearest level that survives it: its ``nearest``, or where that is
    absent, the next level up the :data:`LADDER`."""
    names = [lv.name for lv in inputs.levels]
    out = []
    for c in inputs.classes:
        if c.survives is not None:
            kept = [i for i, n in enumerate(names) if n in c.survives]
            if not kept:
                raise ValueError(f"class {c.name}: no level survives it ({names})")
            out.append(kept[0])
            continue
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


# --------------------------------------------------------------------------- the cycle and each class's restores

def taking(levels, n: int) -> list:
    """The indices of the levels checkpoint ``n`` goes to (the nearest at least)."""
    return [i for i, lv in enumerate(levels) if n % lv.every == 0] or [0]


def cycle_of(inputs: LevelInputs) -> tuple:
    """The inputs' cycle, or one derived from the levels: a checkpoint stalls for its levels' stalls and
    is durable on each its lag after its stall (its pipeline the longest lag)."""
    if inputs.cycle is not None:
        return inputs.cycle
    levels = inputs.levels
    out = []
    for n in range(1, math.lcm(*(lv.every for lv in levels)) + 1):
        idx = taking(levels, n)
        lags = tuple(0.0 if inputs.is_blocking else levels[i].lag_s for i in idx)
        out.append(Checkpoint(tuple(idx), sum(levels[i].stall_s for i in idx), lags, max(lags),
                              inputs.retention_s + sum(levels[i].retention_s for i in idx)))
    return tuple(out)


def alive_levels(inputs: LevelInputs, k: int) -> set:
    """The indices of the levels whose copies survive class ``k``."""
    c, first = inputs.classes[k], recovery_levels(inputs)[k]
    return {i for i, lv in enumerate(inputs.levels) if (lv.name in c.survives if c.survives is not None else i >= first)}


def fallback_cost(inputs: LevelInputs, k: int, level: int) -> float:
    """Seconds class ``k`` costs restoring an older copy from ``level`` (every node reading it there)."""
    c = inputs.classes[k]
    if c.fallback is not None and level in c.fallback:
        return c.fallback[level]
    return recovery_cost(inputs, k, level)


def restores_of(inputs: LevelInputs, k: int, cycle: tuple) -> tuple:
    """Class ``k``'s restore of each position of ``cycle`` as its newest surviving copy: (the level it
    is read from or None, pieces), pieces nearest first ``(level or None, keep, seconds)``: what the
    recovery costs while that nearer level still holds the copy (``keep``: until that many newer
    copies are durable there and its retention deleted it), the last piece (None) after. The class's
    own where given, else the nearest level of the position that survives it, at :func:`recovery_cost`."""
    c = inputs.classes[k]
    if c.restores is not None:
        return tuple((lv, r if isinstance(r, tuple) else ((None, 0, r),)) for lv, r in c.restores)
    alive = alive_levels(inputs, k)
    out = []
    for ck in cycle:
        level = next((i for i in ck.levels if i in alive), None)
        out.append((level, ((None, 0, recovery_cost(inputs, k, level) if level is not None else 0.0),)))
    return tuple(out)


# --------------------------------------------------------------------------- goodput

@dataclass(frozen=True)
class ClassCost:
    """One class's share of wall time: its recoveries (``recovery``) and lost work (``lost``); the level
    it restores from most often, and its mean recovery's seconds."""

    name: str
    level: str
    recovery: float
    lost: float
    recovery_s: float = 0.0


@dataclass(frozen=True)
class Breakdown:
    """Goodput and where the rest goes, as fractions of wall time: goodput + stall + wait + the classes'
    recovery and lost = 1. ``period_s``: the mean time from one checkpoint's start to the next's."""

    goodput: float
    stall: float
    wait: float
    period_s: float
    classes: tuple
    #: the share of wall time the job runs (not recovering from a failure)
    running: float = 1.0


def breakdown_many(inputs: LevelInputs, intervals) -> list:
    """:func:`breakdown` of the inputs at each base interval of ``intervals`` (one schedule computation)."""
    cycle = cycle_of(inputs)
    s = steady(cycle, intervals, inputs.is_blocking)
    L = len(cycle)
    f = L * s.intervals / s.period
    lam = sum(c.rate_per_s for c in inputs.classes)
    names = [lv.name for lv in inputs.levels]
    alive = [frozenset(alive_levels(inputs, k)) for k in range(len(inputs.classes))]
    newest: dict = {}

    def times(levels: frozenset):
        if levels not in newest:
            newest[levels] = newest_times(cycle, s, levels)
        return newest[levels]
    gone_at = deletions(cycle, s)
    ph = phases.Phases(cycle, s, lam) if lam > 0 else None
    starts = ph.starts if ph is not None else phases.time_shares(s)
    terms = [class_terms(cycle, s, restores_of(inputs, k, cycle), times(alive[k]), lam or 1e-300, gone_at, starts)
             for k in range(len(inputs.classes))]
    if lam <= 0:  # no failures: each class's restores said all the same
        return [Breakdown(float(f[i]), float((s.stall[i] + s.interference[i]) / s.period[i]),
                          float(s.wait[i] / s.period[i]), float(s.period[i] / L),
                          tuple(ClassCost(c.name, names[max(t[3], key=lambda j: t[3][j][i]) if t[3] else r], 0.0, 0.0,
                                          float(t[4][i]))
                                for c, r, t in zip(inputs.classes, recovery_levels(inputs), terms)))
                for i in range(len(f))]
    shares = [c.rate_per_s / lam for c in inputs.classes]
    chains = deficit_chains(ph, alive, shares, [1.0 - t[2] for t in terms])
    for k, t in enumerate(terms):
        _fall_back(inputs, k, t, chains[alive[k]], alive, lam, s.intervals)
    after = {(alive[j], alive[j] & target): s.intervals * v for target, c in chains.items() for j, v in c.after.items()}
    spent, thrown = recovery_chains(inputs, shares, terms, alive, lam, s, Areas(s, times), after)
    recovering = sum(spent)
    cycle_s = recovering + 1 / lam
    kept = sum(sh * t[0] for sh, t in zip(shares, terms)) - sum(thrown)
    run = (1 / lam) / cycle_s
    made = ph.made()  # a run phase's progress; the rest of its time stalls or waits
    blocked = s.stall + s.interference + s.wait
    idle = run * (1 - lam * made) / np.where(blocked > 0, blocked, 1.0)
    out, nearest = [], recovery_levels(inputs)
    for i in range(len(f)):
        classes = []
        for k, (c, sh, (progress, _, _, levels, mean_s, _), r) in enumerate(zip(inputs.classes, shares, terms,
                                                                                  nearest)):
            level = max(levels, key=lambda j: levels[j][i]) if levels else r
            classes.append(ClassCost(c.name, names[level], float(spent[k][i] / cycle_s[i]),
                                     float(max(0.0, sh * (made[i] - progress[i]) + thrown[k][i]) / cycle_s[i]),
                                     float(mean_s[i])))
        out.append(Breakdown(float(max(0.0, kept[i]) / cycle_s[i]),
                             float(idle[i] * (s.stall[i] + s.interference[i])),
                             float(idle[i] * s.wait[i]), float(s.period[i] / L), tuple(classes),
                             float(run[i])))
    return out


def _fall_back(inputs: LevelInputs, k: int, t: list, chain: phases.Deficit, alive: list, lam: float,
               intervals) -> None:
    """Class ``k``'s terms ``t`` after a lighter class's recovery: it keeps less by the deficit carried, and
    restores the older copy, where it does, from a level both classes spare."""
    t[0] = t[0] - intervals * chain.lost
    for j, chance in chain.fallbacks.items():
        old = fallback_cost(inputs, k, min(alive[j] & alive[k]))
        t[1] = t[1] + chance * (-math.expm1(-lam * old) / lam - t[1])
        t[2] = t[2] + chance * (math.exp(-lam * old) - t[2])


def deficit_chains(ph: phases.Phases, alive: list, shares: list, struck: list) -> dict:
    """{levels a class spares: its phases.Deficit}, each class's deficit kept through its recovery
    unless a class that resets it strikes then (``struck``: per class, the chance a failure comes during
    its recovery; a lighter class striking starts another recovery, which may be struck in turn)."""
    out = {}
    for target in set(alive):
        resets = sum(sh for sh, a in zip(shares, alive) if not phases.carries(a, target))
        carrying = [k for k, a in enumerate(alive) if phases.carries(a, target)]
        # k's deficit is reset with x_k = q_k (resets + sum over carrying c of share_c x_c) = q_k resets / (1 - Q)
        lighter = sum(shares[c] * struck[c] for c in carrying)
        free = 1.0 - lighter  # >= resets: 0 only where no class resets and every recovery is struck
        stays = [1.0 - np.divide(struck[k] * resets, free, out=np.zeros_like(free), where=free > 0)
                 if k in carrying else np.ones_like(struck[k]) for k in range(len(alive))]
        out[target] = ph.deficit(target, alive, shares, stays)
    return out


def recovery_chains(inputs: LevelInputs, shares: list, terms: list, alive: list, lam: float, s, areas,
                    after: dict) -> tuple:
    """(per class, the expected time a run phase's recoveries spend recovering from it; per class, the
    progress its failures during a recovery throw away), per row. A failure during a recovery starts
    another, of the class drawn, from an older copy: nothing was written since, and each failure wipes
    the levels its class does not spare, so it restores the newest copy every failure so far spared,
    from the nearest such level (:func:`fallback_cost`). The first recovery restores the run phase's mix.
    ``areas``: each set of levels' copies' newest times, integrated (emulator/planner/renewal.py ``Areas``);
    ``after``: {(levels restored from, levels a failure spares): the progress between their newest copies
    right after such a recovery, carried over run phases} (:func:`deficit_chains`), the cycle's mean else."""
    spent = [0.0 * t[1] for t in terms]
    lost = [0.0 * t[1] for t in terms]
    behind: dict = {}

    def fell(left: frozenset, nxt: frozenset):
        if (left, nxt) not in behind:
            behind[(left, nxt)] = after[(left, nxt)] if (left, nxt) in after else (
                s.intervals * behind_on_average(s, areas, left, nxt))
        return behind[(left, nxt)]

    def fall(mass: dict, k: int, left: frozenset, cut) -> None:
        for j, sj in enumerate(shares):
            nxt = frozenset(left & alive[j])
            if sj <= 0 or not nxt:
                continue
            mass[(j, nxt)] = mass.get((j, nxt), 0.0) + cut * sj
            if nxt != left:
                lost[j] = lost[j] + cut * sj * fell(left, nxt)
    mass = {}
    for k, (sh, t) in enumerate(zip(shares, terms)):
        spent[k] = spent[k] + sh * t[1]
        fall(mass, k, frozenset(alive[k]), sh * (1 - t[2]))
    for _ in range(500):
        if not mass or max(float(np.max(v)) for v in mass.values()) < 1e-12:
            break
        after = {}
        for (k, left), mu in mass.items():
            seconds = fallback_cost(inputs, k, min(left))
            spent[k] = spent[k] + mu * -math.expm1(-lam * seconds) / lam
            fall(after, k, left, mu * -math.expm1(-lam * seconds))
        mass = after
    return spent, lost


def breakdown(inputs: LevelInputs) -> Breakdown:
    """The model of the module docstring, term by term."""
    return breakdown_many(inputs, [inputs.base_interval_s])[0]


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
        """Every combination as inputs with the same stalls and lags, in a fixed order (base interval
        outermost). A design's cycle changes with ``every``: emulator/planner/search.py builds its
        cells from the design instead."""
        if inputs.cycle is not None:
            raise ValueError("inputs with a design's cycle: build their cells from the design (planner/search.py)")
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


def at_interval(inputs: LevelInputs, interval_s: float) -> LevelInputs:
    """``inputs`` at another base interval (checked once: every other field is the same)."""
    if not (math.isfinite(interval_s) and interval_s > 0):
        raise ValueError(f"base_interval_s must be > 0, got {interval_s!r}")
    out = copy.copy(inputs)
    object.__setattr__(out, "base_interval_s", float(interval_s))
    return out


def evaluate_many(inputs: LevelInputs, intervals) -> list:
    """The cells of ``inputs`` at each base interval of ``intervals``."""
    return [Cell(at_interval(inputs, t), b) for t, b in zip(intervals, breakdown_many(inputs, intervals))]


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
    grid of a few values per level is thousands of cells at most.
    """
    return best_of(grid.cells(inputs))
