"""A run's results.json as the design's calibration (emulator/simulation/calibrate.py ``read_calibration``):
each tier's copy and restore rate per node, the snapshot rate, the fixed costs counted once, the
measured recoveries, the run's pacing; and what the design makes of them.

A results.json written by hand in the shape a run with levels writes (memory, a peer, NVMe, global:
one node of 8 ranks at scale 0.01); no emulation runs (tests/test_simulate.py and test_levels.py
calibrate by real runs).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from emulator.config import load_config
from emulator.design import resolve
from emulator.design.costs import class_restore_seconds, copy_seconds
from emulator.simulation.calibrate import mode_calibrations, read_calibration, read_results

NODE, FILES, SCALE = 10 ** 9, 8, 0.01
#: seconds at the run's scale of each tier's stage for one node's 1 GB, and of a restore from it
STAGES = {"memory": 0.0625, "peer": 0.025, "local": 0.125, "global": 0.125}   # 16, 40, 8, 8 GB/s
RESTORES = {"memory": 0.0625, "local": 0.125, "global": 0.2}                   # 16, 8, 5 GB/s
SNAPSHOT, RESIDUAL = 0.0025, 0.01


def level_config(tmp: Path, *, peer=True, modes=("sync", "async"), **tiers) -> Path:
    """Llama 3 8B on a 2-node design: memory, peer (1 replica), NVMe and global storage."""
    data = {
        "extends": "llama3-8b",
        "run": {"out": str(tmp / "out")},
        "training": {"step_seconds": 60.0},
        "checkpoint": {"interval_steps": 5, "modes": list(modes)},
        "drain": {"verify": "size"},
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


def level_results(tmp: Path, cfg_path: Path, *, missed_wait: float = 0.0, dilation: float = 1.0) -> Path:
    """The results.json of a one-node run of ``cfg_path`` at scale 0.01, by hand: every checkpoint to
    every tier (memory first), the stages of :data:`STAGES`, a restore from each tier alone, a crash and
    a group loss recovered (their full-size seconds), and in async mode one checkpoint that waited
    ``missed_wait`` for the previous retention. ``dilation``: the run's run.dilation (its times as written)."""
    cfg = load_config(str(cfg_path), [f"run.scale={SCALE}"])
    due = ["memory", "peer", "local", "global"]
    work = sum(STAGES.values())

    def record(mode, step, rank, missed=False):
        complete = SNAPSHOT + work + RESIDUAL + (missed_wait if missed else 0.0)
        tiers = {t: {"complete": True, "lag_s": 0.0, "seconds": s} for t, s in STAGES.items()}
        return {"mode": mode, "step": step, "rank": rank, "node": 0, "wait_s": 0.0, "snapshot_s": SNAPSHOT,
                "stall_s": SNAPSHOT if mode == "async" else complete, "local_write_s": STAGES["memory"],
                "drain_s": STAGES["global"], "complete_s": complete, "file_bytes": NODE // FILES,
                "written_to": "memory", "missed": missed, "global_complete": True, "error": None, "due": due,
                "tiers": tiers}
    records = [record(m, 5 * (i + 1), r, missed=m == "async" and i == 2 and missed_wait > 0)
               for m in ("sync", "async") for i in range(3) for r in range(FILES)]
    raw = {"config": cfg.to_dict(), "nodes": 1, "ranks": FILES, "step_seconds": {"full_size": 60.0},
           "dilation": {"factor": dilation, "auto": True}, "time_factor": SCALE * dilation,
           "modes": {m: {"training_wall_s": 10.0, "stall_total_s": 0.1, "steps": 15} for m in ("sync", "async")},
           "load": {"recovery_mean_s_by_tier": {}},
           "per_rank": [{"rank": r, "node": 0, "records": [x for x in records if x["rank"] == r]}
                        for r in range(FILES)],
           "restore_by_tier": {t: {"ok": True, "seconds": s, "node_bytes": NODE} for t, s in RESTORES.items()},
           "recoveries": [{"class": "process", "seconds": 0.02, "seconds_full_size": 2.0, "served_by": {"memory": 8}},
                          {"class": "group", "seconds": 0.3, "seconds_full_size": 30.0, "served_by": {"global": 8}}]}
    path = tmp / "results.json"
    path.write_text(json.dumps(raw))
    return path


