"""Planning multi-level checkpointing (issue 24) from a config: `plan`, `simulate` and `tune` on levels.

- the CLI (plan's own report is tests/unit/planner/test_plan_design.py): simulate reports
  every tier and class; the planner's intervals agree with the best cell of simulate --sweep over
  the same grid within one grid step; bad input is one line, exit 2, nothing written.
No emulation runs here: every input is a config or a hand-written results.json
(tests/unit/simulation/test_simulate_calibrate.py). The design's figures per tier and class, by hand, are in
tests/unit/design/test_design_model.py and tests/unit/simulation/test_simulate_design.py.
"""
from __future__ import annotations

import json

import pytest
from emu import ckpt_emu, refused
from level_results import level_config as _config

from emulator.config import load_config
from emulator.design import resolve

RATES = {"process": 1 / 3600, "node": 1 / 7200, "group": 1 / 72000}  # per second


# --------------------------------------------------------------------------- CLI

def _json(proc) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_simulate_reports_every_tier_and_class_in_each_mode(tmp_path):
    out = _json(ckpt_emu("simulate", _config(tmp_path), "--days", "5", "--mttf-hours", "20000",
                         "--out", tmp_path / "sim", "--json"))
    assert set(out["modes"]) == {"sync", "async"} and out["nodes"] == 2
    assert list(out["design"]["tiers"]["all"]) == ["memory", "peer", "local", "global"]
    assert [c["from"] for c in out["design"]["classes"]["all"].values()] == ["memory", "peer", "global"]
    for o in out["modes"].values():
        assert list(o["tiers"]) == ["memory", "peer", "local", "global"] and o["tiers"]["global"]["copies"] > 0


@pytest.mark.parametrize("args, message", [
    (["--sweep", "peer_every=1,2"], "--sweep peer_every: the config has no peer tier"),
    (["--sweep", "local_every=1,2.5"], "--sweep local_every: '2.5' is not a whole number >= 1"),
    (["--sweep", "global_every=0,2"], "--sweep global_every: '0' is not a whole number >= 1"),
    (["--sweep", "memory_every=1,2"], "--sweep memory_every: the memory tier takes every checkpoint"),
    (["--group-loss-fraction", "1.5"], "--group-loss-fraction: must be <= 1"),
    (["--node-loss-fraction", "0.7", "--group-loss-fraction", "0.4"],
     "--node-loss-fraction + --group-loss-fraction: 1.1 is above 1"),
])
def test_bad_level_input_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, args, message):
    """In this process (``emu.refused``: docs/testing.md), not a process per case."""
    cfg = _config(tmp_path, peer=False)
    for cmd in (["simulate", cfg, "--out", tmp_path / "sim"], ["plan", cfg]):
        if cmd[0] == "plan" and args[0] == "--sweep":
            continue
        assert message in refused(capsys, *cmd, *args)
        assert not (tmp_path / "sim").exists()


def test_a_trace_gives_each_failure_its_class_and_the_classes_their_rates(tmp_path):
    from emulator.simulation.arrivals import Arrivals, read_trace
    trace = tmp_path / "trace.csv"
    trace.write_text("time,kind\n1h,process\n2h,node\n3h,group\n4h,restart\n")
    d = resolve(load_config(str(_config(tmp_path))))
    arrivals = Arrivals(d.failures, trace=read_trace(str(trace)))
    assert list(arrivals) == [(3600.0, "process"), (7200.0, "node"), (10800.0, "group"), (14400.0, "process")]
    assert arrivals.rates() == pytest.approx({"process": 2 / 14400, "node": 1 / 14400, "group": 1 / 14400})
    out = _json(ckpt_emu("plan", _config(tmp_path), "--failures", trace, "--json"))["classes"]
    assert [out[c]["per_day"] for c in ("process", "node", "group")] == pytest.approx([12.0, 6.0, 6.0])
