"""Reproduction 4: for one 70B design, `plan`, `tune` and the simulator recommend the same interval.

Today `plan` said 9.8 minutes async, `simulate --interval planner` every 80.6 s and `tune` 8.6 minutes: three
models of one job. Now `plan` and `tune` run the one planner on the one design (tune: tests/unit/cli/test_tune_layout.py),
over one grid its best cell sends checkpoints to global storage within one grid step as often as the best
cell of a simulated sweep of the same grid (the same failures in every cell), and simulated gives up less
than the noise against it. A short MTTF (2,000 h per accelerator: a failure every
2 hours) gives the simulation hundreds of failures in 40 days.

The simulated side is the one simulator (emulator/simulation/model.py) on the same design, each cell's
``every`` set on its ladder and its base interval (start to start) as training time between checkpoints.
"""
from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import yaml
from level_results import LLAMA70B

from emulator import planner
from emulator.cli import main
from emulator.config import load_config
from emulator.design import Calibration, resolve
from emulator.planner.inputs import DesignLevels
from emulator.simulation.arrivals import Arrivals
from emulator.simulation.model import RunSpec, simulate

MTTF_HOURS = 2000
DAYS = 40
#: two seeds, ~490 failures each: the best cell more than one step from the planner's is 0.010
#: (sync) and 0.006 (async) of goodput under the sweep's best, with two seeds as with three, and
#: the planner's cell 0.0008 and 0.0001 under it (the bound: 0.002; any one seed alone: <= 0.0015)
SEEDS = (1, 2)


def simulated_goodput(design, mode: str, base_interval_s: float, every: dict, seed: int = 1,
                      days: float = DAYS) -> float:
    """The simulator's goodput of one cell (the same failures for every cell of a sweep)."""
    d = replace(design, ladder=tuple(replace(t, every=every.get(t.name, t.every)) for t in design.ladder))
    spec = RunSpec(mode, base_interval_s, horizon_s=days * 86400)
    return simulate(d, spec, Arrivals(d.failures, seed=seed)).goodput


def sweep_agrees(design, mode: str, grid: planner.Grid, seeds=SEEDS, days: float = DAYS) -> list:
    """The simulated sweep of ``grid`` (each cell the mean of ``seeds``): its best cell sends
    checkpoints to global storage within one grid step of the planner's best cell over the same
    grid (asserted). Returns the cells, (goodput, base interval, every), for further checks."""
    mine = planner.plan(design, grid=grid, modes=(mode,)).modes[mode].grid_best
    levels = DesignLevels(design, mode)
    cells = [(sum(simulated_goodput(design, mode, t, every, seed, days) for seed in seeds) / len(seeds), t, every)
             for every in grid.combos(levels.names, levels.every) for t in grid.base_interval_s]
    top, t_sim, every_sim = max(cells, key=lambda c: c[0])
    assert abs(_step(grid, mine.every["global"] * mine.base_interval_s)
               - _step(grid, every_sim["global"] * t_sim)) <= 1, (mine.every, mine.base_interval_s, every_sim, t_sim)
    return cells


def _step(grid: planner.Grid, interval_s: float) -> int:
    """Which step of the grid's sqrt(2) ladder ``interval_s`` is (every x a base interval lies on it)."""
    return round(2 * math.log2(interval_s / grid.base_interval_s[0]))


def _grid_around(t: float) -> planner.Grid:
    """Seven base intervals a factor sqrt(2) apart around ``t``, global storage every 1st, 2nd or 4th."""
    return planner.Grid(every={"global": (1, 2, 4)}, base_interval_s=tuple(t * 2 ** (k / 2) for k in range(-3, 4)))


@pytest.fixture(scope="module")
def design_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("agreement") / "llama3-70b.yaml"
    path.write_text(yaml.safe_dump(LLAMA70B))
    return path


@pytest.mark.parametrize("mode, interference", [("sync", 0.0), ("async", 0.3)])
def test_the_planners_best_cell_is_the_simulated_sweeps_within_one_step(design_path, capsys, mode, interference):
    """Async copies cost training a measured share of their time here (a calibration's interference),
    without which the best async interval is as short as the copies allow."""
    cal = Calibration(interference_share=interference)
    design = resolve(load_config(str(design_path)), mttf_hours=MTTF_HOURS, calibration=cal)
    # plan, the command, recommends the planner's best (its own, finer grid)
    assert main(["plan", str(design_path), "--mttf-hours", str(MTTF_HOURS), "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    best = planner.plan(design, modes=(mode,)).modes[mode].best
    if interference == 0:
        assert planned["modes"][mode]["best"]["base_interval_s"] == pytest.approx(best.base_interval_s)
        assert planned["modes"][mode]["best"]["every"] == best.every
    # over one grid, the planner's best cell and the simulated sweep's (the mean of SEEDS, the same
    # failures in every cell): a tier's interval is ``every`` x the base interval, and cells with
    # the same interval to global storage lie on a ridge flatter than the simulation's noise
    grid = _grid_around(best.base_interval_s)
    cells = sweep_agrees(design, mode, grid)
    top = max(g for g, _, _ in cells)
    mine = planner.plan(design, grid=grid, modes=(mode,)).modes[mode].grid_best
    # and the planner's cell, simulated, gives up less than the noise against the sweep's best
    at_mine = next(g for g, t, every in cells if t == mine.base_interval_s and every == mine.every)
    assert top - at_mine < 0.002, (top, at_mine)
