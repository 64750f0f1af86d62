"""Agreement on any design, the long version (issue 53): plan against simulate on many drawn designs, each
over a simulated year, and the counterexamples the model once did not meet (tests/support/generated_designs.py;
the quick tier's few and the named counterexamples it meets: tests/unit/simulation/test_agreement_generated.py)."""
from __future__ import annotations

import pytest
from generated_designs import check, designs
from hypothesis import HealthCheck, given, settings

#: counterexamples the model once did not meet (each failed before the fix named beside it)
MET = {
    # a 1 GB/s store behind 2,484 nodes: every 16th checkpoint stalls 17 min to copy to it, longer than the
    # cluster's MTTF (25 min), so most such copies never finish; the model took the newest global copy a
    # failure-free cycle would hold, where the simulator's is often several cycles older (6.3 points),
    # and phases starting at a uniform moment of the cycle (emulator/planner/phases.py carries both).
    # Its losses are rare and long (a node loss falls back by 13 checkpoints on average): 4 spans of 30
    # days, where 7.5 days' spans differ by twice the margin
    "a_copy_to_the_only_spared_tier_rarely_finishes": {
        "model": "llama3-70b", "tp": 8, "pp": 4, "zero": 1, "nodes": 2484, "shard_group": None,
        "writers": "one_replica", "mode": "sync", "step_s": 20.0, "interval_steps": 7, "keep": 3,
        "verify": "checksum", "nic": "56.01Gb/s",
        "tiers": {"local": {"every": 1, "write": "8.496GB/s", "read": "1GB/s", "duplex": True, "capacity": None},
                  "global": {"every": 16, "write": "1GB/s", "read": "1271GB/s", "latency_ms": 1}},
        "failures": {"mttf_h": 8214, "node": 0.061, "group": 0.022, "restart_s": 30}},
}


@pytest.mark.parametrize("name", sorted(MET))
def test_a_design_the_model_once_did_not_meet(name):
    check(MET[name], days=120, most_checkpoints=1e5)


@settings(max_examples=30, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(designs())
def test_plan_and_simulate_agree_on_many_drawn_designs(spec):
    check(spec, days=365, most_checkpoints=1e5)
