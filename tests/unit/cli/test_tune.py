"""`ckpt-emu tune` end to end on a small config: measure, plan, confirm by emulation."""

import json
from pathlib import Path

import pytest
from emu import small_config


def test_tune_rejects_bad_target(tmp_path, capsys):
    from emulator.cli import main
    assert main(["tune", str(small_config(tmp_path)), "--accelerators", "0"]) == 2
    assert "--accelerators: must be >= 1" in capsys.readouterr().err


# --------------------------------------------------------------------------- the job's bytes (no torchrun)

from tune_fakes import L405_SUBSET, paced  # noqa: E402,F401 - shared with tests/system/
from tune_fakes import faked_paced_tune as _faked_tune  # noqa: E402

GIB = 1 << 30


def _config(tmp_path, data: dict):
    import yaml

    from emulator.config import load_config
    path = tmp_path / "tune.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(str(path), [f"run.out={tmp_path / 'out'}"])


@pytest.fixture
def tune_405b_subset(tmp_path, monkeypatch):
    """(tune module, config, the configs its runs were of), every emulation run faked."""
    tune_mod, runs = _faked_tune(monkeypatch)
    return tune_mod, _config(tmp_path, L405_SUBSET), runs


def test_tune_plans_the_jobs_checkpoint_not_nodes_times_one_node(tune_405b_subset):
    """`tune llama3-405b-subset --accelerators 16384 --nodes 2048`: the 8 measured ranks are one node of
    that job (DP stretched to 16,384 ranks); the plan is for the job's checkpoint spread over its 2,048
    nodes, not every node the measured one's bytes (2,048 x 98.5 = 201,819 GiB)."""
    from emulator.design import resolve
    tune_mod, cfg, runs = tune_405b_subset
    # by hand: MLPerf's 5,292 GiB for 405B on 512 ranks (tests/unit/kernel/test_sizing.py); DP stretched to 16,384 ranks
    # adds each extra rank's 5H fp32 optimizer pad (3 states x 4 bytes): 60 x 16,384 x 15,872 bytes = 14.5 GiB
    by_hand = 5292.0 * GIB + 60 * 16384 * (16384 - 512)
    r = tune_mod.tune(cfg, accelerators=16384, nodes=2048)
    assert r["checkpoint_bytes"] == pytest.approx(by_hand, rel=0.002) and r["nodes"] == 2048
    job = resolve(runs[0]).job
    assert all(c.parallelism.dp == 64 and c.design.nodes == 2048 for c in runs)
    assert r["checkpoint_bytes"] == job.checkpoint_bytes
    assert r["measured"]["full_size_bytes"] == pytest.approx(job.emulated[0].node_bytes, rel=1e-6)
    assert r["measured"]["full_size_bytes"] / GIB < 98.5 / 3  # a node of the job, not of the 512-rank preset
    # the global bandwidth needed is the job's checkpoint drained in 10 % of the recommended global interval
    bw, rec = r["global_bandwidth"], r["recommended"]
    assert bw["needed_bytes_per_s"] == pytest.approx(r["checkpoint_bytes"] / (0.10 * rec["tier_interval_s"]["global"]))


def test_without_nodes_the_job_is_accelerators_over_the_nodes_accelerators(tune_405b_subset, tmp_path, monkeypatch):
    """Without --nodes, 16,384 accelerators are 2,048 nodes of 8. The global tier's rate is the job's
    aggregate (shared_by: job), and the measured node was paced at its share of it: every node drains
    alongside it. A real store seen from one node (a plain folder) is credited with that node's rate."""
    tune_mod, cfg, _ = tune_405b_subset
    r = tune_mod.tune(cfg, accelerators=16384)
    assert r["nodes"] == 2048 and r["recommended"]["source"] == "planner"
    bw = r["global_bandwidth"]
    assert bw["measured_as"] == "every node" and bw["measured_drain_bytes_per_s"] > 100 * GIB
    assert "5,306.8 GiB" in tune_mod.format_tune(r)
    real = _config(tmp_path, {**L405_SUBSET, "tiers": {**L405_SUBSET["tiers"], "global": {
        "backend": "dir", "path": "/nonexistent/pfs"}}})
    one, _ = _faked_tune(monkeypatch)
    rb = one.tune(real, accelerators=16384)["global_bandwidth"]
    assert rb["measured_as"] == "one node"
    assert rb["measured_drain_bytes_per_s"] < 3 * GIB  # the one node's made-up 3 GiB/s, for the whole job


