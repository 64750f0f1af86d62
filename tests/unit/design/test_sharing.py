"""Who shares a configured rate (``shared_by``), in real runs.

A rate in a tier's ``emulate`` is what an architect reads it as: by default the node's device or
link (``node``), shared by the node's ranks, never multiplied by them. ``shared_by: job`` is the
modelled job's aggregate: each emulated node gets its share, rate / the job's nodes, however many
of those nodes this run emulates and on however many machines (``--nnodes``).
Every bound below is the model's time (bytes / rate) with a generous margin, never a fixed time.
"""
from __future__ import annotations


import pytest
from emu import small_config

from emulator.config import load_config
from emulator.design import resolve, run_emulation
from emulator.design.job import job_of
from tiers.emulated import EmulateOptions

GIB = 1 << 30


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
