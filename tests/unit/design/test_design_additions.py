"""What the simulator needed of the design (emulator/design): the closed forms' corrections, the run
itself as a design (``simulate --as-run``), a calibration of this very design, per-class restarts,
retention, and which tiers survive which class."""
from __future__ import annotations

import pytest
import yaml

from emulator.config import load_config
from emulator.design import Calibration, resolve
from emulator.design.costs import (checkpoint_costs, copy_seconds, lag_seconds, restore_seconds,
                                   retention_seconds)
from emulator.design.links import pacing
from emulator.units import GIB


def _cfg(tmp_path, data: dict, *sets):
    if "design" in data:  # a design part only for the tiers the config has
        node = {k: v for k, v in data["design"]["node"].items() if k == "nic" or (data["tiers"].get(k))}
        data = {**data, "design": {**data["design"], "node": node}}
    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(str(path), list(sets))


def _tiers(tmp_path, *names, **extra):
    paths = {"memory": "/dev/shm/x", "local": str(tmp_path / "nvme"), "global": str(tmp_path / "pfs")}
    out = {"local": None, "global": {"backend": "dir", "path": paths["global"]}}
    for n in names:
        out[n] = {"backend": "dir", "path": paths[n], **extra.get(n, {})}
    return out


DESIGN = {"job": {"nodes": 4}, "node": {"nic": "400Gb/s", "local": {"write": "7GB/s", "read": "7GB/s"},
                                        "memory": {"capacity": "512GiB", "write": "20GB/s"}},
          "global": {"write": "4GB/s", "read": "8GB/s", "latency_ms": 10}}


def test_a_direct_write_to_global_pays_its_commit_and_the_manifest_not_three_latencies(tmp_path):
    """The ranks write straight to global: each file's commit, then the global manifest (before: a
    node manifest too, which only a node tier has)."""
    d = resolve(_cfg(tmp_path, {"extends": "llama3-8b", "tiers": _tiers(tmp_path), "design": DESIGN}))
    b, lat = d.job.heaviest.node_bytes, 0.010
    assert copy_seconds(d, "global") == pytest.approx(b * 4 / 4e9 + lat)
    c = checkpoint_costs(d)
    assert c.lag_s["global"] == pytest.approx(b * 4 / 4e9 + 2 * lat)


def test_the_first_tier_of_a_checkpoint_is_the_nearest_file_tier_taking_it(tmp_path):
    """Memory every 2nd checkpoint, NVMe every one: the 1st checkpoint is written to NVMe (its
    commit and manifest), not copied there."""
    data = {"extends": "llama3-8b", "checkpoint": {"interval_steps": 5},
            "tiers": _tiers(tmp_path, "memory", "local", memory={"interval_steps": 10}),
            "design": {**DESIGN, "node": {**DESIGN["node"], "local": {"write": "7GB/s", "read": "7GB/s",
                                                                      "latency_ms": 2}}}}
    d = resolve(_cfg(tmp_path, data))
    b = d.job.heaviest.node_bytes
    assert lag_seconds(d, "local") == pytest.approx(b / 7e9 + 2 * 0.002)
    assert copy_seconds(d, "local") == pytest.approx(b / 7e9)  # behind memory: a copy, no manifest


