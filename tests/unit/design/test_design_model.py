"""The one model of the job and its design (emulator/design): the job's layout and bytes, links and
who shares them, the failure classes, the snapshot, and the closed forms every engine must meet."""
from __future__ import annotations

import pytest
import yaml

from emulator.config import load_config
from emulator.design import resolve, run_emulation
from emulator.design.costs import (checkpoint_costs, class_restore_seconds, copy_seconds, recovery_seconds,
                                   restore_seconds, snapshot_seconds)
from emulator.design.links import LinkLimits, fair_finish
from emulator.errors import ConfigError, UserError
from emulator.units import GIB, parse_rate

GB = 1e9


def _write(tmp_path, cfg: dict, name="design.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _tiers(tmp_path, local=True):
    t = {"global": {"backend": "dir", "path": str(tmp_path / "pfs")}}
    t["local"] = {"backend": "dir", "path": str(tmp_path / "nvme")} if local else None
    return t


# --------------------------------------------------------------------------- the job

def test_the_layout_follows_the_jobs_size(tmp_path):
    """docs' recipe: a 70B subset preset on 128 nodes of 8 is TP8 DP128; its emulated node holds a
    node's share of that job (about 7.1 GiB), not a node of the preset's 64-rank job (113.9 GiB)."""
    cfg = load_config("llama3-70b-subset", ["design.job.nodes=128"])
    assert (cfg.parallelism.tp, cfg.parallelism.dp) == (8, 128)
    d = resolve(cfg)
    assert d.job.nodes == 128 and d.job.accelerators == 1024
    (group,) = d.job.groups
    assert group.nodes == 128 and group.node_bytes / GIB == pytest.approx(7.12, abs=0.01)
    assert d.job.emulated[0].node_bytes == group.node_bytes
    assert d.job.checkpoint_bytes == pytest.approx(128 * group.node_bytes)


def test_a_dp_the_user_wrote_must_fill_the_job(tmp_path):
    own = _write(tmp_path, {"extends": "llama3-70b-subset", "parallelism": {"dp": 8},
                            "design": {"job": {"nodes": 128}}})
    with pytest.raises(ConfigError, match="^parallelism.dp: 8 does not fill the design's job: 128 nodes"):
        load_config(own)
    with pytest.raises(ConfigError, match="^parallelism.dp: 16 does not fill"):
        load_config("llama3-70b-subset", ["design.job.nodes=128", "parallelism.dp=16"])
    assert load_config("llama3-70b-subset", ["design.job.nodes=128", "parallelism.dp=128"]).parallelism.dp == 128


def test_a_job_that_no_layout_fills_is_refused():
    with pytest.raises(ConfigError, match="^design.job.nodes: 3 nodes x 2 accelerators = 6 ranks is not a "
                                          "multiple of tp x pp = 8"):
        load_config("llama3-70b-subset", ["design.job.nodes=3", "design.job.accelerators_per_node=2"])


def test_nodes_that_hold_different_bytes_are_grouped():
    """ZeRO-0, TP8 DP2 on 2 nodes of 8: only data-parallel rank 0's node holds the state."""
    cfg = load_config("llama3-8b", ["parallelism={tp: 8, pp: 1, dp: 2, zero_stage: 0}", "design.job.nodes=2"])
    d = resolve(cfg)
    assert [(g.nodes, g.node_bytes > 0) for g in d.job.groups] == [(1, False), (1, True)]
    assert d.job.moving_nodes == 1


# --------------------------------------------------------------------------- links

@pytest.mark.parametrize("k", [1, 4, 8, 64, 2048])
def test_k_nodes_share_the_aggregate_until_the_nic_binds(k):
    a, nic, b = 400 * GB, 50 * GB, 98.5 * GIB
    assert max(fair_finish(LinkLimits(a, nic), [(k, b)])) == pytest.approx(max(b * k / a, b / nic))


def test_nodes_with_fewer_bytes_finish_first_and_leave_their_share():
    """Max-min fair: 10 GB and 5 GB over 1 GB/s: both at 0.5 GB/s for 10 s, then the larger alone."""
    assert fair_finish(LinkLimits(1 * GB), [(1, 10 * GB), (1, 5 * GB)]) == pytest.approx([15.0, 10.0])
    assert fair_finish(LinkLimits(1 * GB), [(3, 0), (1, 5 * GB)]) == pytest.approx([0.0, 5.0])


def _nas_only(tmp_path, *, zero0: bool) -> str:
    par = {"tp": 8, "pp": 1, "dp": 2, "zero_stage": 0 if zero0 else 3}
    return _write(tmp_path, {"extends": "llama3-8b", "parallelism": par, "tiers": _tiers(tmp_path, local=False),
                             "design": {"job": {"nodes": 2}, "global": {"write": "100MB/s"}}})


def test_a_node_alone_with_bytes_gets_the_whole_store(tmp_path):
    """Reproduction 2: under ZeRO-0 only node 0 writes, so it gets the NAS's 100 MB/s, not half."""
    cfg = load_config(_nas_only(tmp_path, zero0=True))
    assert run_emulation(cfg, "global").write_gib_s * GIB == pytest.approx(100e6)
    even = load_config(_nas_only(tmp_path, zero0=False))
    assert run_emulation(even, "global").write_gib_s * GIB == pytest.approx(50e6)


def test_the_emulated_node_is_paced_at_its_fair_finish(tmp_path):
    """k alike nodes: each at A / k until the NIC binds (B*k/A, or B/NIC; the NVMe the drain reads is
    faster than both here)."""
    for nodes, want in ((64, 4 * GB / 64), (4, 50 * GB)):
        cfg = load_config(_write(tmp_path, {"extends": "llama3-8b", "tiers": _tiers(tmp_path),
                                            "design": {"job": {"nodes": nodes}, "node": {"nic": "400Gb/s",
                                                       "local": {"write": "7GB/s", "read": "60GB/s"}},
                                                       "global": {"write": "4GB/s" if nodes == 64 else "400GB/s"}}}))
        assert run_emulation(cfg, "global").write_gib_s * GIB == pytest.approx(want)


def test_one_device_one_default(tmp_path):
    """Reproduction 6: the same NVMe described by design: or by emulate: knobs shares reads and writes."""
    knobs = load_config(_write(tmp_path, {"extends": "llama3-8b", "tiers": {
        "local": {"backend": "dir", "path": str(tmp_path / "n"), "emulate": {"write_gib_s": 6, "read_gib_s": 6}},
        "global": {"backend": "dir", "path": str(tmp_path / "g")}}}, "knobs.yaml"))
    design = load_config(_write(tmp_path, {"extends": "llama3-8b", "tiers": _tiers(tmp_path),
                                           "design": {"node": {"local": {"write": "6GiB/s", "read": "6GiB/s"}}}}))
    assert knobs.tiers.local.emulate.duplex is False
    assert run_emulation(design, "local").duplex is False
    assert resolve(knobs).link("local").duplex == resolve(design).link("local").duplex is False


# --------------------------------------------------------------------------- failures and recovery

def _global_only(tmp_path, nodes=16, **design):
    return load_config(_write(tmp_path, {"extends": "llama3-8b", "tiers": _tiers(tmp_path, local=False),
                                         "design": {"job": {"nodes": nodes}, "node": {"nic": "400Gb/s"},
                                                    "global": {"write": "20Gb/s", "read": "20Gb/s"}, **design}}))


def test_a_lost_node_reads_with_everyone_when_no_one_holds_a_nearer_copy(tmp_path):
    """Reproduction 3: with only a global tier every node restores from it after a node loss (a storm),
    so the node loss's restore is the process crash's, never the lone reader's shorter one."""
    d = resolve(_global_only(tmp_path))
    storm = restore_seconds(d, "global")
    assert class_restore_seconds(d, "node") == pytest.approx(storm)
    assert class_restore_seconds(d, "process") == pytest.approx(storm)
    assert restore_seconds(d, "global", alone=True) < storm


def test_a_lost_node_reads_alone_while_the_others_read_their_nvme(tmp_path):
    cfg = load_config(_write(tmp_path, {"extends": "llama3-8b", "tiers": _tiers(tmp_path), "design": {
        "job": {"nodes": 16}, "node": {"local": {"write": "7GB/s", "read": "7GB/s"}},
        "global": {"write": "20GB/s"}}}))
    d = resolve(cfg)
    alone, local = restore_seconds(d, "global", alone=True), restore_seconds(d, "local")
    assert class_restore_seconds(d, "node") == pytest.approx(max(alone, local))
    assert class_restore_seconds(d, "process") == pytest.approx(local)


def test_each_class_has_its_own_recovery(tmp_path):
    """Reproduction 8: detection and restart or replacement differ by class, from the design."""
    d = resolve(_global_only(tmp_path, failures={"process": {"detect": "10s", "restart": "20s"},
                                                 "node": {"detect": "1m", "restart": "10m"}}))
    storm = restore_seconds(d, "global")
    assert recovery_seconds(d, "process") == pytest.approx(30 + storm)
    assert recovery_seconds(d, "node") == pytest.approx(660 + storm)
    assert recovery_seconds(d, "group") == pytest.approx(60 + 840 + storm)  # the documented default


def test_one_reader_per_data_parallel_group_reads_a_replica_not_all_of_them(tmp_path):
    """Reproduction 7: under ZeRO-0 every replica reads its leader's files; one reader per group reads
    one replica and broadcasts it over the NIC."""
    base = {"extends": "llama3-8b", "parallelism": {"tp": 8, "pp": 1, "dp": 4, "zero_stage": 0},
            "tiers": _tiers(tmp_path, local=False), "design": {"job": {"nodes": 4}, "global": {"write": "4GB/s"}}}
    d_all = resolve(load_config(_write(tmp_path, base)))
    d_one = resolve(load_config(_write(tmp_path, {**base, "checkpoint": {"restore_readers": "one_per_dp_group"}},
                                       "one.yaml")))
    node = d_all.job.heaviest.node_bytes
    assert restore_seconds(d_all, "global") == pytest.approx(4 * node / 4e9 + 2 * d_all.link("global").latency_s)
    assert restore_seconds(d_one, "global") == pytest.approx(node / 4e9 + node / 50e9
                                                             + 2 * d_one.link("global").latency_s)


def test_failure_rates_split_by_class(tmp_path):
    d = resolve(_global_only(tmp_path, failures={"mttf_hours": 40000, "node_loss_fraction": 0.5,
                                                 "group_loss_fraction": 0.1}))
    total = 16 * 8 / (40000 * 3600)
    assert d.failures.rates() == pytest.approx({"process": 0.4 * total, "node": 0.5 * total, "group": 0.1 * total})


# --------------------------------------------------------------------------- the snapshot and one checkpoint

def test_the_snapshot_is_bytes_over_the_copy_rate_plus_a_fixed_cost_and_one_per_tensor(tmp_path):
    d = resolve(_global_only(tmp_path, node={"nic": "400Gb/s", "snapshot": {"rate": "10GB/s", "fixed_ms": 500,
                                                                            "per_tensor_us": 20}}))
    biggest = max(g.file_bytes for g in d.job.groups)
    assert d.snapshot.tensors == 195 * 4  # Llama-3 8B: 6 tensors a layer and 3 more, each with its master, 2 moments
    assert snapshot_seconds(d) == pytest.approx(0.5 + 195 * 4 * 20e-6 + biggest / 10e9)
    assert checkpoint_costs(d).async_stall_s == pytest.approx(snapshot_seconds(d))


def _nvme_and_store(tmp_path, *, nodes: int, nvme_read: str, store: str):
    """The 8B job on ``nodes`` nodes: a 7 GB/s NVMe (reads at ``nvme_read``), a 400 Gb/s NIC, global
    storage of ``store``; drains verify sizes only (no read-back)."""
    return load_config(_write(tmp_path, {"extends": "llama3-8b", "tiers": _tiers(tmp_path),
                                         "drain": {"verify": "size"}, "design": {
        "job": {"nodes": nodes}, "node": {"local": {"write": "7GB/s", "read": nvme_read}, "nic": "400Gb/s"},
        "global": {"write": store}}}))


def test_a_sync_checkpoint_is_the_snapshot_then_each_copy_in_turn(tmp_path):
    d = resolve(_nvme_and_store(tmp_path, nodes=64, nvme_read="7GB/s", store="4GB/s"))
    b = d.job.heaviest.node_bytes
    assert copy_seconds(d, "local") == pytest.approx(b / 7e9)
    assert copy_seconds(d, "global") == pytest.approx(b * 64 / 4e9 + 2 * d.link("global").latency_s)
    c = checkpoint_costs(d)
    assert c.sync_stall_s == pytest.approx(c.snapshot_s + c.copy_s["local"] + c.copy_s["global"]
                                           + d.link("global").latency_s)


def test_a_drain_reads_the_nodes_nvme_so_its_read_rate_caps_the_copy(tmp_path):
    """A node alone with a 400 Gb/s NIC and a 40 GB/s store drains its files from its NVMe: at the NVMe's
    2 GB/s read, not at the store's rate (the emulator's drain reads the NVMe as it writes the store;
    the closed form left that read out: design-memory-nvme-s3's node 0 drained 34 % over it)."""
    cfg = _nvme_and_store(tmp_path, nodes=1, nvme_read="2GB/s", store="40GB/s")
    d = resolve(cfg)
    b = d.job.heaviest.node_bytes
    assert copy_seconds(d, "global") == pytest.approx(b / 2e9 + 2 * d.link("global").latency_s)
    assert run_emulation(cfg, "global").write_gib_s * GIB == pytest.approx(2e9)  # the emulator's pace


def test_written_straight_to_the_store_nothing_is_read_first(tmp_path):
    cfg = load_config(_write(tmp_path, {"extends": "llama3-8b", "tiers": _tiers(tmp_path, local=False),
                                        "design": {"job": {"nodes": 1}, "node": {"nic": "400Gb/s"},
                                                   "global": {"write": "40GB/s"}}}))
    d = resolve(cfg)
    assert copy_seconds(d, "global") == pytest.approx(d.job.heaviest.node_bytes / 40e9 + d.link("global").latency_s)


# --------------------------------------------------------------------------- units

@pytest.mark.parametrize("text,bps", [("400Gb/s", 50e9), ("200Gbps", 25e9), ("100Gbit/s", 12.5e9),
                                      ("2TB/s", 2e12), ("800MiB/s", 800 * 2**20), ("7GB/s", 7e9)])
def test_rates_as_datasheets_write_them(text, bps):
    assert parse_rate(text, "x") == pytest.approx(bps)


@pytest.mark.parametrize("text", ["400", 400, 1e11, "1e11", "400Gb", "fastGB/s", "-1GB/s", "infGB/s"])
def test_a_rate_without_a_unit_is_refused(text):
    with pytest.raises(UserError, match="^--bandwidth: "):
        parse_rate(text, "--bandwidth")


def test_sizes_shows_the_job_and_that_the_emulated_node_is_one_of_its_nodes(capsys):
    import json

    from emulator.cli import main
    assert main(["sizes", "llama3-70b-subset", "--set", "design.job.nodes=128", "--json"]) == 0
    job = json.loads(capsys.readouterr().out)["job"]
    assert job["nodes"] == 128 and job["node_groups"] == [{"nodes": 128, "node_bytes": 7647487744, "ranks": 8}]
    assert job["emulated_node_bytes"] == [7647487744]
    assert main(["sizes", "llama3-70b-subset", "--set", "design.job.nodes=128"]) == 0
    out = capsys.readouterr().out
    assert "the job: 128 node(s) x 8 accelerators (1,024 ranks)" in out and "8 ranks write 7.65 GB" in out


def test_a_run_that_is_the_whole_job_has_the_jobs_nodes(tmp_path):
    """No design.job: 4 ranks of a 4-rank layout run on 2 nodes are a job of 2 nodes of 2, not one
    node of 8 (fewer nodes than the run emulates)."""
    from emulator.design.job import job_of
    cfg = load_config(_write(tmp_path, {"extends": "llama3-8b", "parallelism": {"dp": 4}}))
    assert cfg.parallelism.active_ranks == cfg.parallelism.world_size == 4
    job = job_of(cfg, emulated_nodes=2)
    assert (job.nodes, job.accelerators_per_node, len(job.emulated)) == (2, 2, 2)
    assert job_of(cfg).nodes == 1
