"""What the job really loses: slowdown against a no-checkpoint baseline, interference, goodput,
the durability lag, checkpoints at risk, full-size durations, and notes on what is the host's."""
from __future__ import annotations

import json
from collections import defaultdict
from itertools import zip_longest

import pytest
from emu import ckpt_emu, results, small_config

#: the tests that compare a run's steps with its baseline's: CPU-bound steps slow each other and the
#: copies, so another test's load beside them would be measured too
ALONE = pytest.mark.alone

SCALE = 0.0005


def _run(tmp_path, **sections) -> dict:
    sections.setdefault("checkpoint", {})
    sections["checkpoint"] = {"baseline": True, "saves": 8, "interval_steps": 4, "loads": 0, **sections["checkpoint"]}
    cfg = small_config(tmp_path, **sections)
    ckpt_emu("run", cfg, "--quiet", check=True)
    return results(tmp_path / "out")


@pytest.fixture(scope="module")
def sleep_run(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("sleep"))


@ALONE
def test_a_baseline_mode_runs_first_and_every_mode_is_measured_against_it(sleep_run):
    res, base = sleep_run, sleep_run["baseline"]
    assert base["steps"] == 32 and base["step_wall_s"] > 0
    assert set(res["timeline"]) == {"none", "sync", "async"}
    for mode, m in res["modes"].items():
        # the same work; async then trains on while its last checkpoint drains, as a job would
        assert m["steps"] == base["steps"] if mode != "async" else m["steps"] >= base["steps"], mode
        assert m["goodput_ratio"] == pytest.approx(1 / (1 + m["slowdown_ratio"]))
        assert m["interference_ratio"] == pytest.approx(m["slowdown_ratio"] - m["stall_share_ratio"])
    sync, asyn = res["modes"]["sync"], res["modes"]["async"]
    assert sync["slowdown_ratio"] > asyn["slowdown_ratio"] > -0.05
    # checkpointing never speeds the steps up (how much it slows them on a loaded host is the host's:
    # test_cpu_bound_steps_show_interference compares it)
    assert sync["interference_ratio"] > -0.06 and asyn["interference_ratio"] > -0.06, (sync, asyn)


@ALONE
def test_overhead_agrees_with_the_timeline_events(sleep_run):
    """An independent measurement: the job's stall (each rank's n-th stall bar is checkpoint n;
    per checkpoint the longest bar, summed) over the longest span of a rank's compute bars."""
    for mode, m in sleep_run["modes"].items():
        stalls, span = defaultdict(list), {}
        for e in sorted(sleep_run["timeline"][mode], key=lambda e: e["start"]):
            if e["kind"] == "stall":
                stalls[e["rank"]].append(e["end"] - e["start"])
            elif e["kind"] in ("compute", "slow_compute"):
                lo, hi = span.get(e["rank"], (e["start"], e["end"]))
                span[e["rank"]] = (min(lo, e["start"]), max(hi, e["end"]))
        job_stall = sum(max(bars) for bars in zip_longest(*stalls.values(), fillvalue=0.0))
        measured = job_stall / max(hi - lo for lo, hi in span.values())
        # the report never shows less overhead than its own events do (how much more is the host's)
        assert m["overhead_ratio"] >= 0.85 * measured - 0.01, (mode, m["overhead_ratio"], measured)


@ALONE
def test_durability_lag_and_checkpoints_at_risk(sleep_run):
    for mode, m in sleep_run["modes"].items():
        assert m["lag_mean_s"] >= 0.9 * (m["local_write_mean_s"] + m["drain_mean_s"]), mode
        assert m["lag_max_s"] >= m["lag_p99_s"] >= m["lag_mean_s"] > 0
    assert sleep_run["modes"]["sync"]["at_risk"] == 0  # sync waits for durability
    assert sleep_run["modes"]["async"]["at_risk"] == 0  # training went on until the last one drained
    for rec in (x for r in sleep_run["per_rank"] for x in r["records"]):
        assert rec["lag_s"] >= rec["local_write_s"] + rec["drain_s"] - 1e-6


