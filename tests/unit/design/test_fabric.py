"""A compute fabric for peers (``design.node.fabric``): a node's peer copies, a lost node's fetch of its
copy back and a restore's broadcasts go over the accelerators' scale-out network, beside the storage
NIC, in every engine: the design's links (plan), the simulator's, and the run's pacing (design.json).
Without one they share the NIC with the drains to global storage, as before."""
from __future__ import annotations

import pytest

from emulator.config import load_config
from emulator.design import resolve, run_emulation, run_peer_link
from emulator.design.costs import copy_seconds, restore_seconds
from emulator.errors import ConfigError
from emulator.planner.planning import plan
from emulator.simulation.model import RunSpec, simulate
from emulator.units import parse_rate

#: the peer design's nodes with 8 x 400 Gb/s of InfiniBand for the accelerators, beside the 400 Gb/s NIC
FABRIC = "3.2Tb/s"


def _peer_design(*extra):
    """The shipped peer design with a NIC slower than a copy into host memory (100 Gb/s, 20 GB/s)."""
    return load_config("design-memory-peer-pfs", ["parallelism.ranks=16", "design.node.nic=100Gb/s", *extra])


def test_peer_copies_and_fetches_go_over_the_fabric_and_leave_the_nic_to_storage():
    nic, fabric = _peer_design(), _peer_design(f"design.node.fabric={FABRIC}")
    over_nic, over_fabric = resolve(nic), resolve(fabric)
    ratio = parse_rate(FABRIC, "") / nic.design.nic_bps  # 32
    assert over_fabric.link("peer").write.node_bps == parse_rate(FABRIC, "")
    assert over_fabric.links.nic_bps == nic.design.nic_bps  # the storage NIC is the NIC still
    assert copy_seconds(over_nic, "peer") / copy_seconds(over_fabric, "peer") == pytest.approx(ratio, rel=1e-9)
    # a lost node's fetch of its copy: at the NIC's 12.5 GB/s, over the fabric at the memory's 20 GB/s
    fetch = lambda d: restore_seconds(d, "peer") - restore_seconds(d, "memory")  # noqa: E731 - the fetch alone
    assert fetch(over_nic) / fetch(over_fabric) == pytest.approx(20 / 12.5, rel=1e-6)
    # the drain to global storage no longer shares its NIC with the peer sends, in the run's pacing
    assert run_emulation(nic, "global").nic_gib_s is not None
    assert run_emulation(fabric, "global").nic_gib_s is None
    # the run paces its peer sends at the fabric's rate, in a bucket of their own (not the NIC's)
    pacing = resolve(fabric, emulated_nodes=2, run=True).emulation.node(0)
    assert pacing.peer_fabric and pacing.peer_bps == run_peer_link(fabric, run_nodes=2) == parse_rate(FABRIC, "")
    pacing = resolve(nic, emulated_nodes=2, run=True).emulation.node(0)
    assert not pacing.peer_fabric and pacing.peer_bps == nic.design.nic_bps


def test_a_nic_given_on_the_command_line_leaves_a_fabric_alone():
    narrow = resolve(_peer_design(f"design.node.fabric={FABRIC}"), nic_bps=parse_rate("100Gb/s", ""))
    assert narrow.link("peer").write.node_bps == parse_rate(FABRIC, "")
    assert narrow.links.nic_bps == parse_rate("100Gb/s", "")


def test_the_planner_and_the_simulator_copy_to_peers_at_the_fabrics_rate():
    nic, fabric = resolve(_peer_design()), resolve(_peer_design(f"design.node.fabric={FABRIC}"))
    assert plan(fabric).costs.copy_s["peer"] < plan(nic).costs.copy_s["peer"]
    spec = RunSpec("async", interval_s=600.0, saves=6)
    peer = [simulate(d, spec).tiers["peer"]["copy_mean_s"] for d in (nic, fabric)]
    assert peer[0] / peer[1] == pytest.approx(copy_seconds(nic, "peer") / copy_seconds(fabric, "peer"), rel=0.02)


def test_a_fabric_is_a_rate_with_its_unit():
    with pytest.raises(ConfigError, match="design.node.fabric"):
        _peer_design("design.node.fabric=3200")
