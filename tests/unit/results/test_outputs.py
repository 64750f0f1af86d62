"""What a finished run writes into its results folder: results.json, report.txt and, unless
``run.timeline`` is false, timeline.png."""
from __future__ import annotations

import json

import pytest
from test_full_size_ratios import _rank

from rundesign import run_of
from emulator.config import load_config
from emulator.results.report import write_outputs


@pytest.mark.parametrize("timeline", [True, False])
def test_the_timeline_is_drawn_unless_turned_off(tmp_path, timeline):
    cfg = load_config(None, ["checkpoint.modes=[sync]", "checkpoint.baseline=true", "parallelism.ranks=2",
                             "run.dilation=10", f"run.timeline={str(timeline).lower()}"])
    results = write_outputs(cfg, *run_of(cfg), [_rank(r) for r in (0, 1)], tmp_path)
    assert json.loads((tmp_path / "results.json").read_text())["modes"] == json.loads(json.dumps(results["modes"]))
    assert (tmp_path / "report.txt").read_text().strip()
    assert (tmp_path / "timeline.png").exists() == timeline
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["results.json", "report.txt"] + (["timeline.png"] if timeline else []))  # no temporary left


def test_a_scale_fitted_to_the_wall_target_is_said_in_the_header_and_results_json(tmp_path):
    """run.wall_target: the scale the run went at, run.scale's and why (results.json ``scale_fit``,
    the report's header); the figures are at full size, as at any scale."""
    from dataclasses import replace
    from emulator.job.clock import Clock
    from emulator.rank.dilation import ScaleFit
    cfg = load_config(None, ["checkpoint.modes=[sync]", "parallelism.ranks=2", "run.scale=0.01",
                             "run.wall_target=3m"])
    fit = ScaleFit(asked=0.01, scale=0.0004, factor=25, target_s=180, wall_s=144, asked_wall_s=4800,
                   asked_factor=250)
    ran = replace(cfg, run=replace(cfg.run, scale=fit.scale))
    ranks = [{**_rank(r), "scale_fit": fit.describe()} for r in (0, 1)]
    design, _ = run_of(ran)
    results = write_outputs(ran, design, Clock(fit.scale, fit.factor), ranks, tmp_path)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["scale"] == 0.0004 and saved["scale_fit"] == json.loads(json.dumps(fit.describe()))
    assert results["scale_fit"]["run_scale"] == 0.01
    header = (tmp_path / "report.txt").read_text().split("\n\n")[0]
    assert "ckpt-emu: " in header and "x0.0004" in header
    assert ("scale 0.0004, not run.scale's 0.01 (run.wall_target 3.0 min): at 0.01 this host's x250 makes "
            "training 80.0 min here, at 0.0004 x25 makes it 2.4 min") in header, header
