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


#: ZeRO-1, the first replica writing every replicated byte, 2 nodes restoring at once from a 0.5 GB/s
#: global storage: node 1 holds the weights node 0 wrote, so both read the same bytes (drawn, kept in
#: tests/system/run/test_agreement_drawn_e2e.py)
STORM = {"model": "llama3-70b", "tp": 8, "pp": 1, "zero": 1, "nodes": 2, "shard_group": None,
         "writers": "one_replica", "mode": "sync", "step_s": 1.0, "interval_steps": 1, "keep": 2,
         "verify": "size", "nic": "416.5Gb/s", "ranks": 8,
         "tiers": {"global": {"every": 1, "write": "1.314GB/s", "read": "0.5036GB/s", "latency_ms": 1}},
         "failures": {"mttf_h": 50000, "node": 0.2, "group": 0.02, "restart_s": 150}}


@pytest.mark.parametrize("readers", ["all", "one_per_dp_group"])
def test_a_restore_storm_paces_each_node_by_the_state_it_reads(tmp_path, readers):
    """Every node restoring at once reads the state it holds (a replica's weights included), not the
    files it wrote: the run's node is paced at its share of that storm, the closed form's rate
    (emulator/design/costs.py ``restore_seconds``), while its drains' read-backs keep the share of
    the bytes each node wrote. With one reader per data-parallel group (ZeRO-0: whole replicas), a node
    reads its own files."""
    from drawn_runs import run_config

    from emulator.config.loading import load_mapping
    from emulator.design.costs import restore_seconds
    cfg = run_config({**STORM, "zero": 1 if readers == "all" else 0}, tmp_path, tmp_path / "out")
    cfg["checkpoint"]["restore_readers"] = readers
    design = resolve(load_mapping(cfg), run=True)
    node, mine = design.emulation.node(0), design.job.emulated[0]
    reads = max(mine.held_bytes, mine.node_bytes) if readers == "all" else mine.node_bytes
    rate = node.restoring_global.read_gib_s * GIB
    latency = design.link("global").latency_s
    broadcast = reads / design.links.peer_bps if readers != "all" else 0.0  # the readers' to their groups
    assert reads / rate == pytest.approx(restore_seconds(design, "global", own_files_only=True) - 2 * latency
                                         - broadcast)
    storm = design.link("global").read.aggregate_bps / 2  # both nodes read alike: half the store each
    if readers == "all":
        assert rate == pytest.approx(storm) and node.tiers["global"].read_gib_s * GIB > 1.1 * storm
    else:
        assert rate == pytest.approx(node.tiers["global"].read_gib_s * GIB)
