"""The agreement suite's intervals: for every shipped design, the planner's best cell and the best cell
of a simulated sweep over the same grid send checkpoints to global storage within one grid step of
each other, and a best cell on the grid's edge is flagged. A failure every 4 hours of the job, as in
tests/system/simulation/test_agreement.py; about a minute of simulation in all.
"""
from __future__ import annotations

import pytest
from test_agreement import DESIGNS, _design
from test_interval_agreement import _grid_around, sweep_agrees

from emulator import planner

SEEDS = (1, 2)
DAYS = 4


def _failing(name: str):
    d = _design(name)
    return _design(name, mttf_hours=min(d.failures.mttf_hours, 4 * d.job.accelerators))


@pytest.mark.parametrize("name", DESIGNS)
def test_the_planners_interval_is_the_simulated_sweeps_within_one_step(name):
    d = _failing(name)
    mode = planner.plan(d).recommended
    best = planner.plan(d, modes=(mode,)).modes[mode].best
    grid = _grid_around(best.base_interval_s)
    if len(d.tiers) == 1:
        grid = planner.Grid(every={}, base_interval_s=grid.base_interval_s)
    sweep_agrees(d, mode, grid, SEEDS, DAYS)


@pytest.mark.parametrize("name", ["design-nvme-s3", "design-llama70-128-nvme-s3"])
def test_a_best_cell_on_the_grids_edge_is_flagged(name):
    """A grid wholly below the best interval: its best is its longest, flagged as the grid's edge."""
    d = _failing(name)
    best = planner.plan(d).best
    low = planner.Grid(every={}, base_interval_s=tuple(best.base_interval_s / 2 ** k for k in (6, 5, 4, 3)))
    search = planner.plan(d, grid=low).modes[planner.plan(d, grid=low).recommended]
    assert search.grid_best.base_interval_s == low.base_interval_s[-1]
    assert "base interval" in search.on_edge
