"""Who shares a configured rate (``shared_by``), in real runs.

A rate in a tier's ``emulate`` is what an architect reads it as: by default the node's device or
link (``node``), shared by the node's ranks, never multiplied by them. ``shared_by: job`` is the
modelled job's aggregate: each emulated node gets its share, rate / the job's nodes, however many
of those nodes this run emulates and on however many machines (``--nnodes``).
Every bound below is the model's time (bytes / rate) with a generous margin, never a fixed time.
"""
from __future__ import annotations

import json

import pytest
from emu import ckpt_emu, results, run_two_agents, small_config

from emulator.config import load_config
from emulator.design import resolve, run_emulation
from emulator.design.job import job_of
from tiers.emulated import EmulateOptions

GIB = 1 << 30
ONE_SYNC_MODE = {"saves": 2, "loads": 0, "modes": ["sync"]}


def _node_bytes(res: dict, mode: str = "sync") -> dict:
    """(node, step) -> the bytes that node's ranks wrote for that checkpoint."""
    out: dict = {}
    for r in res["per_rank"]:
        for rec in r["records"]:
            if rec["mode"] == mode:
                out[(r["node"], rec["step"])] = out.get((r["node"], rec["step"]), 0) + rec["file_bytes"]
    return out


def _drains(res: dict, mode: str = "sync") -> dict:
    """(node, step) -> that node's drain time (the leader's record)."""
    return {(r["node"], rec["step"]): rec["drain_s"] for r in res["per_rank"] for rec in r["records"]
            if rec["mode"] == mode and rec["drain_s"] > 0}


def test_the_default_is_the_nodes_device_not_one_per_rank(tmp_path):
    """Two ranks writing to a local tier of ``write_gib_s: R`` (no shared_by): the node moves R,
    not 2 x R (each rank's stream at R, as the old per-stream default had it)."""
    rate = 0.02
    cfg = small_config(tmp_path, ranks=2, checkpoint=ONE_SYNC_MODE,
                       tiers={"local": {"emulate": {"write_gib_s": rate}}})
    ckpt_emu("run", cfg, "--quiet", check=True, timeout=240)
    res = results(tmp_path / "out")
    node_bytes = max(_node_bytes(res).values())
    seen = node_bytes / res["modes"]["sync"]["local_write_mean_s"] / GIB
    assert 0.6 * rate <= seen <= 1.15 * rate, (seen, rate)  # per stream: about 2 x rate
    assert "shared by node" in res["tiers"]["local"]


def test_a_job_rate_is_split_among_the_modelled_jobs_nodes(tmp_path):
    """One emulated node of a 4-node job drains at R / 4 from a global tier of ``shared_by: job``
    at R (it had the whole R), and the report does not blame the host for it."""
    rate, job_nodes = 0.16, 4
    cfg = small_config(tmp_path, ranks=2, checkpoint=ONE_SYNC_MODE, design={"job": {"nodes": job_nodes}},
                       tiers={"global": {"emulate": {"write_gib_s": rate, "shared_by": "job"}}})
    ckpt_emu("run", cfg, "--quiet", check=True, timeout=240)
    res = results(tmp_path / "out")
    sizes, drains = _node_bytes(res), _drains(res)
    assert len(drains) == 2
    for key, seconds in drains.items():
        want = sizes[key] / (rate / job_nodes * GIB)
        assert 0.9 * want <= seconds <= 1.4 * want, (key, seconds, want)
    assert not [n for n in res["notes"] if n.startswith("global tier: this host moved")], res["notes"]
    # simulated as run, calibrated by it: the same drain
    sim = json.loads(ckpt_emu("simulate", cfg, "--as-run", "--nodes", 1, "--accelerators-per-node", 2, "--calibrate",
                              tmp_path / "out" / "results.json", "--json", "--out", tmp_path / "sim", check=True).stdout)
    assert sim["modes"]["sync"]["drain_mean_s"] == pytest.approx(res["modes"]["sync"]["drain_mean_s"], rel=0.15)
    # simulated as run from the config alone: the node gets the share the run gave it, not the whole R
    sim = json.loads(ckpt_emu("simulate", cfg, "--as-run", "--nodes", 1, "--accelerators-per-node", 2,
                              "--set", "tiers.local.emulate.write_gib_s=100",  # simulate needs a local rate
                              "--json", "--out", tmp_path / "sim2", check=True).stdout)
    assert sim["modes"]["sync"]["drain_mean_s"] == pytest.approx(res["modes"]["sync"]["drain_mean_s"], rel=0.25)


