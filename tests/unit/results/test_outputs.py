"""What a finished run writes into its results folder: results.json, report.txt and, unless
``run.timeline`` is false, timeline.png."""
from __future__ import annotations

import json

import pytest
from test_full_size_ratios import _rank

from emulator.config import load_config
from emulator.results.report import write_outputs


@pytest.mark.parametrize("timeline", [True, False])
def test_the_timeline_is_drawn_unless_turned_off(tmp_path, timeline):
    cfg = load_config(None, ["checkpoint.modes=[sync]", "checkpoint.baseline=true", "parallelism.ranks=2",
                             "run.dilation=10", f"run.timeline={str(timeline).lower()}"])
    results = write_outputs(cfg, [_rank(r) for r in (0, 1)], tmp_path)
    assert json.loads((tmp_path / "results.json").read_text())["modes"] == json.loads(json.dumps(results["modes"]))
    assert (tmp_path / "report.txt").read_text().strip()
    assert (tmp_path / "timeline.png").exists() == timeline
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["results.json", "report.txt"] + (["timeline.png"] if timeline else []))  # no temporary left
