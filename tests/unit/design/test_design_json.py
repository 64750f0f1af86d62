"""The design a run reads: resolved once by the launcher, written as design.json and read back by the
ranks as it was (every float bit for bit, standard JSON), with each node's pacing the same as the
design's links give that node of the run (emulator/design/links.py ``tier_emulation``)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulator.config import load_config
from emulator.design import resolve, run_emulation, run_peer_link
from emulator.design.codec import from_json, to_json

PRESETS = sorted(p.stem for p in (Path(__file__).resolve().parents[3] / "configs").glob("*.yaml"))
#: (preset, run nodes): every shipped design, and runs of several nodes and of part of a node
CASES = [(p, 1) for p in PRESETS] + [("design-memory-peer-pfs", 2), ("design-nvme-s3", 2), ("llama3-8b-subset", 2)]


def _round_trip(design):
    text = json.dumps(to_json(design), allow_nan=False)  # standard JSON: no Infinity
    return from_json(json.loads(text))


@pytest.mark.parametrize("preset,nodes", CASES)
def test_a_runs_design_reads_back_as_it_was_written(preset, nodes):
    cfg = load_config(preset, ["run.scale=0.001"])
    if cfg.parallelism.active_ranks % nodes:
        pytest.skip("ranks do not split over the nodes")
    design = resolve(cfg, emulated_nodes=nodes, run=True)
    assert _round_trip(design) == design


def test_a_plans_design_reads_back_too():
    cfg = load_config("design-llama405-2048-nvme-pfs")
    design = resolve(cfg, nodes=64, nic_bps=50e9, mttf_hours=1000.0, restart_s={"node": 300.0})
    assert _round_trip(design) == design


@pytest.mark.parametrize("preset,nodes", [("design-memory-peer-pfs", 2), ("design-nvme-s3", 1),
                                          ("llama3-8b-subset", 2), ("design-llama70-128-nvme-s3", 1)])
def test_each_nodes_pacing_is_what_the_links_give_that_node(preset, nodes):
    cfg = load_config(preset, ["run.scale=0.001"])
    emulation = resolve(cfg, emulated_nodes=nodes, run=True).emulation
    for node in range(nodes):
        mine = emulation.node(node)
        for name in mine.tiers:
            assert mine.tiers[name] == run_emulation(cfg, name, run_node=node, run_nodes=nodes)
            assert emulation.whole[name] == run_emulation(cfg, name, whole_node=True)
        assert mine.lone_global == run_emulation(cfg, "global", run_node=node, run_nodes=nodes, alone_read=True)
        assert mine.peer_bps == run_peer_link(cfg, run_node=node, run_nodes=nodes)


def test_a_run_without_a_design_paces_no_snapshot_and_mlperf_none():
    assert resolve(load_config("llama3-8b-subset"), run=True).emulation.snapshot is None
    assert resolve(load_config("mlperf-llama3-8b-subset"), run=True).emulation.snapshot is None
    snap = resolve(load_config("design-nvme-pfs"), run=True).emulation.snapshot
    assert snap is not None and snap.rate_bps > 0
