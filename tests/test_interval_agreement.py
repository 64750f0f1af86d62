"""Reproduction 4: for one 70B design, `plan`, `tune` and the simulator recommend the same interval.

Today `plan` said 9.8 minutes async, `simulate --interval planner` every 80.6 s and `tune` 8.6 minutes: three
models of one job. Now `plan` and `tune` run the one planner on the one design (tune: tests/test_tune_layout.py),
and its best cell of a grid is within one grid step, on every axis, of the best cell of a simulated sweep of
the same grid (the same failures in every cell). A short MTTF (2,000 h per accelerator: a failure every
2 hours) gives the simulation hundreds of failures in 40 days.

The simulated side runs today's SimPy level model (emulator/simulation/levels.py) on the planner's inputs
for each cell; when the simulator reads the design itself, :func:`simulated_goodput` is the one line to change.
"""
from __future__ import annotations

import json

import pytest
import yaml
from test_plan_design import LLAMA70B

from emulator import planner
from emulator.cli import main
from emulator.config import load_config
from emulator.design import Calibration, resolve
from emulator.planner.inputs import DesignLevels

MTTF_HOURS = 2000
DAYS = 40


def simulated_goodput(design, mode: str, base_interval_s: float, every: dict, seed: int = 1) -> float:
    """The simulator's goodput of one cell (the same failures for every cell of a sweep)."""
    from emulator.simulation.levels import simulate
    return simulate(DesignLevels(design, mode).inputs(base_interval_s, every), seed=seed,
                    horizon_s=DAYS * 86400).goodput


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
    # over one grid, the planner's best cell and the simulated sweep's
    grid = _grid_around(best.base_interval_s)
    mine = planner.plan(design, grid=grid, modes=(mode,)).modes[mode].grid_best
    levels = DesignLevels(design, mode)
    cells = [(simulated_goodput(design, mode, t, every), t, every)
             for every in grid.combos(levels.names, levels.every) for t in grid.base_interval_s]
    _, t_sim, every_sim = max(cells, key=lambda c: c[0])
    steps = grid.base_interval_s
    assert abs(steps.index(mine.base_interval_s) - steps.index(t_sim)) <= 1, (mine.base_interval_s, t_sim)
    values = grid.every["global"]
    assert abs(values.index(mine.every["global"]) - values.index(every_sim["global"])) <= 1, (mine.every, every_sim)
    # and the planner's cell, simulated, gives up little against the sweep's best
    at_mine = simulated_goodput(design, mode, mine.base_interval_s, mine.every)
    assert max(g for g, _, _ in cells) - at_mine < 0.005
