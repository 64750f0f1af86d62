"""Multi-level checkpointing (issue 24): the first-order model by hand and against the planner, the
SimPy model against the model, and the planner's optimum against a brute-force simulated sweep."""
from __future__ import annotations

import math

import pytest

from emulator.planner import reference as planner
from emulator.planner.model import (FailureClass, Grid, Level, LevelInputs, breakdown, goodput, optimize,
                                 recovery_levels, young_every)
from emulator.simulation.levels import LevelJob, simulate, sweep

DAY = 86400.0


def two_levels(**kw) -> LevelInputs:
    """Memory every checkpoint, global every 5th; a process crash (memory) and a node loss (no peer
    level: it falls to global); restart 60 s."""
    base = dict(base_interval_s=100.0,
                levels=(Level("memory", 1, 2.0, 0.0, 10.0), Level("global", 5, 5.0, 50.0, 100.0)),
                classes=(FailureClass("process", 1e-4, "memory"), FailureClass("node", 1e-5, "peer")),
                restart_s=60.0)
    base.update(kw)
    return LevelInputs(**base)


# --------------------------------------------------------------------------- the model by hand

def test_two_levels_by_hand():
    # mean stall 2 + 5/5 = 3; no waits (7 + 50 < 500); f = 97/100
    # process: 60 + 10 + 100/2 + 0 = 120 s per failure; node (from global): 60 + 100 + 500/2 + 50 = 460 s
    b = breakdown(two_levels())
    assert b.goodput == pytest.approx(0.97 * (1 - 1e-4 * 120 - 1e-5 * 460))
    assert (b.stall, b.wait, b.period_s) == pytest.approx((0.03, 0.0, 100.0))
    process, node = b.classes
    assert (process.level, node.level) == ("memory", "global")
    assert (process.recovery, process.lost) == pytest.approx((0.97 * 1e-4 * 70, 0.97 * 1e-4 * 50))
    assert (node.recovery, node.lost) == pytest.approx((0.97 * 1e-5 * 160, 0.97 * 1e-5 * 300))
    assert b.goodput + b.stall + b.wait + sum(c.recovery + c.lost for c in b.classes) == pytest.approx(1)


def test_a_slow_level_makes_its_checkpoints_wait():
    # global every 2nd at T = 100 with lag 300: a checkpoint to global stalls 2 + 5 = 7 s, its copy is
    # durable 307 s after it started, the next one to global starts 200 s later: waits 107 s, once
    # every 2 base checkpoints: P = 153.5; stall 2 + 2.5 = 4.5 of it
    inp = two_levels(levels=(Level("memory", 1, 2.0, 0.0, 10.0), Level("global", 2, 5.0, 300.0, 100.0)))
    b = breakdown(inp)
    p = 100 + 107 / 2
    assert (b.period_s, b.stall, b.wait) == pytest.approx((p, 4.5 / p, 53.5 / p))
    f = 95.5 / p
    assert b.goodput == pytest.approx(f * (1 - 1e-4 * (70 + p / 2) - 1e-5 * (160 + p + 300)))


@pytest.mark.parametrize("stall,drain,interval", [(5.0, 0.0, 300.0), (2.0, 40.0, 300.0), (2.0, 400.0, 300.0)])
def test_one_level_is_the_planners_goodput(stall, drain, interval):
    """One level is the planner's sync (lag 0) or async (lag = its drain) model, waits included."""
    mttf, restart, restore = 20_000.0, 600.0, 30.0
    inp = LevelInputs(interval, (Level("global", 1, stall, drain, restore),),
                      (FailureClass("any", 1 / mttf, "global"),), restart)
    assert goodput(inp) == pytest.approx(planner.goodput(interval, stall, mttf, restart + restore, drain))


def test_failures_that_take_all_the_time_leave_no_goodput():
    assert goodput(two_levels(classes=(FailureClass("process", 1e-2, "memory"),))) == 0.0


# --------------------------------------------------------------------------- levels and classes

def test_a_class_falls_to_the_next_level_up_the_ladder():
    inp = two_levels(classes=(FailureClass("a", 1e-5, "memory"), FailureClass("b", 1e-5, "peer"),
                              FailureClass("c", 1e-5, "local"), FailureClass("d", 1e-5, "global")))
    assert recovery_levels(inp) == (0, 1, 1, 1)


@pytest.mark.parametrize("bad,match", [
    (dict(classes=(FailureClass("x", 1e-5, "tape"),)), "neither a level"),
    (dict(levels=(Level("global", 1, 1.0, 0.0, 0.0), Level("memory", 1, 1.0, 0.0, 0.0))), "lowest first"),
    (dict(levels=(Level("memory", 1, 1.0, 0.0, 0.0),)), "no level at or above"),
    (dict(levels=()), "one or more"),
    (dict(base_interval_s=0.0), "base_interval_s"),
])
def test_bad_inputs_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        two_levels(**bad)


