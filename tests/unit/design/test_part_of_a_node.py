"""A run node that holds part of a design node is paced at that part of the node, so its figures are the node's.

Paced at its design node's whole devices with only its own ranks' bytes, the embedded default at
parallelism.ranks=4 (half its node of 8) reported a local write of 8.06 s and a drain of 31.7 s at
full size, against 16.1 s and 59.9 s at its 8 ranks: half the design's times, a figure that flatters
the storage. Now a run node gets its part of the node's devices (NVMe, host memory), of its NIC and
of its share of global storage (``node_fraction``: its ranks' bytes over the node's), and each of
its copies takes the whole node's time.
"""
from __future__ import annotations

import pytest

from emulator.config import load_config
from emulator.design import resolve, run_emulation, run_peer_link
from emulator.design.costs import copy_seconds, restore_seconds
from emulator.design.job import job_of
from emulator.design.links import node_fraction, paced_part, pacing
from emulator.units import GIB


def _seconds(cfg, name: str, direction: str, *, run_nodes: int = 1) -> float:
    """A run node's own bytes at full size over the rate it is paced at for ``direction`` on ``name``."""
    job = job_of(cfg, emulated_nodes=run_nodes)
    e = run_emulation(cfg, name, run_nodes=run_nodes)
    return job.emulated[0].node_bytes / (getattr(e, f"{direction}_gib_s") * GIB)


def test_half_a_node_is_paced_at_half_its_devices_and_takes_the_whole_nodes_time():
    whole, half = load_config("default"), load_config("default", ["parallelism.ranks=4"])
    assert node_fraction(job_of(half), 0) == pytest.approx(0.5)
    assert node_fraction(job_of(whole), 0) == 1
    design = resolve(whole)
    assert _seconds(half, "local", "write") == pytest.approx(copy_seconds(design, "local"), rel=1e-9)
    assert _seconds(half, "local", "read") == pytest.approx(restore_seconds(design, "local"), rel=1e-9)
    assert _seconds(half, "global", "write") == pytest.approx(_seconds(whole, "global", "write"), rel=1e-9)
    assert _seconds(half, "global", "read") == pytest.approx(_seconds(whole, "global", "read"), rel=1e-9)


def test_two_agents_of_four_ranks_of_the_peer_design_each_get_half_a_node_and_half_its_nic():
    cfg = load_config("design-memory-peer-pfs")  # 8 ranks, as documented on two agents of 4
    whole = load_config("design-memory-peer-pfs", ["parallelism.ranks=16"])
    assert [node_fraction(job_of(cfg, emulated_nodes=2), n) for n in (0, 1)] == [0.5, 0.5]
    assert run_peer_link(cfg, run_node=1, run_nodes=2) == pytest.approx(cfg.design.nic_bps / 2)
    assert run_peer_link(whole, run_node=1, run_nodes=2) == pytest.approx(cfg.design.nic_bps)
    assert _seconds(cfg, "memory", "write", run_nodes=2) == pytest.approx(
        _seconds(whole, "memory", "write", run_nodes=2), rel=1e-9)
    assert _seconds(cfg, "global", "write", run_nodes=2) == pytest.approx(
        _seconds(whole, "global", "write", run_nodes=2), rel=1e-9)


def test_the_report_states_the_whole_nodes_rates_and_a_calibration_compares_against_them():
    """What the report's header calls the design, and what a calibration compares a run's rates with
    (``pacing``), are the whole node's: the run node's bytes over its seconds, over its part, are."""
    half = load_config("default", ["parallelism.ranks=4"])
    whole = load_config("default")
    assert run_emulation(half, "local", whole_node=True) == run_emulation(whole, "local")
    assert pacing(half, "local", job_of(half)) == pacing(whole, "local", job_of(whole))
    assert run_emulation(half, "local").write_gib_s == pytest.approx(run_emulation(whole, "local").write_gib_s / 2)


def test_simulate_as_run_paces_half_a_node_as_the_run_did():
    half = load_config("default", ["parallelism.ranks=4", "run.dilation=5"])
    run = resolve(half, as_run=True)
    job = job_of(half)
    e = run_emulation(half, "local")
    assert run.link("local").write.node_rate(1) == pytest.approx(e.write_gib_s * GIB / 5)
    # the run's own bytes at its own pace: the whole node's time x the time factor
    assert copy_seconds(run, "local") == pytest.approx(
        copy_seconds(resolve(load_config("default")), "local") * half.time_factor, rel=1e-6)
    assert job.emulated[0].files == 4


def test_only_the_tiers_the_design_describes_are_paced_at_the_part(tmp_path):
    """Knobs (``emulate:``) and tiers nothing paces describe the run's own node: paced, and calibrated,
    as they are. A calibration of a 2-rank run on plain folders that divided its rates by the quarter
    of a node its ranks are planned the job's drains at 4x what the run measured (``tune``'s
    confirming run then read 3.2x the predicted overlap)."""
    half = load_config("default", ["parallelism.ranks=4"])
    job = job_of(half)
    assert [paced_part(half, n, job) for n in ("local", "global")] == [0.5, 0.5]
    raw = load_config("llama3-8b-subset", ["parallelism.ranks=2", f"tiers.global.path={tmp_path}"])
    assert raw.design is None and paced_part(raw, "global", job_of(raw)) == 1.0
    assert node_fraction(job_of(raw), 0) == pytest.approx(0.25)
    knobs = load_config("default", ["parallelism.ranks=4", "design.node.local=null",
                                    "tiers.local.emulate={write_gib_s: 2.0}"])
    assert paced_part(knobs, "local", job_of(knobs)) == 1.0 and paced_part(knobs, "global", job_of(knobs)) == 0.5
    assert run_emulation(knobs, "local").write_gib_s == 2.0
    assert paced_part(half, "peer", job) == 0.5  # through the NIC the default states
    assert paced_part(load_config("default", ["parallelism.ranks=4", "design.node.nic=null"]), "peer", job) == 1.0
