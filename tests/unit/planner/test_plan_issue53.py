"""Issue 53's reproductions for `ckpt-emu plan` (each fails on the code before its fix): a napkin sized by a
config keeps that config's layout; the interval is training between checkpoints; a retention is
waited for once; a failure restores the newest copy a surviving tier holds, at the cost the other
nodes' copies of that step allow."""
from __future__ import annotations

import json

import pytest
from agreement import plan_and_simulate, planned

from emulator.cli import main
from emulator.config import load_config
from emulator.design import resolve
from emulator.simulation.arrivals import Arrivals, Failure
from emulator.simulation.model import RunSpec, simulate


def _json(capsys, *argv) -> dict:
    assert main([*map(str, argv), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_napkin_sized_by_a_config_keeps_its_layout(capsys):
    """`plan --size CONFIG` spread the config's checkpoint evenly over the accelerators: DLRover's GPT
    (TP8, ZeRO-0) on 128 nodes has one replica a node, every node holding and restoring the whole
    18.9 GB state (2.4 TB from the store), and its first node writing all of it."""
    sizes = _json(capsys, "sizes", "validation/dlrover-gpt-1.5b", "--set", "design.job.nodes=128")
    plan = _json(capsys, "plan", "--accelerators", 1024, "--size", "validation/dlrover-gpt-1.5b",
                 "--bandwidth", "100GB/s")
    assert plan["job"]["checkpoint_bytes"] == sizes["total_bytes"]
    assert plan["job"]["heaviest_node_bytes"] == max(sizes["per_node_bytes"])
    assert plan["classes"]["group"]["restore_s"] == pytest.approx(sizes["held_bytes"] / 100e9, rel=1e-6)


# --------------------------------------------------------------------------- one meaning for an interval

def test_the_interval_is_training_between_checkpoints_in_the_planner_too():
    """The default design's synchronous checkpoint stalls 76 s; every 80 s of training, simulate (and a
    run) train 80 s in every 156 (51 %), where the planner took 80 s start to start (5 %)."""
    d = resolve(load_config("default", ["training.step_seconds=10"]))
    plan, sim = plan_and_simulate(d, "sync", d.base_interval_s, days=30)
    assert sim.goodput == pytest.approx(80 / 156, abs=0.01)
    assert plan.goodput == pytest.approx(sim.goodput, abs=0.003)


def test_an_async_retention_is_waited_for_once():
    """Async, 40 s of training with a 76 s copy to global storage behind each checkpoint: every checkpoint
    waits for the previous one's copies and then its retention, once (the planner added the backlog of
    the next copies to the retention's wait as well)."""
    d = resolve(load_config("default", ["training.step_seconds=5", "checkpoint.modes=[async]"]),
                mttf_hours=50)
    plan, sim = plan_and_simulate(d, "async", d.base_interval_s, days=60)
    assert sim.deadline_misses > 0
    assert plan.goodput == pytest.approx(sim.goodput, abs=0.003)


# --------------------------------------------------------------------------- the copy a failure restores

#: 70B on 128 nodes: global storage takes every checkpoint, the NVMe every 4th
NVME_EVERY_4 = ("design-llama70-128-nvme-s3", ["tiers.local.interval_steps=120"])


def _nvme_every_4(**kw):
    name, overrides = NVME_EVERY_4
    return resolve(load_config(name, overrides), **kw)


def test_a_crash_restores_the_newest_copy_when_a_nearer_tier_takes_fewer():
    """The NVMe holds every 4th checkpoint, global storage every one: a process crash restores the newest,
    from global storage, as the simulator and the emulator do; the planner restored the NVMe's (4x the
    lost work) at the NVMe's cost."""
    d = _nvme_every_4(mttf_hours=500)
    plan, sim = plan_and_simulate(d, "sync", d.base_interval_s, days=30)
    process = {c.name: c for c in plan.classes}["process"]
    assert process.level == "global"
    assert sim.restores.get("global", 0) > sim.restores.get("local", 0)
    assert process.lost == pytest.approx(sim.classes["process"]["lost_work_s"] / sim.wall_s, rel=0.1)
    assert plan.goodput == pytest.approx(sim.goodput, abs=0.003)


def test_a_node_loss_is_not_restored_faster_than_a_crash_from_the_same_copy():
    """Both restore a step only global storage holds: every node reads it at once. The lost node was
    charged a read of its own (the others reading their NVMe, which does not hold that step): 7.7x faster."""
    d = _nvme_every_4()
    trace = [Failure(3600.0 * 5 + 100, "process"), Failure(3600.0 * 10 + 100, "node")]
    out = simulate(d, RunSpec("sync", d.base_interval_s, horizon_s=3600.0 * 15), Arrivals(d.failures, trace=trace))
    assert out.restores == {"global": 2}
    before = {c: d.failures.of(c).before_restore_s for c in ("process", "node")}
    process, node = (out.classes[c]["recovery_s"] - before[c] for c in ("process", "node"))
    assert node >= process * 0.999
    classes = {c.name: c for c in planned(d, "sync", d.base_interval_s).classes}
    assert classes["node"].recovery_s - before["node"] >= classes["process"].recovery_s - before["process"] - 1e-6


# --------------------------------------------------------------------------- cells a config can say

@pytest.mark.parametrize("name", ["design-llama70-128-nvme-s3", "design-memory-nvme-s3", "design-nvme-s3"])
def test_the_planner_recommends_only_cells_a_config_can_say(name):
    """70B's async optimum was 80.6 s of 20 s steps (4.03 steps): `as config` said 4 steps, a cell the
    planner never evaluated; an optimum under one step said 0 steps, which the validator refuses. Every
    cell recommended is a whole number of steps, and the config that says it gives the same cell."""
    from emulator import planner
    cfg = load_config(name)
    d = resolve(cfg)
    step = cfg.training.step_seconds
    for mode, s in planner.plan(d).modes.items():
        for cell in (s.best, s.kept):
            if cell is None:
                continue
            steps = round(cell.base_interval_s / step)
            assert steps >= 1 and cell.base_interval_s == pytest.approx(steps * step, rel=1e-12), (mode, cell.every)
            said = load_config(name, [f"checkpoint.interval_steps={steps}"] +
                               [f"tiers.{n}.interval_steps={steps * e}" for n, e in cell.every.items()])
            again = resolve(said)
            assert again.base_interval_s == pytest.approx(cell.base_interval_s)
            assert {t.name: t.every for t in again.ladder} == cell.every


# --------------------------------------------------------------------------- capacity, the same everywhere

SMALL_NVME = ("design-llama70-128-nvme-s3", "--set", "design.node.local.capacity=10GB")


def test_a_local_tier_too_small_for_its_checkpoints_is_skipped_by_plan_as_by_simulate(capsys, tmp_path):
    """A 10 GB NVMe cannot hold the 3 x 7.6 GB it keeps: every checkpoint skips it (on_local_full: global).
    simulate left it out, plan kept it (a crash restored from it in 2.0 s, not from global storage)."""
    plan = _json(capsys, "plan", *SMALL_NVME)
    sim = _json(capsys, "simulate", *SMALL_NVME, "--days", "1", "--out", tmp_path / "sim")
    assert list(plan["tiers"]) == ["global"] == list(sim["design"]["tiers"]["all"])
    assert plan["classes"]["process"]["tier"] == "global"
    assert plan["classes"]["process"]["restore_s"] == pytest.approx(sim["design"]["classes"]["all"]["process"]["restore_s"])
    assert any("cannot hold" in n for n in plan["notes"])


@pytest.mark.parametrize("command", ["plan", "simulate"])
def test_a_local_tier_too_small_with_skip_is_refused_by_both(command, capsys, tmp_path):
    extra = ["--out", str(tmp_path / "sim")] if command == "simulate" else []
    rc = main([command, *SMALL_NVME, "--set", "checkpoint.on_local_full=skip", *extra])
    out, err = capsys.readouterr()
    assert rc == 2 and not out and err.count("\n") == 1 and "no checkpoint would ever be taken" in err


# --------------------------------------------------------------------------- an object store's request ceilings

#: 70B on 128 nodes draining to S3 in 8 MiB parts: 1,024 files of 0.96 GB, 118,785 requests to one prefix
S3_8MIB = ("design-llama70-128-nvme-s3", "--set", "tiers.global.backend=s3", "--set", "tiers.global.bucket=b",
           "--set", "tiers.global.part_size_mib=8")


def test_plan_and_simulate_hold_a_drain_to_the_stores_request_ceiling(capsys, tmp_path):
    """The drain's 118,785 PUT-class requests (1,024 x (114 parts + 2), the manifest) at 3,500 a second on
    the step's prefix take at least 34 s, as the emulator's limiter enforces (tiers/s3_limits.py); plan and
    simulate said 11 s (the bytes)."""
    floor = 118_785 / 3500
    plan = _json(capsys, "plan", *S3_8MIB)
    assert plan["costs"]["copy_s"]["global"] == pytest.approx(floor, rel=1e-6)
    sim = _json(capsys, "simulate", *S3_8MIB, "--days", "1", "--interval", "1h", "--out", tmp_path / "sim")
    for mode in ("sync", "async"):
        assert sim["modes"][mode]["drain_mean_s"] == pytest.approx(floor, rel=1e-6)
    lifted = _json(capsys, "plan", *S3_8MIB, "--set", "tiers.global.emulate={put_per_s_per_prefix: null, "
                   "get_per_s_per_prefix: null}")
    assert lifted["costs"]["copy_s"]["global"] < floor / 2


def test_sizes_counts_the_jobs_requests_not_one_nodes(capsys):
    """`sizes` counted the run's 8 ranks' uploads (one node's) against the store's ceiling."""
    out = _json(capsys, "sizes", *S3_8MIB)
    layout = out["key_layout"]
    assert layout["files"] == 1024 and layout["put_requests"] == 1024 * 116 + 1
    assert layout["min_put_s"] == pytest.approx(layout["put_requests"] / 3500)


# --------------------------------------------------------------------------- state a node's own tiers do not hold

def test_a_replica_restores_what_its_nvme_does_not_hold_from_global_storage(capsys):
    """ZeRO-1, one replica writing: 127 of 70B's 128 nodes write their optimizer shards only, yet hold the
    weights too. A crash restores each node's own files from its NVMe and the weights the first replica
    wrote from global storage (as the emulator's ranks read their leader's files there): 127 x 130 GiB at
    100 GB/s, 178 s; the model read all of it from the NVMe (24 s)."""
    from emulator.design import costs
    d = resolve(load_config("design-llama70-128-nvme-s3", ["parallelism.zero_stage=1"]))
    away = [(g.nodes, g.held_bytes - g.node_bytes) for g in d.job.groups if g.held_bytes > g.node_bytes]
    assert [n for n, _ in away] == [127]
    storm = 127 * away[0][1] / 100e9
    assert costs.restore_seconds(d, "local") == pytest.approx(storm, rel=0.01)
    plan = _json(capsys, "plan", "design-llama70-128-nvme-s3", "--set", "parallelism.zero_stage=1")
    assert plan["classes"]["process"]["restore_s"] == pytest.approx(storm, rel=0.01)


def test_a_node_loss_restores_global_storages_newer_copy_over_the_peers():
    """Host memory + peer + PFS, the PFS taking every checkpoint and the peer every 5th: a node loss
    restores the PFS's copy, the newest that survives it, as the simulator does; the planner restored
    the peer's (5x the lost work), and so recommended half the interval the simulated sweep found best
    (the agreement sweep's design-memory-peer-pfs case)."""
    d = resolve(load_config("design-memory-peer-pfs", ["tiers.global.interval_steps=10"]), mttf_hours=5000)
    assert {t.name: t.every for t in d.ladder} == {"memory": 1, "peer": 5, "global": 1}
    plan, sim = plan_and_simulate(d, "async", 30.0, days=10)
    node = {c.name: c for c in plan.classes}["node"]
    assert node.level == "global"
    assert sim.restores.get("global", 0) > sim.restores.get("peer", 0)
    assert node.lost == pytest.approx(sim.classes["node"]["lost_work_s"] / sim.wall_s, rel=0.1)
    assert plan.goodput == pytest.approx(sim.goodput, abs=0.003)
