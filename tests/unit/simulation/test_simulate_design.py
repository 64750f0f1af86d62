"""The one simulator on the design (issue 32): one checkpoint alone takes its closed form
(emulator/design/costs.py) phase by phase, on every kind of tier, and each failure class's recovery
is its closed form; then what only the simulation adds (unequal nodes sharing a link).

In process, no emulation runs: designs from configs through emulator.design.resolve, one
checkpoint alone (``saves=1``, the interval far longer than any copy) or one failure by a trace.
"""
from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from emulator.config import load_config
from emulator.design import resolve
from emulator.design.costs import (checkpoint_costs, class_restore_seconds, copy_seconds, lag_seconds,
                                   recovery_seconds, restore_seconds, snapshot_seconds)
from emulator.simulation.arrivals import Arrivals, Failure
from emulator.simulation.model import RunSpec, simulate

FAR = 1e7  # seconds of training before the checkpoint: nothing else is in flight


def _cfg(tmp_path, data: dict, *sets):
    path = tmp_path / "design.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(str(path), list(sets))


def _tiers(tmp_path, *names):
    paths = {"memory": "/dev/shm/ckpt-emu-test-none", "local": str(tmp_path / "nvme"), "global": str(tmp_path / "pfs")}
    out = {"local": None, "global": {"backend": "dir", "path": paths["global"]}}
    for n in names:
        out[n] = {"backend": "dir", "path": paths[n]}
    return out


def _ladder(tmp_path, *names, peer=False, flags=None, **extra):
    """Llama-3 405B (TP8 PP32) on 2,048 nodes of 8, ZeRO-1: five node groups of unequal bytes."""
    tiers = _tiers(tmp_path, *names)
    node = {"nic": "400Gb/s", "snapshot": {"rate": "40GB/s", "fixed_ms": 20}}
    if "memory" in names:
        node["memory"] = {"capacity": "1TiB", "write": "25GB/s", "read": "30GB/s"}
    if "local" in names:
        node["local"] = {"write": "7GB/s", "read": "9GB/s", "latency_ms": 1}
    if peer:
        tiers["peer"] = {"replicas": 1}
    data = {"extends": "llama3-405b", "tiers": tiers, "drain": {"verify": "checksum", "concurrency": 3},
            "design": {"job": {"nodes": 2048}, "node": node,
                       "global": {"write": "400GB/s", "read": "800GB/s", "latency_ms": 5}}, **extra}
    return resolve(_cfg(tmp_path, data), **(flags or {}))


def _alone(d, mode="sync"):
    return simulate(d, RunSpec(mode, FAR, saves=1))


DESIGNS = {  # the tiers as written: each kind first, and after others
    "global only (the ranks write to it)": {"names": ()},
    "NVMe, then a drain to global": {"names": ("local",)},
    "memory, peer, NVMe, global": {"names": ("memory", "local"), "peer": True},
    "memory, then global": {"names": ("memory",)},
}


@pytest.mark.parametrize("name", list(DESIGNS))
def test_one_checkpoint_alone_takes_its_closed_form_on_every_tier(tmp_path, name):
    d = _ladder(tmp_path, *DESIGNS[name]["names"], peer=DESIGNS[name].get("peer", False))
    assert len({g.node_bytes for g in d.job.groups}) == 5  # unequal nodes share global storage: max-min fair, the heaviest last
    c = checkpoint_costs(d)
    for mode in ("sync", "async"):
        o = _alone(d, mode)
        for t in d.tiers:
            assert o.tiers[t]["copy_mean_s"] == pytest.approx(copy_seconds(d, t), rel=1e-6), (mode, t)
            assert o.tiers[t]["lag_mean_s"] == pytest.approx(lag_seconds(d, t), rel=1e-6), (mode, t)
        assert o.stall_mean_s == pytest.approx(c.sync_stall_s if mode == "sync" else c.async_stall_s, rel=1e-6)
    assert c.async_stall_s == pytest.approx(snapshot_seconds(d))


def test_a_checkpoint_goes_to_the_tiers_whose_every_divides_its_number(tmp_path):
    """Peer every 2nd, global every 4th: the 4th checkpoint goes everywhere, its lags those of a
    checkpoint to every tier; the 2nd skips global."""
    data = {"checkpoint": {"interval_steps": 5}}
    d = _ladder(tmp_path, "memory", peer=True, **data)
    every = {"memory": 1, "peer": 2, "global": 4}
    from dataclasses import replace
    d = replace(d, ladder=tuple(replace(t, every=every[t.name]) for t in d.ladder))
    o = simulate(d, RunSpec("sync", FAR, saves=4))
    assert [o.tiers[t]["copies"] for t in d.tiers] == [4, 2, 1]
    assert o.tiers["global"]["lag_mean_s"] == pytest.approx(lag_seconds(d, "global"), rel=1e-6)
    assert o.complete == 4 and o.durability_lag_mean_s > 0


def _one_failure(d, cls: str):
    """A failure of ``cls`` long after the first checkpoint is durable everywhere: its recovery."""
    o = simulate(d, RunSpec("sync", FAR / 10, horizon_s=FAR / 5), Arrivals(d.failures, trace=[Failure(FAR / 6, cls)]))
    assert o.failures[cls] == 1
    return o


