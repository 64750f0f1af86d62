"""A recovery inside a run whose restore ran past its pace is flagged, as a load after training is.

The loads after training get a dilation of their own (a whole restore is about 4 times slower than
its reads here); a recovery inside the run restores at the run's, and nothing said where its
reads were this host's rather than the design's.
"""
from __future__ import annotations

import pytest

from rundesign import run_of, run_design
from emulator.config import load_config
from emulator.results.design_time import WAKE_UP_S
from emulator.results.levels import recovery_summary
from emulator.results.summary import host_notes


def _ranks(paced_s: float, lag_s: float) -> list[dict]:
    load = {"ok": True, "tier": "memory", "step": 12, "seconds": 1.0, "paced_s": paced_s, "lag_s": lag_s,
            "bytes": 1 << 20, "fallbacks": [], "h2d_s": 0.0}
    return [{"recoveries": [{"class": "node", "load": load, "lost_steps": 2, "fetch_s": 0.2}]}]


def _notes(cfg, recoveries) -> list[str]:
    results = {"modes": {}, "bytes": {"run_actual_state": 1 << 30}, "load": {}, "recoveries": recoveries}
    return host_notes(run_design(cfg), results)


def test_a_recovery_whose_restore_ran_past_its_pace_is_flagged():
    cfg = load_config("default")
    [rec] = recovery_summary(*run_of(cfg), _ranks(paced_s=0.5, lag_s=0.3))
    assert rec["host_lag"] == pytest.approx(0.6)
    notes = _notes(cfg, [rec])
    assert any(n.startswith("recovery (node): its restore ran 60% past its paced time here") for n in notes), notes
    assert not any(n.startswith("every paced phase") for n in notes)


def test_a_recovery_at_its_pace_is_the_designs():
    cfg = load_config("default")
    [rec] = recovery_summary(*run_of(cfg), _ranks(paced_s=0.5, lag_s=0.01))
    notes = _notes(cfg, [rec])
    assert not any(n.startswith("recovery") for n in notes)
    assert any(n.startswith("every paced phase (recovery)") for n in notes), notes


def _fetched(fetch_s: float, stream_s: float, paced_s: float) -> list[dict]:
    [rank] = _ranks(paced_s=0.5, lag_s=0.0)
    rank["recoveries"][0].update(fetch_s=fetch_s, fetch_stream_s=stream_s, fetch_paced_s=paced_s)
    return [rank]


def test_a_fetch_from_a_peer_counts_its_paced_part_at_full_size_and_the_rest_once():
    """design-memory-peer-pfs after a node loss, at x500 (k = 5): the fetch took 7.45 s against 3.2 s
    of paced NIC time; at full size all of it / k read 1.49 s (the design's fetch: 0.64 s), the
    host's 4.2 s divided by the time factor as if they were the NIC's, and nothing said so."""
    cfg = load_config("design-memory-peer-pfs", ["run.dilation=500", "run.scale=0.01"])
    [rec] = recovery_summary(*run_of(cfg), _fetched(fetch_s=7.45, stream_s=7.3, paced_s=3.2))
    [plain] = recovery_summary(*run_of(cfg), _fetched(fetch_s=0.0, stream_s=0.0, paced_s=0.0))
    assert rec["seconds_full_size"] - plain["seconds_full_size"] == pytest.approx(3.2 / 5 + (7.45 - 3.2))
    assert rec["fetch_host_lag"] == pytest.approx((7.3 - 3.2 - WAKE_UP_S) / 3.2)
    assert (rec["fetch_s"], rec["fetch_paced_s"]) == (7.45, 3.2)  # the NIC's part kept beside the whole
    notes = _notes(cfg, [rec])
    assert any(n.startswith("recovery (node): its fetch from a peer ran 128% past its paced time here")
               for n in notes), notes
    assert not any(n.startswith("every paced phase") for n in notes)


def test_a_fetch_that_found_no_copy_is_its_software_once_not_extrapolated():
    """A group loss: the replacements ask for peer copies and find none (0.16 s, nothing streamed,
    nothing paced). At full size that is 0.16 s once; read as this host's throughput over run.scale
    (0.01) it was 16 s, and the recovery's full-size figure 19.2 s for a 3.1 s restore."""
    cfg = load_config("design-memory-peer-pfs", ["run.dilation=250", "run.scale=0.01"])
    [rec] = recovery_summary(*run_of(cfg), _fetched(fetch_s=0.16, stream_s=0.0, paced_s=0.0))
    [plain] = recovery_summary(*run_of(cfg), _fetched(fetch_s=0.0, stream_s=0.0, paced_s=0.0))
    assert rec["seconds_full_size"] - plain["seconds_full_size"] == pytest.approx(0.16)


def test_a_fetch_at_its_pace_is_the_designs():
    cfg = load_config("design-memory-peer-pfs", ["run.dilation=500", "run.scale=0.01"])
    [rec] = recovery_summary(*run_of(cfg), _fetched(fetch_s=3.4, stream_s=3.203, paced_s=3.2))
    assert rec["fetch_host_lag"] == 0.0
    assert any(n.startswith("every paced phase (recovery)") for n in _notes(cfg, [rec]))
