"""`ckpt-emu plan CONFIG`: the planner on a config's design (emulator/design): the job the flags name,
every tier's stall, lag and bandwidth, each failure class's own recovery, a calibration, S3's cost.
In-process, no emulation: every input is a config or a hand-written results.json."""
from __future__ import annotations

import json

import pytest
import yaml

from emulator import planner
from emulator.cli import main
from emulator.config import load_config
from emulator.design import resolve
from emulator.design.costs import (
    checkpoint_costs,
    copy_seconds,
    lag_seconds,
    recovery_seconds,
)
from emulator.planner.inputs import DesignLevels
from emulator.planner.model import FailureRate, Level, LevelInputs, breakdown
from emulator.simulation.calibrate import read_calibration
from level_results import LLAMA70B, level_config, level_results  # noqa: F401 - LLAMA70B: tests/system/ too
from level_results import described_levels as _levels

GB = 1e9


def _write(tmp_path, data: dict, name: str = "design.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _planned_once(monkeypatch) -> None:
    """``planner.plan`` searches each design once in this test: the text and the ``--json`` of one plan
    (a 4-tier design's search is 5 s of the quick tier)."""
    real, done = planner.plan, {}

    def once(design, **options):
        key = repr((design, sorted(options.items())))
        if key not in done:
            done[key] = real(design, **options)
        return done[key]
    monkeypatch.setattr(planner, "plan", once)


def _plan_json(capsys, *argv) -> dict:
    rc = main(["plan", *map(str, argv), "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out)


# --------------------------------------------------------------------------- the design as levels

def test_each_tier_stalls_and_lags_by_the_designs_closed_forms(tmp_path):
    """Sync: the nearest tier stalls for the snapshot and its write, each other tier for its own copy; async:
    only the snapshot stalls and each tier is durable its lag later (copies one after another)."""
    d = resolve(load_config(_levels(tmp_path)))
    c = checkpoint_costs(d)
    sync = {lv.name: lv for lv in DesignLevels(d, "sync").levels()}
    assert sync["memory"].stall_s == pytest.approx(c.snapshot_s + c.copy_s["memory"])
    assert sync["global"].stall_s == pytest.approx(c.copy_s["global"] + d.link("global").latency_s)
    assert sum(lv.stall_s for lv in sync.values()) == pytest.approx(c.sync_stall_s)
    asyn = {lv.name: lv for lv in DesignLevels(d, "async").levels({"local": 4, "global": 8})}
    assert asyn["memory"].stall_s == pytest.approx(c.snapshot_s) and asyn["peer"].stall_s == 0
    assert asyn["global"].lag_s == pytest.approx(lag_seconds(d, "global", {"memory": 1, "peer": 1, "local": 4,
                                                                            "global": 8}))
    # global every 8th after the NVMe every 4th: both copies are in its lag; every 6th, only the peer's
    assert asyn["global"].lag_s == pytest.approx(c.lag_s["global"])
    odd = {lv.name: lv for lv in DesignLevels(d, "async").levels({"local": 4, "global": 6})}
    assert odd["global"].lag_s == pytest.approx(c.lag_s["global"] - c.copy_s["local"])


def test_each_class_recovers_at_its_own_cost(tmp_path):
    """Reproduction 8 in the planner: detection and restart or replacement differ by class (design.failures),
    and each class restores from the nearest tier that survives it."""
    cfg = load_config(_levels(tmp_path))
    cfg = cfg.with_overrides("design.failures={process: {detect: 10s, restart: 20s}, node: {detect: 1m, restart: 5m}}")
    d = resolve(cfg)
    classes = {c.name: c for c in DesignLevels(d, "async").classes}
    assert {k: c.nearest for k, c in classes.items()} == {"process": "memory", "node": "peer", "group": "global"}
    for k, c in classes.items():
        assert c.recovery_s == pytest.approx(recovery_seconds(d, k)) and c.rate_per_s == d.failures.rate(k)
    assert classes["process"].recovery_s < 40 < classes["node"].recovery_s < classes["group"].recovery_s


def test_a_classs_own_recovery_replaces_restart_plus_restore_in_the_model():
    """(The simulator's recovery per class is its closed form: tests/unit/simulation/test_simulate_design.py.)"""
    inp = LevelInputs(100.0, (Level("memory", 1, 1.0, 0.0, 5.0), Level("global", 4, 2.0, 10.0, 50.0)),
                      (FailureRate("process", 1e-4, "memory", recovery_s=30.0), FailureRate("group", 1e-5, "global")),
                      restart_s=600.0)
    b = breakdown(inp)
    process, group = b.classes
    assert (process.recovery_s, group.recovery_s) == (30.0, 650.0)  # its own; restart + the level's restore
    assert process.recovery == pytest.approx(1e-4 * 30.0, rel=0.01)  # lambda R of wall time, to first order
    assert group.recovery == pytest.approx(1e-5 * 650.0, rel=0.05)  # less the recoveries another failure cut


# --------------------------------------------------------------------------- plan CONFIG

def test_plan_config_prints_every_tier_class_and_mode(tmp_path, capsys, monkeypatch):
    _planned_once(monkeypatch)
    cfg = _levels(tmp_path)
    assert main(["plan", cfg, "--mttf-hours", "20000"]) == 0
    out = capsys.readouterr().out
    for text in ("2 nodes x 8 accelerators (16)", "memory", "peer", "local", "global", "process", "node", "group",
                 "restores from", "sync stall C", "Best intervals", "<- recommended", "Tiers at the recommended",
                 "as config: checkpoint.interval_steps:"):
        assert text in out, text
    d = _plan_json(capsys, cfg, "--mttf-hours", "20000")
    assert list(d["tiers"]) == ["memory", "peer", "local", "global"] and set(d["modes"]) == {"sync", "async"}
    rec = d["recommended"]
    assert rec["every"]["memory"] == 1 and rec["goodput"] >= d["modes"][rec["mode"]]["configured"]["goodput"]
    g = d["tiers"]["global"]
    assert g["scope"] == "job" and g["interval_s"] == pytest.approx(rec["every"]["global"] * rec["base_interval_s"])
    assert g["needed_bytes_per_s"] == pytest.approx(g["bytes"] / (0.10 * g["interval_s"]))
    assert g["headroom"] == pytest.approx(0.10 * g["interval_s"] / g["copy_s"])
    assert d["tiers"]["peer"]["bytes"] == d["job"]["heaviest_node_bytes"]  # one replica's


def test_the_planner_answers_what_the_command_prints(tmp_path, capsys):
    path = _write(tmp_path, LLAMA70B)
    d = _plan_json(capsys, path)
    p = planner.plan(resolve(load_config(path)))
    assert d["recommended"]["mode"] == p.recommended
    assert d["recommended"]["base_interval_s"] == pytest.approx(p.best.base_interval_s)
    assert d["recommended"]["every"] == p.best.every


def test_flags_override_the_designs_figures(tmp_path, capsys):
    """--bandwidth is the store's aggregate (400Gb/s: 50 GB/s), --nic each node's link, in the one grammar."""
    path = _write(tmp_path, LLAMA70B)
    d = _plan_json(capsys, path, "--bandwidth", "400Gb/s", "--nic", "100Gb/s", "--mttf-hours", 25000,
                   "--restart-seconds", "2m", "--interval", "5m")
    want = resolve(load_config(path), global_write_bps=50e9, nic_bps=12.5e9, mttf_hours=25000, restart_s=120.0)
    assert d["costs"]["copy_s"]["global"] == pytest.approx(copy_seconds(want, "global"))
    assert d["reference"]["mttf_hours"] == 25000
    assert all(c["restart_s"] == 120.0 for c in d["classes"].values())
    assert d["modes"]["sync"]["configured"]["base_interval_s"] == 300.0


def test_plan_calibrate_plans_the_design_the_run_measured(tmp_path, capsys):
    """``plan CONFIG --calibrate RESULTS_JSON``: the design with the run's calibration
    (emulator/simulation/calibrate.py; its own checks: tests/unit/simulation/test_simulate_calibrate.py), whose
    global copy at the 8 GB/s per node the run reached is slower than the design's 10, and whose
    measured recoveries stand for their classes."""
    cfg = level_config(tmp_path)
    results = level_results(tmp_path, cfg)
    plain = _plan_json(capsys, cfg, "--mttf-hours", 20000)
    d = _plan_json(capsys, cfg, "--mttf-hours", 20000, "--calibrate", results)
    want = resolve(load_config(str(cfg)), calibration=read_calibration(str(results)), mttf_hours=20000)
    assert d["costs"]["copy_s"]["global"] == pytest.approx(copy_seconds(want, "global"))
    assert d["costs"]["copy_s"]["global"] > plain["costs"]["copy_s"]["global"]
    assert d["sources"]["global_write"] == "measured"
    assert (d["classes"]["process"]["restore_s"], d["classes"]["group"]["restore_s"]) == pytest.approx((2.0, 30.0))
    assert any("calibrated by" in n for n in d["notes"])


def test_the_s3_cost_of_the_recommended_global_interval(tmp_path, capsys):
    from emulator.simulation import s3cost
    d = _plan_json(capsys, "design-nvme-s3", "--accelerators", 64)
    cfg = load_config("design-nvme-s3")
    design = resolve(cfg, nodes=8, accelerators_per_node=8)
    ckpt, _ = s3cost.job_requests([(g.nodes, g.files, g.file_bytes) for g in design.job.groups], 16 << 20,
                                  verify="checksum", keep=cfg.checkpoint.keep)
    cost = d["s3_cost"]
    assert cost["per_checkpoint_usd"] == pytest.approx(s3cost.requests_usd(ckpt, cfg.cost))
    # the checkpoints a day the S3 cost counts are the global volume's (while the job runs), one figure
    per_day = d["global_volume"]["checkpoints_per_day"]
    assert cost["interval_s"] == pytest.approx(86400 / per_day)
    main(["plan", "design-nvme-s3", "--accelerators", "64"])
    out = capsys.readouterr().out
    assert "S3 cost at the recommended interval: $" in out
    assert f"({per_day:,.1f} checkpoints," in out and f"({round(per_day)} checkpoints:" in out


@pytest.mark.parametrize("argv, message", [
    (["--size", "1TB"], "--size: the config's model sizes its checkpoint"),
    (["--accelerators", "1020"], "--accelerators: 1,020 is not a whole number of 8-accelerator nodes"),
    (["--accelerators", "1024", "--nodes", "3"], "--nodes: 1,024 accelerators do not split evenly over 3 nodes"),
    (["--accelerators", "12", "--nodes", "3"], "3 nodes x 4 accelerators = 12 ranks is not a multiple of tp x pp = 8"),
    (["--bandwidth", "100"], "--bandwidth: '100'"),
    (["--nic", "25 furlongs/s"], "--nic:"),
    (["--set", "design.global.write=1e11"], "design.global.write: "),
    (["--calibrate", "/nonexistent/results.json"], "--calibrate /nonexistent/results.json: cannot read"),
    (["--group-loss-fraction", "1.5"], "--group-loss-fraction: must be <= 1"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, argv, message):
    path = _write(tmp_path, LLAMA70B)
    rc = main(["plan", path, *argv, "--plot", str(tmp_path / "p.png")])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "p.png").exists()


def test_a_tier_without_a_rate_is_refused(capsys):
    """llama3-70b-subset describes no rate for its tiers: there is nothing to plan with but a calibration."""
    assert main(["plan", "llama3-70b-subset", "--accelerators", "1024"]) == 2
    err = capsys.readouterr().err
    assert "the local and global tiers have no rate" in err and "--calibrate" in err


def test_a_measured_interference_charges_each_async_copy_and_thins_the_far_tiers(tmp_path):
    """Async copies are not free once a run measured what they cost training: each tier's copy is charged
    the interference share of its time. Uncharged, the planner sends every checkpoint to global storage
    (the NVMe, which recovers no class here, only lengthens the pipeline); charged, it thins the global
    copy too (a group loss a day or so) and checkpoints less often."""
    from emulator.design import Calibration
    cfg = load_config(_levels(tmp_path, checkpoint={"interval_steps": 5, "modes": ["async"]}))
    free = planner.plan(resolve(cfg, mttf_hours=20000))
    charged = planner.plan(resolve(cfg, mttf_hours=20000, calibration=Calibration(interference_share=0.5)))
    lv = {x.name: x for x in DesignLevels(charged.design, "async").levels()}
    c = charged.costs
    assert lv["memory"].stall_s == pytest.approx(c.snapshot_s + 0.5 * c.copy_s["memory"])
    assert lv["local"].stall_s == pytest.approx(0.5 * c.copy_s["local"])
    assert free.best.every["global"] <= 2
    assert charged.best.every["local"] >= free.best.every["local"]
    assert charged.best.every["global"] > free.best.every["global"]
    assert charged.best.base_interval_s > free.best.base_interval_s
