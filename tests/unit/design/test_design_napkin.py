"""Two additions to the design model for the planner: a napkin design (N accelerators, a checkpoint,
one global storage) and a calibration of a store nothing paced (measured from one node)."""
from __future__ import annotations

import pytest
import yaml

from emulator.config import load_config
from emulator.design import Calibration, resolve
from emulator.design.costs import (
    checkpoint_costs,
    copy_seconds,
    restore_seconds,
    snapshot_seconds,
)
from emulator.design.napkin import napkin_design
from emulator.units import BITS, GIB


def test_a_napkin_design_is_n_accelerators_sharing_one_store_evenly():
    d = napkin_design(16_000, 5292 * GIB, 50e9, family=BITS)
    (group,) = d.job.groups
    assert (d.job.nodes, d.job.accelerators_per_node, group.nodes) == (2000, 8, 2000)
    assert group.file_bytes == -(-5292 * GIB // 16_000) and group.node_bytes == 8 * group.file_bytes
    assert d.tiers == ("global",) and d.link("global").family == BITS
    # 2,000 nodes of 2.6 GiB over 50 GB/s: the aggregate binds long before the 400 Gb/s NIC
    assert copy_seconds(d, "global") == pytest.approx(2000 * group.node_bytes / 50e9)
    assert checkpoint_costs(d).async_stall_s == pytest.approx(snapshot_seconds(d))
    assert d.failures.accelerators == 16_000 and d.failures.cluster_mttf_s == pytest.approx(50_000 * 3600 / 16_000)
    assert d.base_interval_s == pytest.approx(d.failures.cluster_mttf_s / 20)
    assert any("nic" in n for n in d.notes) and any("snapshot" in n for n in d.notes)


def test_a_napkin_job_that_does_not_fill_its_last_node():
    d = napkin_design(12, 12 * GIB, 1e9)
    assert sorted((g.nodes, g.files) for g in d.job.groups) == [(1, 4), (1, 8)]
    assert d.job.nodes == 2 and d.failures.accelerators == 12  # the failures of 12, not of 2 full nodes


def _unpaced(tmp_path, nodes=16):
    path = tmp_path / "unpaced.yaml"
    path.write_text(yaml.safe_dump({"extends": "llama3-8b", "design": {"job": {"nodes": nodes}},
                                    "tiers": {"local": None, "global": {"backend": "dir", "path": str(tmp_path / "g")}}}))
    return load_config(str(path))


def test_an_unpaced_store_measured_from_one_node_is_credited_with_that_nodes_rate(tmp_path):
    """A plain folder seen from one node says nothing of its aggregate: 16 nodes drain at the one
    measured node's 2 GB/s between them, not 2 GB/s each; with no restore measured, reads at that rate."""
    d = resolve(_unpaced(tmp_path), calibration=Calibration(copy_bps={"global": 2e9}))
    node = d.job.heaviest.node_bytes
    assert copy_seconds(d, "global") == pytest.approx(16 * node / 2e9)
    assert restore_seconds(d, "global") == pytest.approx(16 * node / 2e9)
    assert d.sources["global_write"] == "measured"
    assert any("aggregate being unknown" in n for n in d.notes)


def test_a_run_that_reached_its_paced_share_leaves_the_design_as_it_is(tmp_path):
    """The run's node is paced at its max-min fair share of the store (every node draining at once); a
    measurement at that share is the design's, not a host that could not keep up: the design's links stand
    (capping every node at that share would slow the heavy nodes that get more once the light ones finish)."""
    from emulator.design.links import pacing
    path = tmp_path / "l405.yaml"
    path.write_text(yaml.safe_dump({
        "extends": "llama3-405b-subset", "tiers": {"local": None, "global": {"backend": "dir", "path": str(tmp_path)}},
        "design": {"job": {"nodes": 2048}, "node": {"nic": "400Gb/s"}, "global": {"write": "400GB/s"}}}))
    cfg = load_config(str(path))
    plain = resolve(cfg)
    paced = {"global": pacing(cfg, "global", plain.job)}
    share = paced["global"][0]
    assert share < 0.1 * plain.link("global").drain.node_rate(1)  # far below a node alone's 50 GB/s
    reached = resolve(cfg, calibration=Calibration(copy_bps={"global": share}, paced=paced))
    assert reached.link("global") == plain.link("global")
    slow = resolve(cfg, calibration=Calibration(copy_bps={"global": 0.5 * share}, paced=paced))
    assert slow.link("global").drain == plain.link("global").drain.scaled(0.5)
    assert slow.sources["global_write"] == "measured"
    assert copy_seconds(slow, "global") == pytest.approx(2 * copy_seconds(plain, "global"))
