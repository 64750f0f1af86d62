"""The snapshot is paced at the design's copy rate, stated or the documented default; a default says
so. (Unpaced, the embedded default's async stall read 5.56 s at full size, this host's memmove over
the scale, against the 0.27 s its planner assumes.)"""
from __future__ import annotations

from rundesign import run_design

from emulator.config import load_config
from emulator.rank.dilation import snapshot_rate
from emulator.results.summary import host_notes


def _results() -> dict:
    return {"modes": {}, "bytes": {"run_actual_state": 1 << 30}}


def _snapshot_notes(cfg) -> list[str]:
    return [n for n in host_notes(run_design(cfg), _results()) if n.startswith("snapshot")]


def test_an_unstated_snapshot_rate_is_paced_at_the_default_and_said_to_be_assumed():
    cfg = load_config("default")
    assert snapshot_rate(run_design(cfg)) == 48 * 2**30
    [note] = _snapshot_notes(cfg)
    assert "assumed 48GiB/s" in note and "design.node.snapshot.rate" in note and "this host's" not in note


def test_a_stated_rate_is_paced_and_needs_no_note():
    cfg = load_config("default", ["design.node.snapshot.rate=20GiB/s"])
    assert snapshot_rate(run_design(cfg)) == 20 * 2**30 and _snapshot_notes(cfg) == []


def test_without_a_design_the_snapshot_is_the_hosts_copy_and_no_snapshot_note_is_added():
    cfg = load_config("mlperf-llama3-8b")
    assert snapshot_rate(run_design(cfg)) is None and _snapshot_notes(cfg) == []
