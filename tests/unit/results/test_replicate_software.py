"""A peer send's software around its streams (the exchange's set-up, every rank's receipts, the
holders' manifest) is per checkpoint, not per byte: counted once and shown apart, not flagged as the
host behind the paced rate. design-memory-peer-pfs's replicate phase read 29 % this host's own with
its streams paced throughout."""
from __future__ import annotations

import pytest

from rundesign import run_design
from emulator.config import load_config
from emulator.results.design_time import host_shares, software_seconds
from emulator.results.summary import host_notes

K = 0.05  # scale 0.01 x dilation 5


def _record(seconds: float, paced: float, stream_s: float | None) -> dict:
    peer = {"complete": True, "lag_s": 1.0, "seconds": seconds, "paced": paced}
    if stream_s is not None:
        peer["stream_s"] = stream_s
    return {"mode": "async", "due": ["memory", "peer"], "snapshot_s": 0.0, "local_write_s": 0.0, "drain_s": 0.0,
            "paced": {}, "tiers": {"peer": peer}}


def test_the_software_around_a_paced_stream_is_not_the_hosts_pace():
    recs = [_record(0.62, 0.5, 0.52)]  # 100 ms around the streams, 20 ms of the stream uncovered
    share = host_shares(recs, K)["replicate"]
    assert share == pytest.approx(0.02 / (0.5 / K + 0.12))
    assert software_seconds(recs) == {"replicate": pytest.approx(0.1)}


def test_without_its_streams_time_all_that_the_pacing_missed_is_the_hosts():
    recs = [_record(0.62, 0.5, None)]  # a record of a run before the streams were timed
    assert host_shares(recs, K)["replicate"] == pytest.approx(0.12 / (0.5 / K + 0.12))
    assert software_seconds(recs) == {}


def test_a_stream_the_host_fell_behind_in_is_still_flagged():
    recs = [_record(2.1, 0.5, 2.0)]  # the paced sends covered a quarter of the stream
    share = host_shares(recs, K)["replicate"]
    assert share == pytest.approx(1.5 / (0.5 / K + 1.6)) and share > 0.10


def _notes(recs) -> list[str]:
    mode = {"checkpoints": 1, "host_share": host_shares(recs, K), "software_s": software_seconds(recs)}
    results = {"modes": {"async": mode}, "bytes": {"run_actual_state": 1 << 30}, "load": {}}
    return host_notes(run_design(load_config("design-memory-peer-pfs")), results)


def test_the_report_shows_the_software_apart_and_the_phase_as_the_designs():
    notes = _notes([_record(0.62, 0.5, 0.52)])
    assert any(n.startswith("replicate (async): 100.0 ms a checkpoint is the software") for n in notes), notes
    assert any(n.startswith("every paced phase (replicate) kept to its design rate") for n in notes), notes
    assert not any("this host's own" in n and n.startswith("replicate") for n in notes), notes
