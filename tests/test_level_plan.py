"""Planning multi-level checkpointing (issue 24) from a config: `plan`, `simulate` and `tune` on levels.

- level_inputs on a design whose numbers can be checked by hand (2 nodes, 100 GB per node,
  a 400 Gb/s NIC, 10 GB/s NVMe, 20 GB/s global storage for the job, 20 GB/s host memory);
- a calibration from a results.json written by hand in the shape a run with levels writes;
- the CLI: simulate prints every tier, goodput by both models and the planner's choice;
  the planner's intervals agree with the best cell of simulate --sweep over the same grid
  within one grid step; bad input is one line, exit 2, nothing written (`plan CONFIG` on the
  design: tests/test_plan_design.py).
No emulation runs here: every input is a config or a hand-written results.json.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from emu import ckpt_emu

from emulator.config import load_config
from emulator.simulation.design import full_size_groups
from emulator.planner.model import recovery_levels
from emulator.simulation.level_design import class_rates, describe_design, level_inputs, read_calibration
from emulator.sizing import checkpoint_size
from emulator.units import GIB

GB = 1e9
RATES = {"process": 1 / 3600, "node": 1 / 7200, "group": 1 / 72000}  # per second


def _config(tmp: Path, *, peer=True, modes=("sync", "async"), **tiers) -> Path:
    """Llama 3 8B on a 2-node design: memory, peer (1 replica), NVMe and global storage."""
    data = {
        "extends": "llama3-8b",
        "run": {"out": str(tmp / "out")},
        "training": {"step_seconds": 60.0},
        "checkpoint": {"interval_steps": 5, "modes": list(modes)},
        "tiers": {"memory": {"backend": "dir", "path": str(tmp / "shm"), **tiers.get("memory", {})},
                  "peer": {"replicas": 1, **tiers.get("peer", {})} if peer else None,
                  "local": {"backend": "dir", "path": str(tmp / "local"), **tiers.get("local", {})},
                  "global": {"backend": "dir", "path": str(tmp / "global"), **tiers.get("global_", {})}},
        "design": {"job": {"nodes": 2, "accelerators_per_node": 8},
                   "node": {"memory": {"capacity": "512GiB", "write": "20GB/s", "read": "20GB/s"},
                            "local": {"write": "10GB/s", "read": "10GB/s"}, "nic": "400Gb/s"},
                   "global": {"write": "20GB/s", "read": "20GB/s"}},
    }
    path = tmp / "levels.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _by_name(inputs) -> dict:
    return {lv.name: lv for lv in inputs.levels}


# --------------------------------------------------------------------------- level_inputs

def test_level_inputs_by_hand_async(tmp_path):
    cfg = load_config(str(_config(tmp_path)))
    inp = level_inputs(cfg, nodes=2, class_rates=RATES, node_bytes=100 * GB)
    lv = _by_name(inp)
    assert list(lv) == ["memory", "peer", "local", "global"]
    assert inp.base_interval_s == pytest.approx(5 * 60.0)
    assert all(x.every == 1 for x in lv.values())
    # snapshot: each of 8 accelerators stages its 12.5 GB at 48 GiB/s; the rest is in the background
    assert lv["memory"].stall_s == pytest.approx(100 * GB / 8 / (48 * GIB))
    assert lv["peer"].stall_s == lv["local"].stall_s == lv["global"].stall_s == 0
    # lags from the end of the snapshot: memory 100/20 = 5 s, then copies from memory one after
    # another: peer 100 GB / 50 GB/s = 2 s, NVMe 100/10 = 10 s, global min(50, 20/2) = 10 GB/s: 10 s
    assert lv["memory"].lag_s == pytest.approx(5.0)
    assert lv["peer"].lag_s == pytest.approx(5.0 + 2.0)
    assert lv["local"].lag_s == pytest.approx(5.0 + 2.0 + 10.0)
    assert lv["global"].lag_s == pytest.approx(5.0 + 2.0 + 10.0 + 10.0)
    # restores: memory 100/20, peer 100/50 + 100/20, NVMe 100/10; global only for a group loss,
    # every node restarting: 20 GB/s over 2 nodes -> 10 s
    assert lv["memory"].restore_s == pytest.approx(5.0)
    assert lv["peer"].restore_s == pytest.approx(7.0)
    assert lv["local"].restore_s == pytest.approx(10.0)
    assert lv["global"].restore_s == pytest.approx(10.0)
    names = [inp.levels[i].name for i in recovery_levels(inp)]
    assert dict(zip([c.name for c in inp.classes], names)) == {"process": "memory", "node": "peer", "group": "global"}


def test_without_peers_a_lost_node_reads_global_alone_and_a_group_in_a_storm(tmp_path):
    cfg = load_config(str(_config(tmp_path, peer=False)))
    d = describe_design(cfg, nodes=2, class_rates=RATES, node_bytes=100 * GB)
    # the lost node alone: min(NIC 50, 20 / 1) = 20 GB/s -> 5 s; all nodes: 10 GB/s each -> 10 s
    assert d.class_restore_s["node"] == pytest.approx(5.0)
    assert d.class_restore_s["group"] == pytest.approx(10.0)
    g = _by_name(d.inputs)["global"]
    w = RATES["node"] / (RATES["node"] + RATES["group"])
    assert g.restore_s == pytest.approx(w * 5.0 + (1 - w) * 10.0)  # the expected restore of a failure there


def test_sync_stalls_for_the_whole_write_path(tmp_path):
    cfg = load_config(str(_config(tmp_path, modes=("sync",))))
    lv = _by_name(level_inputs(cfg, nodes=2, class_rates=RATES, node_bytes=100 * GB))
    snap = 100 * GB / 8 / (48 * GIB)
    assert lv["memory"].stall_s == pytest.approx(snap + 5.0)
    assert (lv["peer"].stall_s, lv["local"].stall_s, lv["global"].stall_s) == pytest.approx((2.0, 10.0, 10.0))
    assert all(x.lag_s == 0 for x in lv.values())


def test_node_bytes_are_the_heaviest_nodes_and_every_follows_the_tier(tmp_path):
    cfg = load_config(str(_config(tmp_path, local={"interval_steps": 20}, global_={"interval_steps": 40})))
    d = describe_design(cfg, nodes=2, class_rates=RATES)
    groups = full_size_groups(cfg, 2, 8)
    assert d.node_bytes == max(g.node_bytes for g in groups) >= checkpoint_size(cfg.model, cfg.parallelism).total_bytes / 2
    assert d.job_bytes == sum(g.nodes * g.node_bytes for g in groups)
    assert {k: v.every for k, v in _by_name(d.inputs).items()} == {"memory": 1, "peer": 1, "local": 4, "global": 8}
    # the peer (every checkpoint) copies before NVMe (every 4th): both before NVMe's is complete
    b = d.node_bytes
    assert _by_name(d.inputs)["local"].lag_s == pytest.approx(b / 20e9 + b / 50e9 + b / 10e9)
    # global (every 8th) after the peer (every 1st) and NVMe (every 4th): 8 is a multiple of both
    assert _by_name(d.inputs)["global"].lag_s == pytest.approx(b / 20e9 + b / 50e9 + b / 10e9 + b / 10e9)


def test_without_a_design_the_tiers_emulated_rates_stand_in(tmp_path):
    """A levels config without design: (as tests' and users' run configs are): each tier's emulate rates,
    per node (x ranks where shared_by rank; the job's share where shared_by job), a 400 Gb/s NIC."""
    data = yaml.safe_load(_config(tmp_path).read_text())
    del data["design"]
    data["tiers"]["memory"]["emulate"] = {"write_gib_s": 2.0, "shared_by": "rank"}
    data["tiers"]["local"]["emulate"] = {"write_gib_s": 8.0, "read_gib_s": 16.0}
    data["tiers"]["global"]["emulate"] = {"write_gib_s": 20.0, "shared_by": "job"}
    path = tmp_path / "no-design.yaml"
    path.write_text(yaml.safe_dump(data))
    lv = _by_name(level_inputs(load_config(str(path)), nodes=4, class_rates=RATES, node_bytes=64 * GIB,
                               accelerators_per_node=8))
    mem = 64 / 16  # 8 ranks x 2 GiB/s
    assert lv["memory"].lag_s == pytest.approx(mem) and lv["memory"].restore_s == pytest.approx(mem)
    peer = 64 * GIB / 50e9
    assert lv["peer"].lag_s == pytest.approx(mem + peer)
    assert lv["local"].lag_s == pytest.approx(mem + peer + 64 / 8)
    assert lv["global"].lag_s == pytest.approx(mem + peer + 64 / 8 + 64 / 5)  # 20 GiB/s over 4 nodes, below the NIC
    del data["tiers"]["local"]["emulate"]
    path.write_text(yaml.safe_dump(data))
    proc = ckpt_emu("plan", path, "--nodes", "4")
    assert proc.returncode == 2 and "tiers.local.emulate.write_gib_s" in proc.stderr, proc.stderr


def test_class_rates_split_the_cluster_rate():
    r = class_rates(accelerators=16, mttf_hours=1000, node_loss_fraction=0.5, group_loss_fraction=0.1)
    total = 16 / (1000 * 3600)
    assert (r["process"], r["node"], r["group"]) == pytest.approx((0.4 * total, 0.5 * total, 0.1 * total))


# --------------------------------------------------------------------------- calibration

def _results(tmp: Path, cfg_path: Path, scale: float = 0.01) -> Path:
    """A results.json of a run with levels, in the shape `ckpt-emu run` writes, by hand."""
    cfg = load_config(str(cfg_path), [f"run.scale={scale}"])
    raw = {"config": cfg.to_dict(), "nodes": 1, "ranks": 8, "per_rank": [], "load": {},
           "modes": {"async": {"training_wall_s": 10.0, "stall_total_s": 0.1, "steps": 20}},
           "levels": {"memory": {"every": 1, "due": 4, "complete": 4, "lag_mean_s": 0.03, "seconds_mean": 0.02,
                                 "node_bytes": 10 ** 9},
                      "local": {"every": 1, "due": 4, "complete": 4, "lag_mean_s": 0.12, "seconds_mean": 0.08,
                                "node_bytes": 10 ** 9},
                      "global": {"every": 1, "due": 4, "complete": 4, "lag_mean_s": 0.4, "seconds_mean": 0.25,
                                 "node_bytes": 10 ** 9}},
           "restore_by_tier": {"memory": {"ok": True, "seconds": 0.01, "node_bytes": 10 ** 9},
                               "local": {"ok": True, "seconds": 0.05, "node_bytes": 10 ** 9},
                               "global": {"ok": True, "seconds": 0.2, "node_bytes": 10 ** 9}},
           "recoveries": [{"class": "process", "seconds": 0.02, "seconds_full_size": 2.0,
                           "served_by": {"memory": 8}, "lost_steps": 1, "lost_work_s": 60.0},
                          {"class": "group", "seconds": 0.3, "seconds_full_size": 30.0,
                           "served_by": {"global": 8}, "lost_steps": 3, "lost_work_s": 180.0}]}
    path = tmp / "results.json"
    path.write_text(json.dumps(raw))
    return path


def test_calibration_takes_rates_lag_and_recoveries_and_the_model_predicts_the_rest(tmp_path):
    """A run's rates (a node's bytes over each stage, over each restore from one tier), its nearest
    tier's lag and the recovery of each class it went through; every other lag and restore is the
    model's. ``--as-run`` (measured_recoveries off) predicts the recoveries too."""
    cfg_path = _config(tmp_path)
    cal = read_calibration(str(_results(tmp_path, cfg_path)))
    assert cal.copy_bps == pytest.approx({"memory": 50 * GB, "local": 12.5 * GB, "global": 4 * GB})
    assert cal.read_bps == pytest.approx({"memory": 100 * GB, "local": 20 * GB, "global": 5 * GB})
    assert cal.first_lag_s == pytest.approx(3.0)  # 0.03 s / scale 0.01
    cfg = load_config(str(cfg_path))
    lv = _by_name(level_inputs(cfg, nodes=2, class_rates=RATES, calibration=cal, node_bytes=100 * GB))
    # memory's lag is the run's; then the peer at the design's NIC (the run had none), NVMe, global
    assert lv["memory"].lag_s == pytest.approx(3.0)
    assert lv["peer"].lag_s == pytest.approx(3.0 + 2.0)
    assert lv["local"].lag_s == pytest.approx(3.0 + 2.0 + 8.0)
    assert lv["global"].lag_s == pytest.approx(3.0 + 2.0 + 8.0 + 25.0)
    assert cal.recovery_s == {"process": 2.0, "group": 30.0}
    # the run recovered from a crash (memory) and a group loss (global): those are measured
    assert lv["memory"].restore_s == pytest.approx(2.0) and lv["global"].restore_s == pytest.approx(30.0)
    assert lv["peer"].restore_s == pytest.approx(2.0 + 1.0)  # no node loss measured: fetch at the NIC, then memory
    predicted = _by_name(describe_design(cfg, nodes=2, class_rates=RATES, calibration=cal, node_bytes=100 * GB,
                                         measured_recoveries=False).inputs)
    assert predicted["memory"].restore_s == pytest.approx(1.0) and predicted["global"].restore_s == pytest.approx(20.0)


def test_a_measured_interference_charges_each_async_copy_and_thins_the_far_tiers(tmp_path):
    """Async copies are not free: a calibration's interference share (training time lost per
    second of background copy) charges each level's own copy. Uncharged, the planner takes every
    checkpoint everywhere; charged, it thins the NVMe (it recovers no class) and the slow global
    copy (a group loss a day)."""
    from emulator.simulation.level_design import LevelCalibration, plan
    cfg = load_config(str(_config(tmp_path, modes=("async",))))
    free = describe_design(cfg, nodes=2, class_rates=RATES, node_bytes=100 * GB)
    charged = describe_design(cfg, nodes=2, class_rates=RATES, node_bytes=100 * GB,
                              calibration=LevelCalibration("run.json", interference_share=0.5))
    lv, snapshot = _by_name(charged.inputs), 100 * GB / 8 / (48 * GIB)
    # own copies (test_level_inputs_by_hand_async): memory 5 s, peer 2 s, NVMe 10 s, global 10 s
    assert lv["memory"].stall_s == pytest.approx(snapshot + 0.5 * 5.0)
    assert lv["peer"].stall_s == pytest.approx(0.5 * 2.0)
    assert lv["local"].stall_s == lv["global"].stall_s == pytest.approx(0.5 * 10.0)
    assert _by_name(charged.inputs)["global"].lag_s == _by_name(free.inputs)["global"].lag_s
    uncharged = plan(free, horizon_s=86400)["recommended"]["every"]
    thinned = plan(charged, horizon_s=86400)["recommended"]["every"]
    assert set(uncharged.values()) == {1}
    assert thinned["local"] > 1 and thinned["global"] > 1 and thinned["peer"] <= thinned["global"]


# --------------------------------------------------------------------------- CLI

def _json(proc) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_simulate_reports_levels_and_keeps_its_two_tier_study(tmp_path):
    out = _json(ckpt_emu("simulate", _config(tmp_path), "--days", "5", "--mttf-hours", "20000",
                         "--out", tmp_path / "sim", "--json"))
    assert set(out["modes"]) == {"sync", "async"} and "levels" in out
    assert out["levels"]["mode"] == "async" and out["levels"]["nodes"] == 2


def _index(values: list, v) -> int:
    return values.index(v)


def test_planner_agrees_with_the_best_cell_of_a_sweep_within_one_step(tmp_path):
    """The issue's check: over the same grid, the planner's `every` per tier is within one grid step
    of the best cell the SimPy level model finds (same failures in every cell)."""
    grid = {"peer": [1, 2, 4, 8], "local": [1, 4, 16], "global": [2, 4, 8, 16, 32]}
    args = [f"{k}_every={','.join(map(str, v))}" for k, v in grid.items()]
    # sync: every level stalls, so each has an optimum inside the grid (failures: ~1.9 a day)
    out = _json(ckpt_emu("simulate", _config(tmp_path, modes=("sync",)), "--days", "40", "--mttf-hours", "200",
                         "--node-loss-fraction", "0.3", "--group-loss-fraction", "0.1",
                         *sum((["--sweep", a] for a in args), []), "--out", tmp_path / "sim", "--json"))
    sw = out["levels_sweep"]
    assert len(sw["cells"]) == 4 * 3 * 5
    best, planned = sw["best"]["every"], sw["planner"]["every"]
    for name, values in grid.items():
        assert abs(_index(values, best[name]) - _index(values, planned[name])) <= 1, (name, best, planned)
    assert sw["agree_within_one_step"] is True
    # the planner's cell, simulated, is within a percent of the best cell's goodput
    assert sw["planner"]["goodput_simulated"] == pytest.approx(sw["best"]["goodput"], rel=0.01)


@pytest.mark.parametrize("args, message", [
    (["--sweep", "peer_every=1,2"], "--sweep peer_every: the config has no peer tier"),
    (["--sweep", "local_every=1,2.5"], "--sweep local_every: '2.5' is not a whole number >= 1"),
    (["--sweep", "global_every=0,2"], "--sweep global_every: '0' is not a whole number >= 1"),
    (["--sweep", "memory_every=1,2"], "--sweep memory_every: the memory tier takes every checkpoint"),
    (["--group-loss-fraction", "1.5"], "--group-loss-fraction: must be <= 1"),
    (["--node-loss-fraction", "0.7", "--group-loss-fraction", "0.4"],
     "--node-loss-fraction + --group-loss-fraction: 1.1 is above 1"),
])
def test_bad_level_input_is_one_line_exit_2_and_nothing_written(tmp_path, args, message):
    cfg = _config(tmp_path, peer=False)
    for cmd in (["simulate", cfg, "--out", tmp_path / "sim"], ["plan", cfg]):
        if cmd[0] == "plan" and args[0] == "--sweep":
            continue
        proc = ckpt_emu(*cmd, *args)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], proc.stderr
        assert not (tmp_path / "sim").exists()


