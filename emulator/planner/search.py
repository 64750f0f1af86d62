"""The planner's search: a design's best base interval and ``every`` per tier, over a grid.

Every cell of the grid (a base interval, an ``every`` per tier) is the model's inputs for the design
(emulator/planner/inputs.py) and its goodput (emulator/planner/model.py); the best cell wins, the
first of equals. Its base interval is then refined between its grid neighbours (golden section on
a log scale, its ``every`` held), so the answer does not depend on the grid's spacing; a best cell
on the grid's edge is named, since the optimum may lie beyond it.

The default grid: base intervals 2^(1/4) apart (19 %) from the cluster MTTF down to the snapshot
or twenty doublings (a millionth of the MTTF), whichever is longer, and each tier but the nearest
every 1, 2, 4 ... 64th checkpoint (more than a few dozen combinations of those: the best few of a pass
over every third interval, searched whole). Where the design has a training step, every interval searched
and recommended is a whole number of steps (at least one): a cell a config can say.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from emulator.design import costs
from emulator.planner.inputs import DesignLevels
from emulator.planner.model import Cell, Grid, at_interval, evaluate, evaluate_many

EVERY_CHOICES = (1, 2, 4, 8, 16, 32, 64)
STEPS_PER_DOUBLING = 4
DOUBLINGS = 20
_GOLDEN = (math.sqrt(5) - 1) / 2


def base_intervals(lo_s: float, hi_s: float, steps_per_doubling: int = STEPS_PER_DOUBLING) -> tuple:
    """Log-spaced base intervals from ``hi_s`` down to no less than ``lo_s``, ascending."""
    step = 2 ** (1 / steps_per_doubling)
    n = math.floor(math.log(hi_s / lo_s, step) + 1e-9) + 1
    return tuple(hi_s / step ** (n - 1 - i) for i in range(n))


def default_grid(design) -> Grid:
    m = design.failures.cluster_mttf_s
    lo = min(m, max(m / 2 ** DOUBLINGS, costs.snapshot_seconds(design)))
    return Grid(every={name: EVERY_CHOICES for name in design.tiers[1:]},
                base_interval_s=whole_steps(base_intervals(lo, m), config_step_s(design)))


def config_step_s(design) -> float:
    """The training step a config's intervals count (0: any interval, a napkin's or the run itself's)."""
    return 0.0 if design.as_run else design.step_seconds


def whole_steps(intervals, step_s: float) -> tuple:
    """``intervals`` as whole numbers of training steps (at least one; duplicates dropped): the intervals
    a config can say (checkpoint.interval_steps). Unchanged where the design has no step time."""
    if not step_s:
        return tuple(intervals)
    return tuple(sorted({max(1, round(t / step_s)) * step_s for t in intervals}))


@dataclass(frozen=True)
class Search:
    """One mode's search: the design's own cell, the grid's best refined, the grid's best as found, the
    axes where that lies on the grid's edge, the best per base interval, and the best cell ``keep``
    accepts (None without one, or when none)."""

    mode: str
    configured: Cell
    best: Cell
    grid_best: Cell
    on_edge: tuple
    curve: tuple
    kept: Cell | None = None

    @property
    def recommended(self) -> Cell:
        """The best cell ``keep`` accepts; the best where none is."""
        return self.kept if self.kept is not None else self.best


#: a grid of more combinations of ``every`` than this is searched in two passes
FEW_COMBOS = 24
#: the combinations the second pass searches whole: the coarse pass's best, and its best that ``keep`` accepts
SHORTLIST = 10


def _shortlist(levels: DesignLevels, combos: list, intervals: tuple, keep) -> list:
    """The combinations of ``every`` worth a whole search: scored on every third interval of the grid (by
    their best goodput, and their best a ``keep`` accepts), the best few of each, and the design's own."""
    coarse = intervals[::3] or intervals
    scored = []
    for every in combos:
        cells = evaluate_many(levels.inputs(coarse[0], every), coarse)
        kept = [c.goodput for c in cells if keep is not None and keep(c)]
        scored.append((max(c.goodput for c in cells), max(kept, default=-1.0), every))
    best = sorted(scored, key=lambda x: -x[0])[:SHORTLIST]
    best_kept = sorted(scored, key=lambda x: -x[1])[:SHORTLIST]
    out = [levels.every]
    for _, _, every in best + best_kept:
        if every not in out:
            out.append(every)
    return out


def search(levels: DesignLevels, grid: Grid, keep=None) -> Search:
    """The best cell of ``grid`` for the design in ``levels``' mode (module docstring); a grid of many
    combinations of ``every`` (four tiers: 343) is searched whole only for the few a coarse pass finds best."""
    intervals = tuple(grid.base_interval_s) or (levels.design.base_interval_s,)
    per_interval = [None] * len(intervals)
    kept = None
    combos = grid.combos(levels.names, levels.every)
    if len(combos) > FEW_COMBOS:
        combos = _shortlist(levels, combos, intervals, keep)
    for every in combos:
        for k, cell in enumerate(evaluate_many(levels.inputs(intervals[0], every), intervals)):
            if per_interval[k] is None or cell.goodput > per_interval[k].goodput:
                per_interval[k] = cell
            if keep is not None and keep(cell) and (kept is None or cell.goodput > kept.goodput):
                kept = cell
    k = max(range(len(intervals)), key=lambda i: (per_interval[i].goodput, -i))
    found = per_interval[k]
    edges = (("base interval",) if len(intervals) > 1 and k in (0, len(intervals) - 1) else ()) + tuple(
        n for n, values in grid.every.items() if len(values) > 1 and found.every[n] == max(values))
    lo, hi = intervals[max(0, k - 1)], intervals[min(len(intervals) - 1, k + 1)]
    best = _stepped(_refined(found, lo, hi), found, config_step_s(levels.design))
    curve = tuple((t, c.goodput, c.every) for t, c in zip(intervals, per_interval))
    if keep is not None and keep(best):  # the refined optimum meets the bounds: it is the best kept
        kept = best
    return Search(levels.mode, evaluate(levels.inputs()), best, found, edges, curve, kept)


def _stepped(best: Cell, found: Cell, step_s: float) -> Cell:
    """The refined cell at a whole number of steps: the better of the two around it (the grid's cell if
    better still), where the design has a step time."""
    if not step_s:
        return best
    steps = best.base_interval_s / step_s
    cells = [evaluate(at_interval(best.inputs, max(1, n) * step_s)) for n in {math.floor(steps), math.ceil(steps)}]
    return max([found] + cells, key=lambda c: c.goodput)


def _refined(cell: Cell, lo: float, hi: float, iterations: int = 40) -> Cell:
    """The best base interval in [lo, hi] for the cell's ``every``: golden section on log t."""
    if hi <= lo:
        return cell

    def at(log_t: float) -> Cell:
        return evaluate(at_interval(cell.inputs, math.exp(log_t)))
    a, b = math.log(lo), math.log(hi)
    c, d = b - _GOLDEN * (b - a), a + _GOLDEN * (b - a)
    fc, fd = at(c), at(d)
    for _ in range(iterations):
        if fc.goodput >= fd.goodput:
            b, d, fd = d, c, fc
            c = b - _GOLDEN * (b - a)
            fc = at(c)
        else:
            a, c, fc = c, d, fd
            d = a + _GOLDEN * (b - a)
            fd = at(d)
    best = fc if fc.goodput >= fd.goodput else fd
    return best if best.goodput > cell.goodput else cell
