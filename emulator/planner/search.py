"""The planner's search: a design's best base interval and ``every`` per tier, over a grid.

Every cell of the grid (a base interval, an ``every`` per tier) is the model's inputs for the design
(emulator/planner/inputs.py) and its goodput (emulator/planner/model.py); the best cell wins, the
first of equals. Its base interval is then refined between its grid neighbours (golden section on
a log scale, its ``every`` held), so the answer does not depend on the grid's spacing; a best cell
on the grid's edge is named, since the optimum may lie beyond it.

The default grid: base intervals 2^(1/4) apart (19 %) from the cluster MTTF down to the snapshot
(no checkpoint can come sooner than its own stall) or twenty doublings (a millionth of the MTTF),
whichever is longer, and each tier but the nearest every 1, 2, 4 ... 64th checkpoint.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from emulator.design import costs
from emulator.planner.inputs import DesignLevels
from emulator.planner.model import Cell, Grid, LevelInputs, evaluate

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
    return Grid(every={name: EVERY_CHOICES for name in design.tiers[1:]}, base_interval_s=base_intervals(lo, m))


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


def search(levels: DesignLevels, grid: Grid, keep=None) -> Search:
    """The best cell of ``grid`` for the design in ``levels``' mode (module docstring)."""
    intervals = tuple(grid.base_interval_s) or (levels.design.base_interval_s,)
    per_interval = [None] * len(intervals)
    kept = None
    for every in grid.combos(levels.names, levels.every):
        lv = levels.levels(every)
        for k, t in enumerate(intervals):
            cell = evaluate(LevelInputs(t, lv, levels.classes, retention_s=levels.retention_s))
            if per_interval[k] is None or cell.goodput > per_interval[k].goodput:
                per_interval[k] = cell
            if keep is not None and keep(cell) and (kept is None or cell.goodput > kept.goodput):
                kept = cell
    k = max(range(len(intervals)), key=lambda i: (per_interval[i].goodput, -i))
    found = per_interval[k]
    edges = (("base interval",) if len(intervals) > 1 and k in (0, len(intervals) - 1) else ()) + tuple(
        n for n, values in grid.every.items() if len(values) > 1 and found.every[n] == max(values))
    lo, hi = intervals[max(0, k - 1)], intervals[min(len(intervals) - 1, k + 1)]
    best = _refined(found, lo, hi)
    curve = tuple((t, c.goodput, c.every) for t, c in zip(intervals, per_interval))
    return Search(levels.mode, evaluate(levels.inputs()), best, found, edges, curve, kept)


def _refined(cell: Cell, lo: float, hi: float, iterations: int = 40) -> Cell:
    """The best base interval in [lo, hi] for the cell's ``every``: golden section on log t."""
    if hi <= lo:
        return cell

    def at(log_t: float) -> Cell:
        return evaluate(replace(cell.inputs, base_interval_s=math.exp(log_t)))
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
