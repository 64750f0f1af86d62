"""`ckpt-emu tune` on the job's layout, planned by the one planner (the emulation runs faked, tests/support/tune_fakes.py).

Reproduction 1: `tune llama3-70b-subset --set design.job.nodes=128 --accelerators 1024 --nodes 128` kept the
preset's TP8 DP8 layout for the node it measured (113.9 GiB instead of a node's 7.1 GiB of the 1,024-GPU
job) and reported the global store 5x too slow (x0.21) where `--set parallelism.dp=128` gave x7.5.
"""
from __future__ import annotations

import pytest
import yaml
from tune_fakes import faked_tune

from emulator.config import ParallelismConfig, load_config
from emulator.sizing import checkpoint_size
from emulator.units import GIB, fmt_duration

#: the issue's 70B design: 128 nodes, a 200 Gb/s NIC, a 6 GB/s NVMe, a 100 GB/s object store
DESIGN = {"job": {"nodes": 128}, "node": {"local": {"write": "6GB/s", "read": "6GB/s"}, "nic": "200Gb/s"},
          "global": {"write": "100GB/s", "read": "100GB/s", "latency_ms": 1}}


def _config(tmp_path, name="l70.yaml", **extra):
    data = {"extends": "llama3-70b-subset", "run": {"scale": 0.001}, "training": {"step_seconds": 10.0},
            "checkpoint": {"interval_steps": 25, "saves": 3},
            "tiers": {"local": {"backend": "dir", "path": str(tmp_path / "nvme")},
                      "global": {"backend": "dir", "path": str(tmp_path / "store")}},
            "design": DESIGN, **extra}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return load_config(str(path), [f"run.out={tmp_path / 'out'}"])


def _as_paced(cfg) -> dict:
    """The rates the emulator paces the run's node at for this design: its NVMe's 6 GB/s, and its share of the
    100 GB/s store with all 128 nodes draining (each below its 25 GB/s NIC); 2 % of the async steps lost."""
    return dict(local_bps=6e9, global_bps=100e9 / 128, global_latency_s=0.001, interference=0.02)


def test_tune_measures_and_plans_a_node_of_the_jobs_layout(tmp_path, monkeypatch):
    tune_mod, runs = faked_tune(monkeypatch, _as_paced)
    r = tune_mod.tune(_config(tmp_path), accelerators=1024, nodes=128)
    fixed, _ = faked_tune(monkeypatch, _as_paced)
    by_dp = fixed.tune(_config(tmp_path, "dp.yaml", parallelism={"dp": 128}), accelerators=1024, nodes=128)
    # the run's node is a node of the 1,024-GPU job: TP8 DP128, 7.1 GiB at full size, not the preset's 113.9
    assert all(c.parallelism.dp == 128 for c in runs)
    assert r["measured"]["full_size_bytes"] / GIB == pytest.approx(7.12, abs=0.01)
    job = checkpoint_size(runs[0].model, ParallelismConfig(tp=8, pp=1, dp=128, zero_stage=3)).total_bytes
    assert r["checkpoint_bytes"] == job == by_dp["checkpoint_bytes"]
    # the store's headroom is the design's at the recommended interval: what the layout-fixed run gives
    bw, rec = r["global_bandwidth"], r["recommended"]
    assert bw["headroom"] == pytest.approx(by_dp["global_bandwidth"]["headroom"], rel=1e-6)
    # every node at its share: the job's bytes over the aggregate, then (drain.verify: checksum) each node's
    # last file read back, 1,024 files of an eighth of a node's bytes (+ a few ms of requests)
    drain = job / 100e9 * (1 + 1 / 8)
    assert bw["headroom"] == pytest.approx(0.10 * rec["tier_interval_s"]["global"] / drain, rel=0.01)
    assert bw["headroom"] > 1 and bw["measured_as"] == "every node"
    assert rec["interval_s"] == pytest.approx(by_dp["recommended"]["interval_s"], rel=1e-6)


def test_tune_recommends_what_plan_recommends_for_the_same_design(tmp_path, monkeypatch, capsys):
    """Reproduction 4 for tune: measured at the design's own rates, the calibrated design is the design,
    and tune's recommendation is plan's (the one planner)."""
    import json

    from emulator.cli import main
    cfg = _config(tmp_path)
    tune_mod, _ = faked_tune(monkeypatch, lambda c: {**_as_paced(c), "interference": 0.0})
    r = tune_mod.tune(cfg, accelerators=1024)
    assert main(["plan", str(tmp_path / "l70.yaml"), "--accelerators", "1024", "--json"]) == 0
    p = json.loads(capsys.readouterr().out)
    assert r["recommended"]["mode"] == p["recommended"]["mode"]
    assert r["recommended"]["interval_s"] == pytest.approx(p["recommended"]["base_interval_s"], rel=0.02)
    assert r["recommended"]["every"] == p["recommended"]["every"]
    # the cluster's MTTF in the one duration format plan prints it in
    text = tune_mod.format_tune(r)
    assert f"cluster MTTF {fmt_duration(r['cluster_mttf_s'])}" in text
    assert f"every {fmt_duration(r['recommended']['interval_s'])}" in text


def test_tune_refuses_a_job_no_layout_fills(tmp_path, monkeypatch):
    from emulator.errors import UserError
    tune_mod, runs = faked_tune(monkeypatch, _as_paced)
    with pytest.raises(UserError, match="--accelerators: 1,020 is not a whole number of 8-accelerator nodes"):
        tune_mod.tune(_config(tmp_path), accelerators=1020)
    with pytest.raises(UserError, match="--nodes: 1,024 accelerators do not split evenly over 3 nodes"):
        tune_mod.tune(_config(tmp_path), accelerators=1024, nodes=3)
    assert runs == []  # refused before anything ran


def test_tune_plans_every_tier_of_a_design_with_levels_and_confirms_it(tmp_path, monkeypatch):
    """Host memory, a peer copy, NVMe and global storage: tune's recommendation is every tier's every-N-th
    (the planner's, as `plan` gives it), and the confirmation run takes each tier at that interval."""
    from level_results import described_levels as _levels
    cfg = load_config(_levels(tmp_path), [f"run.out={tmp_path / 'out'}", "run.scale=0.001"])
    tune_mod, runs = faked_tune(monkeypatch, lambda c: dict(local_bps=10e9, global_bps=10e9))
    r = tune_mod.tune(cfg, accelerators=16, mttf_hours=20_000)
    rec = r["recommended"]
    assert list(rec["every"]) == ["memory", "peer", "local", "global"] and rec["every"]["memory"] == 1
    confirm = runs[-1]
    steps = r["confirmation"]["interval_steps"]
    assert confirm.checkpoint.interval_steps == steps
    for name, every in list(rec["every"].items())[1:]:
        assert confirm.tier_every[name] == every, name
    assert r["confirmation"]["every"] == rec["every"]