def test_a_level_refuses_a_fractional_every():
    with pytest.raises(ValueError, match="every"):
        Level("memory", 1.5, 1.0, 0.0, 0.0)


# --------------------------------------------------------------------------- the search

def test_optimize_finds_the_best_cell_and_its_young_starting_point():
    # only global's terms depend on its every: 5/(100 e) + 1e-5 * 100 e / 2, least at 100 e = sqrt(2 * 5 / 1e-5)
    inp = two_levels()
    assert young_every(inp, "global") == pytest.approx(10)
    best = optimize(inp, Grid(every={"global": (1, 2, 4, 8, 10, 12, 16, 32)}))
    assert best.every == {"memory": 1, "global": 10}
    assert best.goodput == pytest.approx(goodput(best.inputs))
    assert best.goodput > max(goodput(c) for c in Grid(every={"global": (8, 12)}).cells(inp))


def test_optimize_searches_the_base_interval_too():
    # the memory level alone: Young's sqrt(2 s / lambda) = sqrt(2 * 2 / 1e-4) = 200 s
    inp = two_levels(levels=(Level("memory", 1, 2.0, 0.0, 10.0),),
                     classes=(FailureClass("process", 1e-4, "memory"),))
    best = optimize(inp, Grid(base_interval_s=(50.0, 100.0, 200.0, 400.0)))
    assert best.base_interval_s == 200.0
    assert young_every(inp, "memory") * 100.0 == pytest.approx(200.0)


def test_a_grid_naming_an_absent_level_is_refused():
    with pytest.raises(ValueError, match="lack"):
        Grid(every={"peer": (1, 2)}).cells(two_levels())


# --------------------------------------------------------------------------- the simulation by hand

def quiet(**kw) -> LevelInputs:
    """two_levels without random failures (rates 0): failures come from a list."""
    return two_levels(classes=(FailureClass("process", 0.0, "memory"), FailureClass("node", 0.0, "peer")), **kw)


def test_simulation_without_failures_stalls_as_scheduled():
    # per 5 cycles of 100 s: 4 x (98 s work + 2 s stall), then 93 s work + 7 s stall (memory and global);
    # 10 cycles, then 50 s of work
    out = simulate(quiet(), seed=1, horizon_s=1050.0)
    assert (out.checkpoints, out.stall_s, out.wait_s) == (10, pytest.approx(30.0), 0.0)
    assert out.goodput == pytest.approx((970 + 50) / 1050)


def test_simulation_waits_for_a_slow_level():
    # global every 2nd, lag 300: checkpoint 2's copy (its stall ends at 200 s) is durable at 500 s, so
    # checkpoint 4 (training ends at 393 s) waits 107 s and ends at 507 s; checkpoint 6 ends at 814 s,
    # checkpoint 7 at 914 s; then 50 s of work. From then on every 2 checkpoints take 2 x 153.5 s.
    inp = quiet(levels=(Level("memory", 1, 2.0, 0.0, 10.0), Level("global", 2, 5.0, 300.0, 100.0)))
    out = simulate(inp, seed=1, horizon_s=964.0)
    assert (out.checkpoints, out.wait_s, out.stall_s) == (7, pytest.approx(214.0), pytest.approx(29.0))
    assert out.goodput * 964 == pytest.approx(4 * 98 + 3 * 93 + 50)
    later = simulate(inp, seed=1, horizon_s=964.0 + 307)
    assert later.checkpoints == 9
    b = breakdown(inp)
    assert (later.goodput * 1271 - out.goodput * 964) / 307 == pytest.approx(1 - b.stall - b.wait)


@pytest.mark.parametrize("kind,lost,progress", [
    # at 750 s the job has 7 checkpoints (681 s of work) and 50 s more. A process crash restores
    # checkpoint 7 from memory (70 s), resumes at 820: 98 + 80 s of work by 1000 s.
    ("process", 50.0, 681 + 98 + 80),
    # A node loss (no peer level: global) loses memory, restores checkpoint 5 (485 s of work, durable at
    # 550 s) from global (160 s), resumes at 910: 90 s of work by 1000 s.
    ("node", 731.0 - 485, 485 + 90),
])
def test_a_failure_rolls_back_to_the_nearest_surviving_level(kind, lost, progress):
    out = LevelJob(quiet(), seed=1, horizon_s=1000.0, failures=[(750.0, kind)]).run()
    tally = {c.name: c for c in out.classes}[kind]
    assert (tally.failures, tally.lost_work_s) == (1, pytest.approx(lost))
    assert tally.recovery_s == pytest.approx(70.0 if kind == "process" else 160.0)
    assert out.goodput == pytest.approx(progress / 1000)


