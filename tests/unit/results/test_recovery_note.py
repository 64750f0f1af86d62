"""A recovery inside a run whose restore ran past its pace is flagged, as a load after training is.

The loads after training get a dilation of their own (a whole restore is about 4 times slower than
its reads here); a recovery inside the run restores at the run's, and nothing said where its
reads were this host's rather than the design's.
"""
from __future__ import annotations

import pytest

from emulator.config import load_config
from emulator.results.levels import recovery_summary
from emulator.results.summary import host_notes


def _ranks(paced_s: float, lag_s: float) -> list[dict]:
    load = {"ok": True, "tier": "memory", "step": 12, "seconds": 1.0, "paced_s": paced_s, "lag_s": lag_s,
            "bytes": 1 << 20, "fallbacks": [], "h2d_s": 0.0}
    return [{"recoveries": [{"class": "node", "load": load, "lost_steps": 2, "fetch_s": 0.2}]}]


def _notes(cfg, recoveries) -> list[str]:
    results = {"modes": {}, "bytes": {"run_actual_state": 1 << 30}, "load": {}, "recoveries": recoveries}
    return host_notes(cfg, results)


def test_a_recovery_whose_restore_ran_past_its_pace_is_flagged():
    cfg = load_config("default")
    [rec] = recovery_summary(cfg, _ranks(paced_s=0.5, lag_s=0.3))
    assert rec["host_lag"] == pytest.approx(0.6)
    notes = _notes(cfg, [rec])
    assert any(n.startswith("recovery (node): its restore ran 60% past its paced time here") for n in notes), notes
    assert not any(n.startswith("every paced phase") for n in notes)


def test_a_recovery_at_its_pace_is_the_designs():
    cfg = load_config("default")
    [rec] = recovery_summary(cfg, _ranks(paced_s=0.5, lag_s=0.01))
    notes = _notes(cfg, [rec])
    assert not any(n.startswith("recovery") for n in notes)
    assert any(n.startswith("every paced phase (recovery)") for n in notes), notes