@ALONE
def test_durations_are_also_given_at_full_size(sleep_run):
    """Each duration also at full size (the design's: its paced part over the time factor, the
    software's once; the rules: tests/unit/rank/test_dilation.py): never shorter than measured."""
    assert sleep_run["scale"] == SCALE and sleep_run["step_seconds"]["full_size"] == 100.0
    for m in sleep_run["modes"].values():
        for key, value in m["full_size"].items():
            if key.endswith("_s") and key in m:  # durations (a rate at full size is the design's, not larger)
                assert value >= m[key], key
    report = (sleep_run["config"]["run"]["out"])
    text = open(f"{report}/report.txt").read()
    assert "in brackets the full-size design's" in text and "durability lag mean" in text and "goodput" in text


@ALONE
def test_cpu_bound_steps_show_interference(tmp_path, sleep_run):
    """Compute that needs the CPU competes with the background write and drain: steps take
    longer than without checkpoints although the stall did not grow."""
    # 2 ranks on 2 cores, each step 50 ms of CPU, ~27 MiB per rank written and drained every 4 steps
    cpu = _run(tmp_path, training={"compute": "cpu"}, run={"scale": 0.002}, checkpoint={"modes": ["async"]})
    interference = cpu["modes"]["async"]["interference_ratio"]
    assert interference > 0.05 and interference > sleep_run["modes"]["async"]["interference_ratio"] + 0.03, cpu["modes"]
    # the tail: a tenth of the steps at least are well past nine in ten steps without checkpoints
    # (not the baseline's p99: of 32 steps, the slowest, which one hiccup of the host sets)
    steps = {mode: [e["end"] - e["start"] for e in cpu["timeline"][mode] if e["kind"] in ("compute", "slow_compute")]
             for mode in ("none", "async")}
    base_p90 = sorted(steps["none"])[int(0.9 * len(steps["none"]))]
    assert sum(t > 1.1 * base_p90 for t in steps["async"]) >= 0.1 * len(steps["async"]), (base_p90, steps)
    # the timeline marks exactly the steps slower than the baseline's p99 x 1.1
    slow_after = cpu["baseline"]["step_p99_s"] * 1.1
    for e in (e for e in cpu["timeline"]["async"] if e["kind"] in ("compute", "slow_compute")):
        if abs(e["end"] - e["start"] - slow_after) > 1e-9:  # (times relative to the mode's start)
            assert (e["kind"] == "slow_compute") == (e["end"] - e["start"] > slow_after), (e, slow_after)


def test_the_report_says_which_figures_are_the_hosts(tmp_path):
    """A 200 GiB/s NVMe undilated (run.dilation 1): this host cannot keep to it, and the report says
    the local write's figure is in part this host's, in results.json and report.txt alike. Not alone:
    another test's load only slows this host further; one sync mode, no baseline (nothing compared)."""
    res = _run(tmp_path, run={"dilation": 1}, checkpoint={"saves": 3, "baseline": False, "modes": ["sync"]},
               tiers={"local": {"emulate": {"write_gib_s": 200, "shared_by": "node"}}})
    notes = "\n".join(res["notes"])
    assert "local write (sync):" in notes and "this host's own" in notes, notes
    assert all(f"note: {n}" in open(f"{tmp_path}/out/report.txt").read() for n in res["notes"])


def test_a_run_without_the_baseline_says_so(tmp_path):
    """What a run without the baseline writes (not alone: nothing is timed; one sync mode)."""
    res = _run(tmp_path, checkpoint={"baseline": False, "saves": 2, "modes": ["sync"]})
    assert res["baseline"] is None and "slowdown_ratio" not in res["modes"]["sync"]
    assert "baseline: not run" in open(f"{tmp_path}/out/report.txt").read()
    assert json.loads((tmp_path / "out" / "config.json").read_text())["checkpoint"]["baseline"] is False