def test_a_run_calibrates_each_tiers_copy_and_restore_per_node(tmp_path):
    cfg_path = level_config(tmp_path)
    cal = read_calibration(str(level_results(tmp_path, cfg_path)), "async")
    assert cal.copy_bps == pytest.approx({t: NODE / s for t, s in STAGES.items()})
    # a peer's fetch was not timed alone: it travels the path its sends took
    assert cal.read_bps == pytest.approx({**{t: NODE / s for t, s in RESTORES.items()}, "peer": NODE / STAGES["peer"]})
    assert cal.snapshot_bps == pytest.approx(NODE / FILES / SNAPSHOT)
    assert (cal.fixed_pre_s, cal.fixed_post_s) == (pytest.approx(RESIDUAL / 2), pytest.approx(RESIDUAL / 2))
    assert cal.recovery_s == {"process": 2.0, "group": 30.0}
    assert set(cal.paced) == {"memory", "peer", "local", "global"}


def test_the_run_of_this_design_sets_its_rates_at_full_size_and_its_fixed_costs_once(tmp_path):
    """The design calibrated by a run of itself that reached 80 % of each tier's pace: each tier's links
    at 80 % (global storage: 8 of the 10 GB/s a node of two gets; the job's 20 GB/s at 16), the fixed
    costs as measured (not / scale), and the recoveries the run went through; the rest predicted."""
    cfg_path = level_config(tmp_path)
    cal = read_calibration(str(level_results(tmp_path, cfg_path)), "async")
    d = resolve(load_config(str(cfg_path)), calibration=cal)
    b = d.job.heaviest.node_bytes
    assert copy_seconds(d, "local") == pytest.approx(b / 8e9)
    assert copy_seconds(d, "global") == pytest.approx(b / 8e9)  # two nodes share 20 GB/s x 80 %
    assert d.link("global").drain.aggregate_bps == pytest.approx(16e9)
    assert (d.fixed_pre_s, d.fixed_post_s) == (pytest.approx(RESIDUAL / 2), pytest.approx(RESIDUAL / 2))
    assert class_restore_seconds(d, "process") == 2.0 and class_restore_seconds(d, "group") == 30.0
    # the peer's, predicted: its copy fetched at the rate the run's peer sends reached, then read from memory
    assert class_restore_seconds(d, "node") == pytest.approx(b / 40e9 + b / 16e9)
    run = resolve(load_config(str(cfg_path), [f"run.scale={SCALE}"]), calibration=cal, as_run=True)
    assert run.measured_recovery_s == {}  # as run, the recoveries are what the model must predict


def test_another_design_keeps_its_rates(tmp_path):
    """Calibrated by a run of another NVMe (10 GB/s, reaching 8), a design with a 5 GB/s one plans at 5."""
    cal = read_calibration(str(level_results(tmp_path, level_config(tmp_path))), "async")
    (tmp_path / "other").mkdir()
    other = level_config(tmp_path / "other")
    data = yaml.safe_load(other.read_text())
    data["design"]["node"]["local"] = {"write": "5GB/s", "read": "5GB/s"}
    other.write_text(yaml.safe_dump(data))
    d = resolve(load_config(str(other)), calibration=cal)
    assert d.link("local").write.node_bps == pytest.approx(5e9) and d.sources["local_write"] == "design"
    assert d.link("memory").write.node_bps == pytest.approx(16e9)  # the same memory: the run's


def test_retention_measured_in_one_mode_serves_the_other(tmp_path):
    cfg_path = level_config(tmp_path)
    fig = read_results(str(level_results(tmp_path, cfg_path, missed_wait=0.05)))
    cals = mode_calibrations(fig, ["sync", "async"])
    assert cals["async"].retention_request_s > 0
    assert cals["sync"].retention_request_s == cals["async"].retention_request_s
    assert any("measured in the other mode" in n for n in cals["sync"].notes)


def test_a_results_file_that_is_not_one_is_one_line(tmp_path, capsys):
    from emulator.cli import main
    bad = tmp_path / "results.json"
    bad.write_text("{}")
    assert main(["simulate", str(level_config(tmp_path)), "--calibrate", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not the results.json of a ckpt-emu run" in err[0]
    assert not (tmp_path / "o").exists()
