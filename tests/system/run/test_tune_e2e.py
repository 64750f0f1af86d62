"""ckpt-emu tune end to end: the measurement run, the plan and the confirming run."""
from __future__ import annotations

import json

import pytest
from emu import ckpt_emu, results, small_config


@pytest.mark.alone  # compares runs' interference: another worker's load is measured too
def test_tune_end_to_end(tmp_path):
    """About 60 s here; no absolute time is asserted (shared, noisy machines). 8 accelerators: the 8B
    config's own job, one node, of which the run starts 2 ranks."""
    # 4 steps (200 ms here) between the measuring run's checkpoints, more than one takes end to end
    # (about 140 ms): at 2 they queued, and a snapshot taken beside the previous drain on 2 cores took
    # 3x as long (8 ms, not 2.5): the plan's stall came out twice the confirming run's (CI: 0.54)
    cfg = small_config(tmp_path, ranks=2, checkpoint={"interval_steps": 4})
    proc = ckpt_emu("tune", cfg, "--accelerators", "8", "--confirm-seconds", "6", "--json", check=True)
    r = json.loads(proc.stdout)
    m, rec, c = r["measured"], r["recommended"], r["confirmation"]
    assert m["sync_stall_s"] > m["async_stall_s"] > 0 and m["drain_s"] > 0
    # times are full size: the async commit runs from the end of the stall until durable, so the stall
    # and the commit hold the snapshot once, as the durability lag does (the commit is the model's for the
    # job's node, the lag the run's measured / scale for its 2 ranks, which also divides per-checkpoint
    # costs by the scale)
    measure = results(r["runs"]["measure"])
    asyn = measure["modes"]["async"]["full_size"]
    assert m["scale"] == 0.0005 and 0 < m["commit_s"]
    # the measuring run loaded a checkpoint (its restore is the plan's) and ran the baseline (interference)
    assert measure["load"]["loads"] >= 1 and measure["baseline"] is not None
    assert m["restore_s"]["process"] > 0
    assert r["planned"]["classes"]["process"]["restore_s"] == m["restore_s"]["process"]
    assert m["interference_s"] >= 0 and asyn["lag_mean_s"] > 0
    assert rec["mode"] == "async" and rec["goodput"] >= rec["goodput_other_mode"] and rec["source"] == "planner"
    # the confirmation ran at the (compressed) recommended interval and every drain beat the next checkpoint
    assert 0 < c["compression"] <= 1
    step_full = 0.05 / 0.0005  # small_config's 50 ms steps, at full size
    assert abs(c["interval_s"] - rec["interval_s"] * c["compression"]) <= step_full / 2 + 1e-9
    assert c["checkpoints"] == 3 and c["drains_beat_next_checkpoint"]
    # the prediction holds within a noisy machine's factor (the same measured rates; a 2-core machine).
    # The async overhead is a few host-copy milliseconds in seconds of steps: a loaded machine only adds
    # to it, so it is bounded below; the overlap is paced drain time, bounded both ways
    assert 0.55 < c["measured_overhead"] / c["predicted_overhead"], c
    assert 0.55 < c["measured_overlap"] / c["predicted_overlap"] < 1.8, c
    # headroom: the job's drain at the measured rates against what the job's checkpoint (the 8B job's
    # 104.7 GiB, MLPerf's table, not the 2 ranks' 26 GiB) needs at a 10 % overlap target at the recommended
    # global interval. The global tier is a plain folder (a real store seen from one node): the job is
    # credited with the measured node's rate
    bw = r["global_bandwidth"]
    assert r["checkpoint_bytes"] / 2**30 == pytest.approx(104.7, rel=0.002)
    assert m["full_size_bytes"] / 2**30 == pytest.approx(104.7 / 4, rel=0.01)
    assert bw["measured_as"] == "one node"
    assert bw["measured_drain_bytes_per_s"] == pytest.approx(r["checkpoint_bytes"] / m["drain_s"])
    assert bw["needed_bytes_per_s"] == pytest.approx(r["checkpoint_bytes"] / (0.10 * rec["tier_interval_s"]["global"]))
    assert bw["headroom"] == pytest.approx(bw["measured_drain_bytes_per_s"] / bw["needed_bytes_per_s"])