def test_tune_reads_the_design_plan_reads(tmp_path, monkeypatch):
    """A design described once: tune plans the job on the design's aggregate behind each node's NIC (the
    share `run` paces its node at), over the bytes `plan` sizes."""
    from emulator.design import resolve, run_emulation
    from emulator.design.costs import copy_seconds
    from emulator.design.links import LinkLimits
    cfg = _config(tmp_path, {
        "extends": "llama3-405b-subset", "run": {"scale": 0.001}, "training": {"step_seconds": 62.5},
        "checkpoint": {"interval_steps": 8, "saves": 3}, "drain": {"verify": "size"},
        "tiers": {"local": {"backend": "dir", "path": str(tmp_path / "nvme")},
                  "global": {"backend": "dir", "path": str(tmp_path / "pfs")}},
        "design": {"job": {"nodes": 2048}, "node": {"local": {"write": "7GB/s", "read": "60GB/s"}, "nic": "400Gb/s"},
                   "global": {"write": "400GB/s"}}})
    tune_mod, runs = _faked_tune(monkeypatch)
    r = tune_mod.tune(cfg, accelerators=16384, nodes=2048)
    design = resolve(runs[0])
    assert design.link("global").drain == LinkLimits(400e9, 50e9)
    assert r["checkpoint_bytes"] == resolve(cfg).job.checkpoint_bytes
    # the run's node (node 0, the job's heaviest: it holds DP rank 0's shards) is paced at its max-min fair
    # share with all 2,048 nodes draining at once: it finishes when the plan's drain does
    assert design.job.emulated[0].node_bytes == design.job.heaviest.node_bytes
    rate = run_emulation(runs[0], "global").write_gib_s * GIB
    assert design.job.emulated[0].node_bytes / rate == pytest.approx(copy_seconds(design, "global"))
    assert r["measured"]["drain_s"] == pytest.approx(copy_seconds(design, "global"))


# --------------------------------------------------------------------------- costs at full size (no torchrun)

SLOW_REQUESTS = {  # 8 ranks of one 405B node at a small scale; a global tier with 20 ms per request
    **L405_SUBSET, "run": {"scale": 0.0005},
    "tiers": {"local": L405_SUBSET["tiers"]["local"],
              "global": {"backend": "dir", "path": "/nonexistent/pfs",
                         "emulate": {"write_gib_s": 2.0, "read_gib_s": 4.0, "latency_ms": 20, "shared_by": "node"}}}}


def _node_share(runs) -> float:
    """The job's heaviest node's bytes over the run's node's: what a rate measured on one is worth on the other."""
    from emulator.design import resolve
    job = resolve(runs[0]).job
    return job.heaviest.node_bytes / job.emulated[0].node_bytes


def test_tune_does_not_divide_fixed_costs_by_the_scale(tmp_path, monkeypatch):
    """A drain's requests (20 ms each, 2 per file, 2 waves of 4 files) are paced at the time factor: at full
    size the drain is its bytes' time / scale plus the requests at their latency, not the requests' time
    counted as bytes."""
    from tune_fakes import fake_results
    cfg = _config(tmp_path, {**SLOW_REQUESTS, "drain": {"verify": "size"}})  # no read-back after the copy
    tune_mod, runs = _faked_tune(monkeypatch)
    r = tune_mod.tune(cfg, accelerators=16384)
    m, scale = r["measured"], cfg.run.scale
    rec = fake_results(runs[0], **paced(runs[0]))["per_rank"][0]["records"][0]
    requests = 2 * 2 * 0.020  # at full size; the run paced each at the time factor, as its bytes
    drain = (rec["drain_s"] - requests * runs[0].time_factor) / scale * _node_share(runs) + requests
    assert m["drain_s"] == pytest.approx(drain, rel=0.02), (m["drain_s"], drain, rec["drain_s"] / scale)


