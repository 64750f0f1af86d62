"""Agreement on any design, the long version (issue 53): plan against simulate on many drawn designs, each
over a simulated year, and the counterexamples the model does not meet yet (tests/support/generated_designs.py;
the quick tier's few and the named counterexamples it meets: tests/unit/simulation/test_agreement_generated.py)."""
from __future__ import annotations

import pytest
from generated_designs import check, designs
from hypothesis import HealthCheck, given, settings

#: counterexamples the model does not meet yet, kept so that the day it does, they say so (strict)
OPEN = {
    # a 1 GB/s store behind 2,484 nodes: every 16th checkpoint stalls 17 min to copy to it, longer than the
    # cluster's MTTF (25 min), so most such copies never finish; the model takes the newest global copy a
    # failure-free cycle would hold, where the simulator's is often several cycles older (5.6 points)
    "a_copy_to_the_only_spared_tier_rarely_finishes": {
        "model": "llama3-70b", "tp": 8, "pp": 4, "zero": 1, "nodes": 2484, "shard_group": None,
        "writers": "one_replica", "mode": "sync", "step_s": 20.0, "interval_steps": 7, "keep": 3,
        "verify": "checksum", "nic": "56.01Gb/s",
        "tiers": {"local": {"every": 1, "write": "8.496GB/s", "read": "1GB/s", "duplex": True, "capacity": None},
                  "global": {"every": 16, "write": "1GB/s", "read": "1271GB/s", "latency_ms": 1}},
        "failures": {"mttf_h": 8214, "node": 0.061, "group": 0.022, "restart_s": 30}},
}


@pytest.mark.parametrize("name", sorted(OPEN))
@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="the model keeps no memory of failed copies across run phases")
def test_a_design_the_model_does_not_meet_yet(name):
    check(OPEN[name], days=30, most_checkpoints=2e4)


@settings(max_examples=30, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(designs())
def test_plan_and_simulate_agree_on_many_drawn_designs(spec):
    check(spec, days=365, most_checkpoints=1e5)
