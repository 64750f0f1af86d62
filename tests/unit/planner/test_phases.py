"""Run phases as a Markov chain (emulator/planner/phases.py), held to a Monte Carlo of the same chain on the
same schedule: phases end at Exp(lambda), the next starts at the stall end of the position whose span the
failure struck, a crash restores the NVMe and a node loss global storage. The design is the one the
generated agreement tests caught: a copy to global storage every 16th checkpoint that stalls 17 minutes
with the cluster failing every 25 (generated_designs.RARELY_FINISHES)."""
from __future__ import annotations

import bisect
import copy
import math

import numpy as np
import pytest
from generated_designs import RARELY_FINISHES, design_of

from emulator.planner import model, phases
from emulator.planner.cycle import steady
from emulator.planner.inputs import DesignLevels


def _schedule(global_write: str = "1GB/s"):
    spec = copy.deepcopy(RARELY_FINISHES)
    spec["tiers"]["global"]["write"] = global_write
    d = design_of(spec)
    inputs = DesignLevels(d, "sync").inputs()
    cycle = model.cycle_of(inputs)
    s = steady(cycle, [d.base_interval_s], inputs.is_blocking)
    lam = sum(c.rate_per_s for c in inputs.classes)
    alive = [frozenset(model.alive_levels(inputs, k)) for k in range(len(inputs.classes))]
    return cycle, s, lam, [c.rate_per_s / lam for c in inputs.classes], alive


def _monte_carlo(cycle, s, lam, shares, alive, phases_n: int = 25_000, seed: int = 1) -> dict:
    """Phase by phase: where each starts, what it made, and the deficit a node loss falls back by."""
    ph = phases.Phases(cycle, s, lam)
    L, P = len(cycle), float(s.period[0])
    starts = np.append(s.start[0], P)
    crash = ph.newest(alive[0], cycles=3000)[0]
    node = ph.newest(alive[1], cycles=3000)[0]
    rng = np.random.default_rng(seed)
    phi, deficit = 0, 0.0
    seen, made, fell, heavier = np.zeros(L), 0.0, 0.0, 0
    for _ in range(phases_n):
        seen[phi] += 1
        o = float(s.stall_end[0, phi])
        x = o + rng.exponential(1 / lam)
        made += _training(s, o, x)
        kept_crash = max(0, bisect.bisect_right(crash, x) - 1 - phi)
        kept_node = max(0, bisect.bisect_right(node, x) - 1 - phi)
        if rng.random() < shares[0]:  # a crash: host memory's newest, ahead of global's by the deficit
            deficit = kept_crash - kept_node if kept_node else kept_crash + deficit
        else:
            fell += 0.0 if kept_node else deficit
            heavier += 1
            deficit = 0.0
        phi = bisect.bisect_right(starts, x % P) - 1
    return {"starts": seen / phases_n, "made": made / phases_n, "fell": fell / heavier, "phases": phases_n}


def _training(s, o: float, x: float) -> float:
    """The progress made between o and x: training runs from each stall's end to the next start."""
    P = float(s.period[0])
    ends = np.append(s.start[0, 1:], P)
    rate = s.intervals[0] / (ends - s.stall_end[0])
    total = 0.0
    for c in range(int(o // P), int(x // P) + 1):
        lo = np.maximum(s.stall_end[0] + c * P, o)
        hi = np.minimum(ends + c * P, x)
        total += float(np.sum(np.clip(hi - lo, 0.0, None) * rate))
    return total


@pytest.fixture(scope="module")
def rarely():
    cycle, s, lam, shares, alive = _schedule()
    return (cycle, s, lam, shares, alive), _monte_carlo(cycle, s, lam, shares, alive)


def test_phases_start_where_failures_struck_not_at_a_uniform_moment(rarely):
    (cycle, s, lam, shares, alive), mc = rarely
    ph = phases.Phases(cycle, s, lam)
    uniform = phases.time_shares(s)[0]
    # the span of the 17-minute stall is 34 % of the cycle, but 28 % of phases start after it: phases
    # that start there have more of the cycle ahead of them, and end before they reach it again
    assert uniform[-1] - ph.starts[0, -1] > 0.05
    error = np.sqrt(ph.starts[0] * (1 - ph.starts[0]) / mc["phases"])
    assert np.all(np.abs(ph.starts[0] - mc["starts"]) <= 4 * error + 1e-9), (ph.starts[0], mc["starts"])


def test_a_phase_makes_what_the_chain_of_phases_makes(rarely):
    (cycle, s, lam, _, _), mc = rarely
    made = float(phases.Phases(cycle, s, lam).made()[0])
    assert made == pytest.approx(mc["made"], rel=0.02)
    assert made != pytest.approx(float(len(cycle) * s.intervals[0] / s.period[0]) / lam, rel=0.05)


@pytest.mark.parametrize("global_write", ["1GB/s", "100GB/s"])
def test_a_node_loss_falls_back_by_the_deficit_the_crashes_before_it_carried(global_write, rarely):
    cycle, s, lam, shares, alive = _schedule(global_write)
    mc = rarely[1] if global_write == "1GB/s" else _monte_carlo(cycle, s, lam, shares, alive)
    ph = phases.Phases(cycle, s, lam)
    chain = ph.deficit(alive[1], alive, shares, [np.ones(1)] * len(alive))
    assert float(chain.lost[0]) == pytest.approx(mc["fell"], rel=0.06), (chain.lost, mc["fell"])
    if global_write == "1GB/s":  # most copies to global storage never finish: many crashes' worth
        assert chain.lost[0] > 10


@pytest.mark.parametrize("mttf_scale", [1.0, 0.05, 0.02])
def test_the_prefix_sums_over_starts_are_each_starts_own_sums(mttf_scale):
    """kept() weighs each start's sums by prefix sums over the starts, each term no larger than the result
    (a cycle of 110 MTTFs at the last scale, where sums from the cycle's start would lose e^(lambda P) of
    their precision); where e^(lambda t) would overflow it sums start by start, as here for comparison."""
    cycle, s, lam, _, alive = _schedule()
    fast = phases.Phases(cycle, s, lam / mttf_scale)
    exact = phases.Phases(cycle, s, lam / mttf_scale)
    assert fast.fast
    exact.fast = False
    for levels in set(alive):
        assert np.allclose(fast.kept(levels), exact.kept(levels), rtol=1e-9, atol=1e-12), levels
    assert math.isclose(float(fast.starts.sum()), 1.0)


def test_a_deficit_no_class_resets_survives_recoveries_that_are_always_struck():
    """Crashes only (no class that resets the deficit), each recovery certain to be struck again: the
    chance a deficit is reset is 0/0 there, and it is 0 (a draw of 8 Dec 2026 planned NaN)."""
    cycle, s, lam, _, alive = _schedule()
    ph = phases.Phases(cycle, s, lam)
    chains = model.deficit_chains(ph, alive, [1.0, 0.0, 0.0], [np.ones(1)] * len(alive))
    assert all(np.isfinite(c.lost).all() for c in chains.values())
    assert chains[alive[1]].lost[0] > 0
