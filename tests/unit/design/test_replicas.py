"""Two peer replicas cost two copies: the closed form, the simulator and the planner.

Every shipped config has ``replicas: 1``, where a copy costed at one replica whatever the config
says is right by accident. With 2, each node sends its memory checkpoint twice through its NIC
(the peer tier's only link): twice the bytes, twice the time, in every engine.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import yaml

from emulator.config import load_config
from emulator.design import resolve
from emulator.design.costs import checkpoint_costs, copy_seconds, lag_seconds
from emulator.planner.planning import tier_needs
from emulator.simulation.model import RunSpec, simulate

NIC_BPS = 400e9 / 8  # 400 Gb/s


def _design(tmp_path, replicas: int):
    data = {"extends": "llama3-8b",
            "tiers": {"memory": {"backend": "dir", "path": str(tmp_path / "mem" / "node{node}")},
                      "peer": {"replicas": replicas, "placement": "jump"}, "local": None,
                      "global": {"backend": "dir", "path": str(tmp_path / "pfs")}},
            "design": {"job": {"nodes": 4}, "node": {"nic": "400Gb/s", "memory": {"capacity": "512GiB",
                                                                                 "write": "20GB/s", "read": "20GB/s"}},
                       "global": {"write": "4GB/s", "read": "8GB/s", "latency_ms": 1}}}
    path = tmp_path / f"r{replicas}.yaml"
    path.write_text(yaml.safe_dump(data))
    return resolve(load_config(str(path)))


@pytest.fixture(scope="module")
def designs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("replicas")
    return {r: _design(tmp, r) for r in (1, 2, 3)}


@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_a_peer_copy_is_every_replica_over_the_nic(designs, replicas):
    d = designs[replicas]
    assert d.replicas == replicas
    b = d.job.heaviest.node_bytes
    assert copy_seconds(d, "peer") == pytest.approx(replicas * b / NIC_BPS, rel=1e-9)
    assert lag_seconds(d, "peer") - lag_seconds(d, "memory") == pytest.approx(replicas * b / NIC_BPS, rel=1e-9)


def test_the_simulator_sends_every_replica(designs):
    """One checkpoint alone (nothing else in flight): the simulated peer copy is its closed form."""
    for r in (1, 2):
        d = designs[r]
        o = simulate(d, RunSpec("sync", 1e7, saves=1))
        assert o.tiers["peer"]["copy_mean_s"] == pytest.approx(copy_seconds(d, "peer"), rel=1e-6)
        assert checkpoint_costs(d).copy_s["peer"] == pytest.approx(copy_seconds(d, "peer"))
    one, two = (simulate(designs[r], RunSpec("sync", 1e7, saves=1)).tiers["peer"]["copy_mean_s"] for r in (1, 2))
    assert two == pytest.approx(2 * one, rel=1e-6)


def test_the_planner_asks_the_nic_for_every_replica(designs):
    """``plan``'s tier needs: the bytes a node's peer copy moves, its time and the rate it needs."""
    needs = {}
    for r in (1, 2):
        d = designs[r]
        cell = SimpleNamespace(base_interval_s=600.0, every={t: 1 for t in d.tiers})
        needs[r] = next(n for n in tier_needs(d, cell, 0.5) if n.name == "peer")
    assert needs[2].bytes == 2 * needs[1].bytes == 2 * designs[1].job.heaviest.node_bytes
    assert needs[2].copy_s == pytest.approx(2 * needs[1].copy_s)
    assert needs[2].needed_bps == pytest.approx(2 * needs[1].needed_bps)
    assert needs[2].rate_bps == pytest.approx(needs[1].rate_bps) == pytest.approx(NIC_BPS)
