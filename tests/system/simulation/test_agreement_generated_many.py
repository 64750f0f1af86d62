"""Agreement on any design, the long version (issue 53): plan against simulate on many drawn designs, each
over a simulated year, the counterexamples the model once did not meet and those it does not yet
(tests/support/generated_designs.py; the quick tier's few and the named counterexamples it meets:
tests/unit/simulation/test_agreement_generated.py)."""
from __future__ import annotations

import os

import pytest
from generated_designs import RARELY_FINISHES, check, designs
from hypothesis import HealthCheck, given, seed, settings

#: counterexamples the model once did not meet (each failed before the fix named beside it)
MET = {
    # a 1 GB/s store behind 2,484 nodes: every 16th checkpoint stalls 17 min to copy to it, longer than the
    # cluster's MTTF (25 min), so most such copies never finish; the model took the newest global copy a
    # failure-free cycle would hold, where the simulator's is often several cycles older (6.3 points),
    # and phases starting at a uniform moment of the cycle (emulator/planner/phases.py carries both).
    # Its losses are rare and long (a node loss falls back by 13 checkpoints on average): 4 spans of 30
    # days, where 7.5 days' spans differ by twice the margin
    "a_copy_to_the_only_spared_tier_rarely_finishes": RARELY_FINISHES,
}


@pytest.mark.parametrize("name", sorted(MET))
def test_a_design_the_model_once_did_not_meet(name):
    check(MET[name], days=120, most_checkpoints=1e5)


#: counterexamples the model does not meet yet, kept so that the day it does, they say so (strict)
OPEN = {
    # found by a wider draw on 8 Dec 2026 (it failed before emulator/planner/phases.py too, by 1.0 points):
    # 48 nodes whose 1 GB/s NVMe keeps async checkpoints waiting (80 % of the time), a node loss
    # restoring global storage for 10 hours; the plan's goodput 3.4 %, the simulator's 4.4 %: the plan
    # has crashes recovering 8.3 % of the time, the simulator 5.9 % (a crash after a node loss, before
    # the NVMe holds a new copy, restores global storage in both); likely the backlog below too
    "a_node_loss_restores_for_ten_hours_behind_waiting_checkpoints": {
        "model": "llama3-70b", "tp": 8, "pp": 1, "zero": 0, "nodes": 48, "shard_group": None,
        "writers": "every_replica", "mode": "async", "step_s": 20.0, "interval_steps": 26, "keep": 1,
        "verify": "size", "nic": "25Gb/s",
        "tiers": {"local": {"every": 1, "write": "1GB/s", "read": "9.281GB/s", "duplex": True, "capacity": None},
                  "global": {"every": 1, "write": "4.831GB/s", "read": "1.143GB/s", "latency_ms": 0}},
        "failures": {"mttf_h": 5165, "node": 0.134, "group": 0.0, "restart_s": 150}},
    # found by a wider draw on 8 Dec 2026: 794 nodes whose 1 GB/s NVMe takes days over each async
    # checkpoint, failing every 6.3 hours (lambda P about 400): the simulator keeps 0.69 % of the time;
    # this model plans 0 % at every span's rates (its crashes' losses 5.5 % of the time, the simulator's
    # 7.1 %; what a phase keeps, less the deficits carried, comes out below zero and is clamped); the
    # settled model it replaced planned 0 to 0.53 % and passed by 0.05 points. A Monte Carlo of the
    # model's own chain of phases on the settled schedule keeps 1.2e-6 of the time: the model is right
    # about its assumption, which is what fails here: each phase inherits the settled schedule's
    # backlog (checkpoints waiting days on the NVMe), where the simulator's restart starts its
    # pipeline empty and its first checkpoints go through
    "checkpoints_that_take_days_against_failures_every_six_hours": {
        "model": "llama3-405b", "tp": 1, "pp": 4, "zero": 0, "nodes": 794, "shard_group": None,
        "writers": "every_replica", "mode": "async", "step_s": 60.0, "interval_steps": 26, "keep": 2,
        "verify": "size", "nic": "656.9Gb/s",
        "tiers": {"local": {"every": 1, "write": "1GB/s", "read": "1GB/s", "duplex": False, "capacity": None},
                  "global": {"every": 16, "write": "1GB/s", "read": "427.9GB/s", "latency_ms": 0}},
        "failures": {"mttf_h": 39957, "node": 0.0, "group": 0.04, "restart_s": 30}},
}


@pytest.mark.parametrize("name", sorted(OPEN))
@pytest.mark.xfail(strict=True, raises=AssertionError, reason="a phase inherits the settled backlog, which a restart empties")
def test_a_design_the_model_does_not_meet_yet(name):
    check(OPEN[name], days=365, most_checkpoints=1e5)


#: a developer's wider draw: CKPT_EMU_AGREEMENT_SEED=7 CKPT_EMU_AGREEMENT_EXAMPLES=60 (the suite's own is fixed)
EXPLORE_SEED = os.environ.get("CKPT_EMU_AGREEMENT_SEED")


def _drawn(test):
    """``test`` over drawn designs: the suite's fixed draw, or a developer's seeded one."""
    test = settings(max_examples=int(os.environ.get("CKPT_EMU_AGREEMENT_EXAMPLES", "30")),
                    derandomize=EXPLORE_SEED is None, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])(given(designs())(test))
    return seed(int(EXPLORE_SEED))(test) if EXPLORE_SEED else test


@_drawn
def test_plan_and_simulate_agree_on_many_drawn_designs(spec):
    check(spec, days=365, most_checkpoints=1e5)