def test_a_copy_in_flight_is_lost_with_the_failure():
    # checkpoint 5's global copy is in flight from 500 to 550 s: a node loss at 520 s falls back to the
    # job's start (nothing was durable on global), losing all 4 x 98 + 93 + 20 s of work
    out = LevelJob(quiet(), seed=1, horizon_s=600.0, failures=[(520.0, "node")]).run()
    assert out.classes[1].lost_work_s == pytest.approx(4 * 98 + 93 + 20)


# --------------------------------------------------------------------------- the model against the simulation

def llama3_405b(**kw) -> LevelInputs:
    """Llama-3 405B on 2,048 nodes, four levels: host memory (a 2 s snapshot), a peer replica (1 s of
    interference, durable in 20 s), node NVMe (0.5 s, 60 s), global storage (5 s, 600 s for 5.3 TB).
    Process crashes 6 a day (memory survives), node losses 2 a day (a peer replica survives), job-wide
    relaunches 0.5 a day (host memory, peers' included, is gone; NVMe survives), replica-group losses
    0.1 a day (only global survives). Restart 2 min; restores 10 s, 30 s, 1 min, 5 min."""
    base = dict(base_interval_s=120.0,
                levels=(Level("memory", 1, 2.0, 0.0, 10.0), Level("peer", 2, 1.0, 20.0, 30.0),
                        Level("local", 4, 0.5, 60.0, 60.0), Level("global", 16, 5.0, 600.0, 300.0)),
                classes=(FailureClass("process", 6 / DAY, "memory"), FailureClass("node", 2 / DAY, "peer"),
                         FailureClass("job", 0.5 / DAY, "local"), FailureClass("group", 0.1 / DAY, "global")),
                restart_s=120.0)
    base.update(kw)
    return LevelInputs(**base)


def test_simulation_agrees_with_the_model():
    """Small rates, a long horizon (about 2,000 failures): goodput, and each class's recovery and lost
    work per failure (the lost work of one is uniform over its level's period: within 3 standard errors)."""
    inp = llama3_405b()
    out = simulate(inp, seed=7, horizon_s=250 * DAY)
    model = breakdown(inp)
    assert out.goodput == pytest.approx(model.goodput, rel=0.01)
    assert 1 - out.goodput == pytest.approx(1 - model.goodput, rel=0.1)
    working = 1 - model.stall - model.wait
    for tally, cost, c, i in zip(out.classes, model.classes, inp.classes, recovery_levels(inp)):
        assert tally.failures > 20, c.name
        # the model's shares are per unit of time: per failure, in wall time, then as work (x working)
        lost, recovery = (share / working / c.rate_per_s for share in (cost.lost, cost.recovery))
        error = inp.levels[i].every * model.period_s / math.sqrt(12 * tally.failures)
        assert abs(tally.lost_work_s / tally.failures - working * lost) < 3 * error, c.name
        assert tally.recovery_s / tally.failures == pytest.approx(recovery, rel=0.02), c.name


GRID = Grid(every={"peer": (1, 2, 4), "local": (2, 4, 8), "global": (8, 16, 32, 64)})


@pytest.fixture(scope="module")
def brute_force():
    """The SimPy sweep of GRID: 36 cells, 60 days each, the same failures in every cell."""
    return sweep(llama3_405b(), GRID, seed=1, horizon_s=60 * DAY)


def test_planner_against_brute_force(brute_force):
    """The model's best `every` per level is the simulated sweep's best cell, within one grid step, and
    simulated, the model's choice gives up less than 0.1 point of goodput against the sweep's best."""
    choice = optimize(llama3_405b(), GRID)
    best = {lv.name: lv.every for lv in brute_force.best.inputs.levels}
    for name, values in GRID.every.items():
        assert abs(values.index(choice.every[name]) - values.index(best[name])) <= 1, (name, choice.every, best)
    at_choice = next(c for c in brute_force.cells if c.inputs == choice.inputs)
    assert brute_force.best.outcome.goodput - at_choice.outcome.goodput < 0.001


def test_every_cell_of_the_sweep_agrees_with_the_model(brute_force):
    assert len(brute_force.cells) == 36
    for cell in brute_force.cells:
        assert cell.outcome.goodput == pytest.approx(goodput(cell.inputs), rel=0.01), cell.inputs.levels
