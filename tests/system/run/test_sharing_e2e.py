"""Who shares a configured rate (shared_by), in real runs. Every bound is a lower bound the pacing
guarantees (bytes / rate), never a fixed time.
"""
from __future__ import annotations

import json

import pytest
from emu import ckpt_emu, results, run_two_agents, small_config

from emulator.config import load_config
from emulator.design.job import job_of

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
    assert seen <= 1.15 * rate, (seen, rate)  # paced as one device: per stream it would be about 2 x rate
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
        assert seconds >= 0.9 * want, (key, seconds, want)  # R / 4: the whole R would take a quarter
    assert not [n for n in res["notes"] if n.startswith("global tier: this host moved")], res["notes"]
    # simulated as run, calibrated by it: the same drain
    sim = json.loads(ckpt_emu("simulate", cfg, "--as-run", "--nodes", 1, "--accelerators-per-node", 2, "--calibrate",
                              tmp_path / "out" / "results.json", "--json", "--out", tmp_path / "sim", check=True).stdout)
    assert sim["modes"]["sync"]["drain_mean_s"] == pytest.approx(res["modes"]["sync"]["drain_mean_s"], rel=0.15)
    # simulated as run from the config alone: the node gets the share the run gave it, not the whole R
    sim = json.loads(ckpt_emu("simulate", cfg, "--as-run", "--nodes", 1, "--accelerators-per-node", 2,
                              "--set", "tiers.local.emulate.write_gib_s=100",  # simulate needs a local rate
                              "--set", f"run.dilation={res['dilation']['factor']}",  # as it ran
                              "--json", "--out", tmp_path / "sim2", check=True).stdout)
    # the node's bytes at R / 4, as run: at the run's dilation (above 1 where a loaded host's probe asked for it)
    model = sum(sizes.values()) / len(sizes) / (rate / job_nodes * GIB) * res["dilation"]["factor"]
    assert sim["modes"]["sync"]["drain_mean_s"] == pytest.approx(model, rel=0.1), (sim["modes"]["sync"], model)


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
        assert seconds >= 0.9 * want, (key, seconds, want)  # R / 4: the whole R would take a quarter
    for step in {s for _, s in drains}:
        together = (sizes[(0, step)] + sizes[(1, step)]) / max(drains[(0, step)], drains[(1, step)]) / GIB
        assert together <= 0.6 * rate, (step, together)  # 2 x rate when each machine took it all