@pytest.mark.parametrize("names, peer, restores_from", [
    (("memory", "local"), True, {"process": "memory", "node": "peer", "group": "global"}),
    (("local",), False, {"process": "local", "node": "global", "group": "global"}),
    ((), False, {"process": "global", "node": "global", "group": "global"}),
])
def test_each_class_recovers_in_its_closed_form(tmp_path, names, peer, restores_from):
    """Detection, restart or replacement, then the restore from the nearest surviving tier: a storm,
    or the lost node alone while the others read their NVMe."""
    d = _ladder(tmp_path, *names, peer=peer)
    for cls, tier in restores_from.items():
        o = _one_failure(d, cls)
        assert o.restores == {tier: 1}, cls
        assert o.classes[cls]["recovery_s"] == pytest.approx(recovery_seconds(d, cls), rel=1e-9), cls
        assert o.restart_s == pytest.approx(d.failures.of(cls).before_restore_s)
        assert o.recovery_s == pytest.approx(class_restore_seconds(d, cls), rel=1e-9)
    if names == ("local",):  # the lost node reads global alone, the others their NVMe, in parallel
        assert class_restore_seconds(d, "node") == pytest.approx(
            max(restore_seconds(d, "global", alone=True), restore_seconds(d, "local")))


def test_a_failure_restores_the_newest_checkpoint_a_surviving_tier_holds(tmp_path):
    """As the emulator restores: a node loss with the peer's copy older than global's restores from
    global, and a crash right after it, its memory tier lost with the node, finds global's copy."""
    from dataclasses import replace
    d = _ladder(tmp_path, "memory", peer=True)
    every = {"memory": 1, "peer": 4, "global": 2}
    d = replace(d, ladder=tuple(replace(t, every=every[t.name]) for t in d.ladder))
    interval = 1000.0
    trace = [Failure(6.5 * interval, "node"), Failure(6.5 * interval + 700, "process")]  # before a new memory copy
    o = simulate(d, RunSpec("sync", interval, horizon_s=5e4), Arrivals(d.failures, trace=trace))
    assert o.restores == {"global": 2}
    assert o.classes["node"]["lost_work_s"] < interval  # global's 6th checkpoint, not the peer's 4th


def test_the_design_is_what_the_simulator_reads(tmp_path):
    """The simulator takes rates only from the design's links: halving the global aggregate in the
    design (a flag or a sweep row) doubles every node's share of the drain."""
    d = _ladder(tmp_path, "local")
    slow = _ladder(tmp_path, "local", flags={"global_write_bps": 200e9})
    moving = d.job.checkpoint_bytes
    assert _alone(slow).drain_mean_s > _alone(d).drain_mean_s
    assert copy_seconds(slow, "global") == pytest.approx(_alone(slow).drain_mean_s, rel=1e-6)
    assert moving / 200e9 < copy_seconds(slow, "global")


def test_async_copies_cost_training_their_interference_share(tmp_path):
    """A calibrated interference share s: each background copy of c seconds costs training s x c,
    owed before the next checkpoint (the planner's async stall: emulator/planner/inputs.py)."""
    d = replace(_ladder(tmp_path, "local"), interference_share=0.25)
    copies = sum(copy_seconds(d, t) for t in d.tiers)
    o = simulate(d, RunSpec("async", FAR, saves=3))
    assert o.interference_s == pytest.approx(2 * 0.25 * copies, rel=1e-6)  # the third's is owed after training
    assert o.checkpoint_overhead == pytest.approx((o.stall_s + o.interference_s) / o.wall_s)
    assert simulate(d, RunSpec("sync", FAR, saves=3)).interference_s == 0


@pytest.mark.parametrize("duplex", [False, True])
def test_a_drain_reads_every_file_back_where_globals_reads_and_writes_share_it(tmp_path, duplex):
    """Global storage paced by ``emulate:`` knobs is one bucket for reads and writes unless duplex, as
    the emulator books it: a drain's checksum read-back of every file then takes its turn on it (the
    doc's 405B run: 13.3 s of copy, 6.7 s of read-back). The closed form counted the last file's alone
    (0.84 s of read-back), and a calibration took the difference for the host. Duplex, the earlier read-backs
    overlap later copies and the last file's is left."""
    knobs = {"write_gib_s": 4.0, "read_gib_s": 8.0, "shared_by": "node", "duplex": duplex}
    data = {"extends": "llama3-8b", "drain": {"verify": "checksum", "concurrency": 2},
            "tiers": {"local": {"backend": "dir", "path": str(tmp_path / "nvme"),
                                "emulate": {"write_gib_s": 6.0, "read_gib_s": 7.0, "shared_by": "node"}},
                      "global": {"backend": "dir", "path": str(tmp_path / "pfs"), "emulate": knobs}}}
    d = resolve(_cfg(tmp_path, data))
    g = d.job.heaviest
    read_back = (g.node_bytes if not duplex else g.file_bytes) / (8.0 * 2**30)
    assert copy_seconds(d, "global") == pytest.approx(g.node_bytes / (4.0 * 2**30) + read_back, rel=1e-6)
    assert _alone(d).tiers["global"]["copy_mean_s"] == pytest.approx(copy_seconds(d, "global"), rel=1e-6)