def test_tune_counts_the_snapshot_once_in_the_async_commit(tmp_path, monkeypatch):
    """The async commit runs from the end of the stall (the snapshot) until durable: the planner adds the
    stall to it, so the commit must not hold the snapshot again (the durability lag does: it starts at
    the snapshot)."""
    cfg = _config(tmp_path, SLOW_REQUESTS)
    tune_mod, _runs = _faked_tune(monkeypatch, snapshot_bps=0.5 * GIB)
    m = tune_mod.tune(cfg, accelerators=16384)["measured"]
    assert m["async_stall_s"] == pytest.approx(m["snapshot_s"]) and m["snapshot_s"] > 1
    background = m["local_write_s"] + m["drain_s"]
    assert m["commit_s"] == pytest.approx(background + 0.020, rel=0.02), (m["commit_s"], background)
    assert m["sync_stall_s"] == pytest.approx(m["snapshot_s"] + m["commit_s"], rel=1e-6)


def test_tune_plans_with_interference_and_a_measured_restore(tmp_path, monkeypatch):
    """The async mode's steps slowed beyond its stalls (interference) cost training time per checkpoint,
    and a failure restoring from the NVMe costs what the measuring run's load from it took (here 50 ms for
    its node's bytes at scale 0.0005), on top of the restart; the plan uses both."""
    cfg = _config(tmp_path, SLOW_REQUESTS)
    tune_mod, runs = _faked_tune(monkeypatch, interference=0.02, restores={"local": 0.05})
    r = tune_mod.tune(cfg, accelerators=16384)
    m, scale = r["measured"], cfg.run.scale
    assert m["restore_s"]["process"] == pytest.approx(0.05 / scale * _node_share(runs), rel=0.02)
    assert r["planned"]["classes"]["process"]["recovery_s"] == pytest.approx(30 + 150 + m["restore_s"]["process"])
    # 2 % of the async mode's 8 steps per checkpoint, as a share of the background work it came with, applied
    # to that work at full size (the async commit)
    assert m["interference_s"] > 0
    free_mod, _ = _faked_tune(monkeypatch, interference=0.0, restores={"local": 0.05})
    free = free_mod.tune(cfg, accelerators=16384)
    assert free["measured"]["interference_s"] == 0
    assert r["plan_goodput"]["async"] < free["plan_goodput"]["async"]
    assert r["plan_goodput"]["sync"] == pytest.approx(free["plan_goodput"]["sync"])


def test_a_compressed_confirmation_never_runs_checkpoints_closer_than_the_pipeline_commits_them(
        tmp_path, monkeypatch):
    """The confirmation shortens the recommended interval to fit its wall-time budget, but never below
    the async commit (stall end to durable): closer checkpoints wait for the previous one, a regime the
    recommendation never runs in (the embedded default on 8 nodes: 62.5 s against a 78.5 s commit,
    predicted overhead 1.6 %, measured 16.8 %, two deadline misses)."""
    cfg = _config(tmp_path, {**SLOW_REQUESTS, "training": {"step_seconds": 5.0}})
    tune_mod, _runs = _faked_tune(monkeypatch)
    r = tune_mod.tune(cfg, accelerators=16384, confirm_seconds=0.001)
    c, m = r["confirmation"], r["measured"]
    assert m["commit_s"] > cfg.training.step_seconds  # the budget alone would run one step apart
    assert m["commit_s"] < c["interval_s"] <= m["commit_s"] * tune_mod.COMMIT_ROOM + cfg.training.step_seconds
    assert c["compression"] == pytest.approx(c["interval_s"] / r["recommended"]["interval_s"])


def test_a_compressed_confirmation_leaves_room_for_the_commit_as_the_measuring_run_took_it(tmp_path, monkeypatch):
    """At a small scale this host's own software in each async commit (counted once at full size) can
    outlast the design's commit in the run's steps: ``tune --accelerators 64 --set
    checkpoint.engine=dcp`` confirmed at 2 steps (9.75 s each here) a commit of 78.7 s at full size
    that took 13.9 s here, and missed 2 deadlines. The confirmation's steps hold the measured commit."""
    from tune_fakes import faked_paced_tune
    cfg = _config(tmp_path, {**SLOW_REQUESTS, "training": {"step_seconds": 5.0}})
    tune_mod, runs = faked_paced_tune(monkeypatch, host_lag_s=3.0)
    r = tune_mod.tune(cfg, accelerators=16384, confirm_seconds=0.001)
    measured = json.loads((Path(runs[0].run.out) / "results.json").read_text())
    here_step, here_lag = measured["step_seconds"]["here"], measured["modes"]["async"]["lag_max_s"]
    assert here_lag / here_step > r["measured"]["commit_s"] / cfg.training.step_seconds  # the host's is longer
    assert r["confirmation"]["interval_steps"] * here_step >= tune_mod.COMMIT_ROOM * here_lag


