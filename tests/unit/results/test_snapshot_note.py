"""The snapshot is paced only where the design states its copy rate: elsewhere the report says its
figures are this host's memory copy, not the design's (the embedded default's async stall read
5.56 s at full size, this host's memmove over the scale, against the 0.27 s its planner assumes)."""
from __future__ import annotations

from emulator.config import load_config
from emulator.results.summary import host_notes


def _results() -> dict:
    return {"modes": {}, "bytes": {"run_actual_state": 1 << 30}}


def _snapshot_notes(cfg) -> list[str]:
    return [n for n in host_notes(cfg, _results()) if n.startswith("snapshot")]


def test_an_unstated_snapshot_rate_is_said_to_be_this_hosts_copy():
    [note] = _snapshot_notes(load_config("default"))
    assert "this host's" in note and "design.node.snapshot.rate" in note and "48GiB/s" in note


def test_a_stated_rate_is_paced_and_needs_no_note():
    assert _snapshot_notes(load_config("default", ["design.node.snapshot.rate=48GiB/s"])) == []


def test_without_a_design_every_figure_is_the_hosts_and_no_snapshot_note_is_added():
    assert _snapshot_notes(load_config("mlperf-llama3-8b")) == []
