"""Issue 53's reproductions for `ckpt-emu simulate` (each fails on the code before its fix): the planner's
cell is simulated whole, every tier's ``every`` with its interval."""
from __future__ import annotations

import json

import pytest

from emulator.cli import main


def _json(capsys, *argv) -> dict:
    assert main([*map(str, argv), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_planners_interval_comes_with_its_every(capsys, tmp_path):
    """`simulate --interval planner` took the planner's interval and kept the design's own every: on
    design-memory-nvme-s3 the planner sends every 2nd checkpoint to S3, the design every 30th."""
    out = _json(capsys, "simulate", "design-memory-nvme-s3", "--interval", "planner", "--days", "10",
                "--out", tmp_path / "sim")
    planned = out["planner"]["async"]
    assert planned["every"]["global"] < 30
    simulated = out["modes"]["async"]["global_bytes_per_day"]
    assert simulated == pytest.approx(planned["global_bytes_per_day"], rel=0.05)