@pytest.mark.timeout(400)
def test_machines_split_the_jobs_rate_they_never_multiply_it(tmp_path):
    """Two machines (two torchrun agents, each with its own results folder) emulating 2 nodes of a
    4-node job (32 ranks, 8 per node): each node drains at R / 4, the two at R / 2 together (each
    machine had the whole R)."""
    rate = 0.16
    cfg = small_config(tmp_path, ranks=4, checkpoint=ONE_SYNC_MODE, parallelism={"ranks": 4, "dp": 32},
                       run={"scale": 0.002}, tiers={"global": {"emulate": {"write_gib_s": rate, "shared_by": "job"}}})
    assert job_of(load_config(str(cfg)), emulated_nodes=2).nodes == 4
    outs = [tmp_path / "out", tmp_path / "out-b"]
    run_two_agents(cfg, outs, "share", timeout=300)
    (res,) = [results(o) for o in outs if (o / "results.json").exists()]
    sizes, drains = _node_bytes(res), _drains(res)
    assert {node for node, _ in drains} == {0, 1}
    for key, seconds in drains.items():
        want = sizes[key] / (rate / 4 * GIB)
        assert 0.9 * want <= seconds <= 1.4 * want, (key, seconds, want)
    for step in {s for _, s in drains}:
        together = (sizes[(0, step)] + sizes[(1, step)]) / max(drains[(0, step)], drains[(1, step)]) / GIB
        assert together <= 0.6 * rate, (step, together)  # 2 x rate when each machine took it all


# ------------------------------------------------------------------ the rule, in process

def _cfg(tmp_path, **sections):
    return load_config(str(small_config(tmp_path, **sections)))


def test_the_default_sharing_is_the_node():
    assert EmulateOptions(write_gib_s=7).shared_by == "node"


def test_modelled_nodes_come_from_the_design_else_the_preset(tmp_path):
    assert job_of(_cfg(tmp_path, parallelism={"dp": 32})).nodes == 4         # 32 ranks, 8 per node
    assert job_of(_cfg(tmp_path, design={"job": {"nodes": 2048}})).nodes == 2048
    assert job_of(_cfg(tmp_path, design={"job": {"nodes": 3, "accelerators_per_node": 4}}), emulated_nodes=2).nodes == 3


@pytest.mark.parametrize("shared_by", ["none", "rank", "node"])
def test_other_sharings_mean_what_they_say(tmp_path, shared_by):
    cfg = _cfg(tmp_path, parallelism={"dp": 32},
               tiers={"global": {"emulate": {"write_gib_s": 1.0, "shared_by": shared_by}}})
    assert run_emulation(cfg, "global", run_nodes=1) == cfg.tiers.global_.emulate


def test_a_job_rate_becomes_each_nodes_share_behind_its_nic(tmp_path):
    cfg = _cfg(tmp_path, parallelism={"dp": 32}, tiers={
        "local": {"emulate": {"write_gib_s": 8.0, "shared_by": "job"}},
        "global": {"emulate": {"write_gib_s": 1.0, "read_gib_s": 2.0, "latency_ms": 3, "shared_by": "job"}}})
    g = run_emulation(cfg, "global", run_nodes=1)
    assert (g.shared_by, g.write_gib_s, g.read_gib_s, g.latency_ms) == ("node", 0.25, 0.5, 3)
    assert run_emulation(cfg, "local", run_nodes=2).write_gib_s == 2.0
    fast = _cfg(tmp_path, design={"job": {"nodes": 2}, "node": {"nic": "8Gb/s"}},
                tiers={"global": {"emulate": {"write_gib_s": 10.0, "shared_by": "job"}}})
    assert run_emulation(fast, "global", run_nodes=1).write_gib_s * GIB == pytest.approx(1e9)  # the NIC binds


def test_run_and_simulate_give_a_node_the_same_share_of_a_job_rate(tmp_path):
    for design in (None, {"job": {"nodes": 2048}, "node": {"nic": "50GB/s"}}):
        cfg = _cfg(tmp_path, parallelism={} if design else {"dp": 32}, design=design, tiers={
            "local": {"emulate": {"write_gib_s": 6.0}},
            "global": {"emulate": {"write_gib_s": 400.0, "shared_by": "job"}}})
        d = resolve(cfg)
        simulated = d.link("global").drain.node_rate(d.job.nodes)
        assert simulated == pytest.approx(run_emulation(cfg, "global").write_gib_s * GIB)