def test_a_measured_drain_holds_its_read_back(tmp_path):
    cfg = _cfg(tmp_path, {"extends": "llama3-8b", "tiers": _tiers(tmp_path, "local"), "design": DESIGN})
    d = resolve(cfg)
    b, f = d.job.heaviest.node_bytes, d.job.heaviest.file_bytes
    waves = -(-d.job.heaviest.files // d.drain_concurrency)
    assert copy_seconds(d, "global") == pytest.approx(2 * waves * 0.010 + b * 4 / 4e9 + f * 4 / 8e9)
    measured = resolve(cfg, calibration=Calibration(copy_bps={"global": 0.1e9}))
    assert measured.sources["global_write"] == "measured"
    assert copy_seconds(measured, "global") == pytest.approx(2 * waves * 0.010 + b / 0.1e9)


def test_a_run_of_this_design_measured_it_and_its_rates_stand(tmp_path):
    """A calibration made under the pacing this design gives its node scales the design's links by what
    the host reached of it, even 95 % (the per-byte costs a design's rate leaves out); a run of another
    design does not, unless its host fell below 90 %."""
    cfg = _cfg(tmp_path, {"extends": "llama3-8b", "tiers": _tiers(tmp_path, "local"), "design": DESIGN})
    job = resolve(cfg).job
    near = 0.95 * 7e9
    same = Calibration(copy_bps={"local": near}, paced={"local": pacing(cfg, "local", job)})
    other = Calibration(copy_bps={"local": near}, paced={"local": (8e9, 8e9, 8e9, "node")})
    assert resolve(cfg, calibration=same).link("local").write.node_bps == pytest.approx(near)
    assert resolve(cfg, calibration=other).link("local").write.node_bps == pytest.approx(7e9)
    slow = Calibration(copy_bps={"local": 0.5 * 7e9}, paced={"local": (8e9, 8e9, 8e9, "node")})
    assert resolve(cfg, calibration=slow).link("local").write.node_bps == pytest.approx(3.5e9)
    # global storage shared by 4 nodes (1 GB/s each): a run of it reaching 0.8 GB/s plans the whole
    # link at 80 %, the job's aggregate included, so a lone reader and unequal nodes keep their share;
    # a run of another design reaching 0.5 GB/s was limited by its host: its cap, under the aggregate
    shared = Calibration(copy_bps={"global": 0.8e9}, paced={"global": pacing(cfg, "global", job)})
    g = resolve(cfg, calibration=shared).link("global").drain
    assert (g.aggregate_bps, g.node_bps) == (pytest.approx(3.2e9), pytest.approx(0.8 * 7e9))  # the NVMe it reads
    host = Calibration(copy_bps={"global": 0.5e9}, paced={"global": (9e9, 9e9, 9e9, "node")})
    g = resolve(cfg, calibration=host).link("global").drain
    assert (g.aggregate_bps, g.node_bps) == (pytest.approx(4e9), pytest.approx(0.5e9))


def test_the_run_itself_as_a_design(tmp_path):
    """``as_run``: the run's 2 ranks at run.scale, one node, paced as the run paces it: its share of
    the job's global storage (4 nodes draining at once: 1 GB/s each, under the NIC), and of its NVMe,
    for the quarter of a node of 8 its 2 ranks are (emulator/design/links.py ``node_fraction``)."""
    cfg = _cfg(tmp_path, {"extends": "llama3-8b", "parallelism": {"ranks": 2}, "run": {"scale": 0.001},
                          "tiers": _tiers(tmp_path, "local"), "design": DESIGN})
    full, run = resolve(cfg), resolve(cfg, as_run=True, dilation=1.0)
    assert run.as_run and run.job.nodes == 1 and run.job.groups[0].files == 2
    assert run.job.groups[0].node_bytes == pytest.approx(full.job.emulated[0].node_bytes * 0.001, abs=1)
    assert run.link("global").drain.node_rate(1) == pytest.approx(1e9 / 4)
    assert run.link("local").write.node_rate(1) == pytest.approx(7e9 / 4)
    assert full.link("global").drain.node_rate(1) == pytest.approx(4e9)  # the job's node alone


def test_a_flag_overrides_one_classes_restart(tmp_path):
    cfg = _cfg(tmp_path, {"extends": "llama3-8b", "tiers": _tiers(tmp_path, "local"), "design": DESIGN})
    d = resolve(cfg, restart_s={"node": 300.0})
    assert (d.failures.of("node").detect_s, d.failures.of("node").restart_s) == (60.0, 300.0)
    assert d.failures.of("process").restart_s == 150.0  # the documented default stands
    assert resolve(cfg, restart_s=20.0).failures.of("group").restart_s == 20.0


def test_retention_is_its_requests_one_at_a_time(tmp_path):
    cfg = _cfg(tmp_path, {"extends": "llama3-8b", "checkpoint": {"keep": 2},
                          "tiers": _tiers(tmp_path, "local"), "design": DESIGN})
    d = resolve(cfg, calibration=Calibration(retention_request_s=0.001))
    per_node, world = d.job.heaviest.files, sum(g.nodes * g.files for g in d.job.groups)
    assert retention_seconds(d) == pytest.approx((2 + 4 + per_node) * 0.001 + (2 + 4 + world) * 0.011)


def test_which_tiers_survive_which_class(tmp_path):
    cfg = _cfg(tmp_path, {"extends": "llama3-8b", "tiers": {**_tiers(tmp_path, "memory", "local"),
                                                            "peer": {"replicas": 1}}, "design": DESIGN})
    d = resolve(cfg)
    assert [t for t in d.tiers if d.survives("node", t)] == ["peer", "global"]
    assert [t for t in d.tiers if d.survives("process", t)] == ["memory", "peer", "local", "global"]
    assert [t for t in d.tiers if d.survives("group", t)] == ["global"]
    # a peer's copy: fetched over the NIC into the lost node's memory, as fast as the slower of the
    # two (its 20 GB/s write here, not the 50 GB/s NIC), then read from memory
    b = d.job.heaviest.node_bytes
    assert restore_seconds(d, "peer") == pytest.approx(b / 20e9 + b / 20e9)
    assert d.link("memory").shared_device() is not None and d.link("local").read_cost == pytest.approx(1.0)


def test_a_knobs_capacity_counts_a_runs_bytes_and_the_design_the_jobs(tmp_path):
    """``emulate.capacity_gib`` is in the bytes a run moves (x run.scale, as the emulator counts them);
    the design's local tier is at full size, and so its capacity."""
    data = {"extends": "llama3-8b", "run": {"scale": 0.01},
            "tiers": {"local": {"backend": "dir", "path": str(tmp_path / "nvme"),
                                "emulate": {"write_gib_s": 6, "capacity_gib": 2}},
                      "global": {"backend": "dir", "path": str(tmp_path / "pfs")}}}
    cfg = _cfg(tmp_path, data)
    assert resolve(cfg).link("local").capacity_bytes == pytest.approx(200 * GIB, rel=1e-9)
    assert resolve(cfg, as_run=True, dilation=1.0).link("local").capacity_bytes == pytest.approx(2 * GIB, rel=1e-9)


def test_a_tier_whose_reads_have_no_rate_restores_at_what_a_run_read(tmp_path):
    """``emulate:`` without a read rate does not pace reads: a calibrating run's restore is the host's
    rate, and the design restores at it (not in no time)."""
    data = {"extends": "llama3-8b",
            "tiers": {"local": {"backend": "dir", "path": str(tmp_path / "nvme"), "emulate": {"write_gib_s": 6}},
                      "global": {"backend": "dir", "path": str(tmp_path / "pfs")}}}
    cfg = _cfg(tmp_path, data)
    assert resolve(cfg).link("local").read is None and restore_seconds(resolve(cfg), "local") == 0.0
    d = resolve(cfg, calibration=Calibration(read_bps={"local": 2e9}))
    assert d.link("local").read.node_bps == 2e9 and d.sources["local_read"] == "measured"
    assert restore_seconds(d, "local") == pytest.approx(d.job.heaviest.node_bytes / 2e9)


def test_a_knobs_sharing_means_what_the_emulated_tier_does(tmp_path):
    """tiers/emulated.py: none/rank give every stream the rate, node one rate per node, job one in all;
    a drain is the node leader's copies, drain.concurrency at a time (none), or its one bucket (rank).
    (What simulation/sharing.py checked before the design owned the rule.)"""
    want = {"none": ((8e9, None), (4e9, None)), "rank": ((8e9, None), (1e9, None)),
            "node": ((1e9, None), (1e9, None)), "job": ((None, 1e9), (None, 1e9))}
    for shared_by, ((write_node, write_agg), (drain_node, _)) in want.items():
        data = {"extends": "llama3-8b", "drain": {"concurrency": 4},
                "tiers": {"local": {"backend": "dir", "path": str(tmp_path / "nvme"),
                                    "emulate": {"write_gib_s": 1e9 / GIB, "shared_by": shared_by}},
                          "global": {"backend": "dir", "path": str(tmp_path / "pfs")}}}
        t = resolve(_cfg(tmp_path, data)).link("local")  # a node of 8 ranks
        if write_agg is None:
            assert t.write.node_bps == pytest.approx(write_node) and t.drain.node_bps == pytest.approx(drain_node)
        else:
            assert t.write.aggregate_bps == pytest.approx(write_agg) and t.drain.aggregate_bps == pytest.approx(write_agg)
