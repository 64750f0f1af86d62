"""Multi-level checkpointing (issue 24): the first-order model by hand and against the planner. The
simulator's side (the one SimPy model on the design) is in tests/unit/simulation/test_simulate_design.py: its goodput
against this model, and the planner's optimum against a simulated sweep (tests/unit/planner/test_level_plan.py)."""
from __future__ import annotations


import pytest

from emulator.planner import reference as planner
from emulator.planner.model import (FailureRate, Grid, Level, LevelInputs, breakdown, goodput, optimize,
                                 recovery_levels, young_every)

DAY = 86400.0


def two_levels(**kw) -> LevelInputs:
    """Memory every checkpoint, global every 5th; a process crash (memory) and a node loss (no peer
    level: it falls to global); restart 60 s."""
    base = dict(base_interval_s=100.0,
                levels=(Level("memory", 1, 2.0, 0.0, 10.0), Level("global", 5, 5.0, 50.0, 100.0)),
                classes=(FailureRate("process", 1e-4, "memory"), FailureRate("node", 1e-5, "peer")),
                restart_s=60.0)
    base.update(kw)
    return LevelInputs(**base)


# --------------------------------------------------------------------------- the model by hand

def test_two_levels_by_hand():
    # a cycle of 5: four checkpoints to memory (stall 2), the 5th to global too (2 + 5); no waits (lag
    # 50 < 100 of training): P = 5 x 100 + 4 x 2 + 7 = 515, 103 a checkpoint, f = 500/515
    b = breakdown(two_levels())
    assert (b.period_s, b.wait) == pytest.approx((103.0, 0.0))
    # first order: process 60 + 10 + 103/2 + 0 per failure; node (from global) 60 + 100 + 5 x 103/2 + 50;
    # the exact model is within the second-order terms, (lambda R)^2 ~ 1e-4
    f = 500 / 515
    assert b.goodput == pytest.approx(f * (1 - 1e-4 * (70 + 51.5) - 1e-5 * (160 + 307.5)), abs=3e-4)
    # the settled cycle's stall share, to first order: a run phase starts with training after its restart,
    # not at a uniform moment of the cycle (emulator/planner/phases.py), which moves it by lambda P
    assert b.stall == pytest.approx(b.running * 15 / 515, rel=1.1e-4 * 515)
    process, node = b.classes
    assert (process.level, node.level) == ("memory", "global")
    assert (process.recovery_s, node.recovery_s) == (70.0, 160.0)
    assert (process.lost, node.lost) == pytest.approx((f * 1e-4 * 51.5, f * 1e-5 * 307.5), rel=0.05)
    assert b.goodput + b.stall + b.wait + sum(c.recovery + c.lost for c in b.classes) == pytest.approx(1)


def test_a_slow_level_makes_its_checkpoints_wait():
    # global every 2nd with a lag of 300 s after 100 s of training: the checkpoint after one to global
    # waits 200 s for its copy: a cycle of 2 + 100 + 7 + 100 + 200 = 409 s, 200 of it training
    inp = two_levels(levels=(Level("memory", 1, 2.0, 0.0, 10.0), Level("global", 2, 5.0, 300.0, 100.0)))
    b = breakdown(inp)
    assert b.period_s == pytest.approx(409 / 2)
    assert (b.stall, b.wait) == pytest.approx((b.running * 9 / 409, b.running * 200 / 409), rel=1.1e-4 * 409)
    assert b.goodput + b.stall + b.wait + sum(c.recovery + c.lost for c in b.classes) == pytest.approx(1)
    p = 409 / 2
    assert b.goodput == pytest.approx(200 / 409 * (1 - 1e-4 * (70 + p / 2) - 1e-5 * (160 + p + 300)), abs=3e-3)


@pytest.mark.parametrize("stall,drain,interval", [(5.0, 0.0, 300.0), (2.0, 40.0, 300.0), (2.0, 400.0, 300.0)])
def test_one_level_is_the_planners_goodput(stall, drain, interval):
    """One level is the planner's sync (lag 0) or async (lag = its drain) model, waits included."""
    mttf, restart, restore = 20_000.0, 600.0, 30.0
    inp = LevelInputs(interval, (Level("global", 1, stall, drain, restore),),
                      (FailureRate("any", 1 / mttf, "global"),), restart)
    assert goodput(inp) == pytest.approx(planner.goodput(interval, stall, mttf, restart + restore, drain))


def test_failures_as_frequent_as_checkpoints_are_the_exact_model_not_the_first_order():
    """A failure every 100 s, a checkpoint every 102 s and 70 s to recover: the first order says nothing
    survives (1 - (70 + 51) / 100 < 0); some run phases do reach a checkpoint, as the exact model says."""
    inp = LevelInputs(100.0, (Level("memory", 1, 2.0, 0.0, 10.0),), (FailureRate("process", 1e-2, "memory"),), 60.0)
    assert goodput(inp) == pytest.approx(planner.goodput(100.0, 2.0, 100.0, 70.0))
    assert 0.2 < goodput(inp) < 0.3  # 100 sum_k e^(-1.02 k) kept per 201 s: 28 %


# --------------------------------------------------------------------------- levels and classes

def test_a_class_falls_to_the_next_level_up_the_ladder():
    inp = two_levels(classes=(FailureRate("a", 1e-5, "memory"), FailureRate("b", 1e-5, "peer"),
                              FailureRate("c", 1e-5, "local"), FailureRate("d", 1e-5, "global")))
    assert recovery_levels(inp) == (0, 1, 1, 1)


@pytest.mark.parametrize("bad,match", [
    (dict(classes=(FailureRate("x", 1e-5, "tape"),)), "neither a level"),
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
                     classes=(FailureRate("process", 1e-4, "memory"),))
    best = optimize(inp, Grid(base_interval_s=(50.0, 100.0, 200.0, 400.0)))
    assert best.base_interval_s == 200.0
    assert young_every(inp, "memory") * 100.0 == pytest.approx(200.0)


def test_a_grid_naming_an_absent_level_is_refused():
    with pytest.raises(ValueError, match="lack"):
        Grid(every={"peer": (1, 2)}).cells(two_levels())
