"""A run's results.json as the design's calibration (emulator/simulation/calibrate.py ``read_calibration``):
each tier's copy and restore rate per node, the snapshot rate, the fixed costs counted once, the
measured recoveries, the run's pacing; and what the design makes of them.

A results.json written by hand in the shape a run with levels writes (memory, a peer, NVMe, global:
one node of 8 ranks at scale 0.01); no emulation runs (tests/unit/simulation/test_simulate.py and test_levels.py
calibrate by real runs).
"""
from __future__ import annotations


import pytest
import yaml

from emulator.config import load_config
from emulator.design import resolve
from emulator.design.costs import class_restore_seconds, copy_seconds
from emulator.simulation.calibrate import mode_calibrations, read_calibration, read_results
from level_results import FILES, NODE, RESIDUAL, RESTORES, SCALE, SNAPSHOT, STAGES, level_config, level_results


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
    # the peer's, predicted: its copy fetched at the rate the run's peer sends reached (40 GB/s) into
    # memory at the rate its writes reached (16 GB/s, the slower), then read from memory
    assert class_restore_seconds(d, "node") == pytest.approx(b / 16e9 + b / 16e9)
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


def test_as_run_steps_are_the_steps_between_checkpoints(tmp_path):
    """--as-run's step time is what the run's steps took between one checkpoint's stall and the next
    checkpoint: the time that sets an async checkpoint's wait for the one before. Steps after the
    last checkpoint (a mode's tail) ran at another pace and do not count."""
    import json

    from emulator.simulation.calibrate import step_seconds
    path = level_results(tmp_path, level_config(tmp_path))
    raw = json.loads(path.read_text())
    for pr in raw["per_rank"]:  # checkpoints at steps 5, 10, 15: 5 steps of 0.07 s after each stall
        for rec in pr["records"]:
            rec["start"] = 100.0 + (rec["step"] // 5 - 1) * (rec["stall_s"] + 5 * 0.07)
    raw["modes"]["async"] = {"training_wall_s": 2.0, "stall_total_s": 0.0, "steps": 40}  # 0.05 s a step
    path.write_text(json.dumps(raw))
    assert step_seconds(read_results(str(path)), "async") == pytest.approx(0.07)
    for pr in raw["per_rank"]:  # a results.json without the records' starts: the mode's mean step
        for rec in pr["records"]:
            del rec["start"]
    path.write_text(json.dumps(raw))
    assert step_seconds(read_results(str(path)), "async") == pytest.approx(0.05)


def test_a_dcp_run_gives_the_design_its_planning_per_item_and_its_staging(tmp_path):
    """A dcp run's measured planning becomes a cost per plan item that the full-size design's planning
    uses (source: measured); its snapshot is its async stall (DCP's own staging), not the paced time."""
    import json

    from emulator import sizing
    cfg_path = level_config(tmp_path, peer=False)
    data = yaml.safe_load(cfg_path.read_text())
    data["checkpoint"]["engine"] = "dcp"
    cfg_path.write_text(yaml.safe_dump(data))
    path = level_results(tmp_path, cfg_path)
    raw = json.loads(path.read_text())
    raw["engine"] = {"name": "dcp", "measured_s": {"sync": {"planning_s": 0.09, "staging_s": 0.0}}}
    for pr in raw["per_rank"]:
        for r in pr["records"]:
            r["paced"] = {"snapshot": SNAPSHOT / 10}  # paced at a tenth of the stall DCP's staging took
    path.write_text(json.dumps(raw))
    cal = read_calibration(str(path), "async")
    cfg = load_config(str(cfg_path))
    par = cfg.parallelism
    c = sizing.rank_coords(0, par.tp, par.pp, par.dp)
    tensors = len(sizing.model_tensors(cfg.model, par, c)) + len(sizing.optimizer_tensors(cfg.model, par, c))
    assert cal.plan_item_s == pytest.approx(0.09 / (tensors * (FILES + 1)))
    assert cal.snapshot_bps == pytest.approx(NODE / FILES / SNAPSHOT)
    d = resolve(cfg, calibration=cal)
    assert d.sources["snapshot_plan_item_s"] == "measured"
    assert d.snapshot.plan_s == pytest.approx(4 * 4 * 1e-3 + cal.plan_item_s * d.snapshot.tensors * 17)