def _stopped_in(monkeypatch, tune_mod, stage: str, checkpoints: int):
    """Each run of ``stage`` (measuring, confirming) stopped early (Ctrl-C) after ``checkpoints``."""
    run = tune_mod._run

    def stopped(cfg, out, *, stage: str = "", **kw):
        res = run(cfg, out, stage=stage, **kw)
        if stage_name in stage:
            res["stopped_early"] = True
            for m in res["modes"].values():
                m["checkpoints"] = checkpoints
        return res
    stage_name = stage
    monkeypatch.setattr(tune_mod, "_run", stopped)


def test_a_confirmation_stopped_early_confirms_nothing(tmp_path, monkeypatch):
    """Stopped (Ctrl-C) before its checkpoints, the confirmation measured nothing: it must not read as
    "drains finished before the next checkpoint: yes" with an overhead of 0 %."""
    from emulator.cli.tune import format_tune
    from emulator.results.verdict import tune_misses
    cfg = _config(tmp_path, SLOW_REQUESTS)
    tune_mod, _runs = _faked_tune(monkeypatch)
    _stopped_in(monkeypatch, tune_mod, "confirming", 0)
    r = tune_mod.tune(cfg, accelerators=16384)
    c = r["confirmation"]
    assert c["stopped_early"] and c["drains_beat_next_checkpoint"] is None
    text = format_tune(r)
    assert "yes" not in text.split("drains finished")[-1].splitlines()[0]
    assert "not confirmed: the confirmation run was stopped after 0 of 3 checkpoints" in text
    assert tune_misses(r) == ["tune's confirmation run was stopped after 0 of 3 checkpoints: nothing confirmed"]


def test_a_measurement_stopped_early_plans_nothing(tmp_path, monkeypatch):
    from emulator.errors import EXIT_INTERRUPTED, UserError
    cfg = _config(tmp_path, SLOW_REQUESTS)
    tune_mod, runs = _faked_tune(monkeypatch)
    _stopped_in(monkeypatch, tune_mod, "measuring", 1)
    with pytest.raises(UserError, match="stopped during its measurement run") as exc:
        tune_mod.tune(cfg, accelerators=16384)
    assert exc.value.exit_code == EXIT_INTERRUPTED and len(runs) == 1  # no confirmation run


def test_the_confirmation_runs_at_the_scale_and_dilation_the_measurement_went_at(tmp_path, monkeypatch):
    """run.wall_target: the measuring run may go at a smaller scale than run.scale, at that scale's
    dilation; the confirmation runs at both (not at run.scale with another scale's factor)."""
    import json

    from tune_fakes import fake_results, faked_tune
    measured = {"scale": 0.0002, "dilation": {"factor": 40.0, "auto": True}}
    tune_mod, runs = faked_tune(monkeypatch, paced)
    plain = tune_mod._run

    def fitted_run(cfg, out, **kw):
        res = plain(cfg, out, **kw)
        if len(runs) == 1:  # the measuring run went at a fitted scale
            res = {**fake_results(runs[0], **paced(runs[0])), **measured}
            (out / "results.json").write_text(json.dumps(res))
        return res
    monkeypatch.setattr(tune_mod, "_run", fitted_run)
    cfg = _config(tmp_path, {**L405_SUBSET, "run": {"scale": 0.004, "wall_target": "3m"}})
    tune_mod.tune(cfg, accelerators=16384)
    confirm = runs[1]
    assert confirm.run.scale == 0.0002 and confirm.run.dilation.factor == 40
    # and no second fit: with run.wall_target the run fitted its scale again (0.00078 to 0.00029 for
    # the confirmation of `tune --accelerators 64 --set checkpoint.engine=dcp`, 2.7x the host's share)
    assert confirm.run.wall_target is None