def test_a_trace_gives_each_failure_its_class_and_the_classes_their_rates(tmp_path):
    from emulator.simulation.arrivals import read_trace
    from emulator.simulation.level_design import trace_classes, trace_rates
    trace = tmp_path / "trace.csv"
    trace.write_text("time,kind\n1h,process\n2h,node\n3h,group\n4h,restart\n")
    failures = trace_classes(read_trace(str(trace)), node_loss_fraction=0.5, group_loss_fraction=0.1, seed=0)
    assert failures == [(3600.0, "process"), (7200.0, "node"), (10800.0, "group"), (14400.0, "process")]
    assert trace_rates(failures) == pytest.approx({"process": 2 / 14400, "node": 1 / 14400, "group": 1 / 14400})
    out = _json(ckpt_emu("simulate", _config(tmp_path), "--failures", trace, "--days", "1", "--out", tmp_path / "sim",
                         "--json"))["levels"]
    assert [c["failures_per_day"] for c in out["classes"]] == pytest.approx([12.0, 6.0, 6.0])


def test_a_failure_restores_the_newest_checkpoint_a_surviving_level_holds():
    """As the emulator restores (the newest checkpoint every rank can load): a node loss with the
    peer's copy at 400 s of work and global's at 600 s restores from global, and a group loss
    right after it still finds global's copy (before: it was dropped as 'newer', and the next
    failure found no level at all)."""
    from emulator.planner.model import FailureClass, Level, LevelInputs
    from emulator.simulation.levels import LevelJob
    inp = LevelInputs(100.0, (Level("memory", 1, 0.0, 0.0, 1.0), Level("peer", 4, 0.0, 0.0, 2.0),
                              Level("global", 2, 0.0, 0.0, 3.0)),
                      (FailureClass("node", 0.0, "peer"), FailureClass("group", 0.0, "global")), 10.0)
    out = LevelJob(inp, seed=0, horizon_s=1000.0, failures=[(650.0, "node"), (660.0, "group")]).run()
    node, group = out.classes
    assert node.lost_work_s == pytest.approx(50.0) and node.recovery_s == pytest.approx(10.0)
    assert group.failures == 1 and group.lost_work_s == pytest.approx(0.0)


def test_the_plan_is_for_the_heaviest_node_not_the_average():
    """Llama-3 405B on 2,048 nodes (TP8 PP32 DP64): node 0's ranks hold the DP-rank-0 shards,
    29.9 GiB against a 2.6 GiB average; a synchronous job's checkpoint waits for that node."""
    cfg = load_config("design-memory-peer-pfs")
    d = describe_design(cfg, nodes=2048, class_rates=RATES)
    size = checkpoint_size(cfg.model, cfg.parallelism)
    assert d.node_bytes == pytest.approx(29.89 * 2 ** 30, rel=1e-3)
    assert d.job_bytes == pytest.approx(size.total_bytes, rel=1e-6) and d.node_bytes > 10 * d.job_bytes / 2048
