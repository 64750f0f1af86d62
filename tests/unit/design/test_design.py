"""A design described once, in an architect's terms (``design:``), read the same by ``run`` and
``simulate``: vendors' units, each node's share of a shared global tier behind its NIC, bad input."""
from __future__ import annotations


import pytest
import yaml
from emu import refused
from emu import simulate_json as _simulate

from emulator.config import load_config
from emulator.design import resolve, run_emulation
from emulator.design.links import node_share
from emulator.errors import UserError
from emulator.units import GIB, parse_rate, parse_size

GB = 1e9


def _design_yaml(tmp_path, *, extends="llama3-8b", nodes=64, nic="400Gb/s", write="4GB/s", extra=None) -> str:
    cfg = {"extends": extends,
           "tiers": {"local": {"backend": "dir", "path": str(tmp_path / "nvme")},
                     "global": {"backend": "dir", "path": str(tmp_path / "pfs")}},
           "design": {"job": {"nodes": nodes},
                      "node": {"local": {"write": "7GB/s", "read": "60GB/s"}, "nic": nic},
                      "global": {"write": write}}}
    for k, v in (extra or {}).items():
        cfg[k] = v
    path = tmp_path / "design.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


@pytest.mark.parametrize("text,bps", [("7GB/s", 7e9), ("6.5GiB/s", 6.5 * GIB), ("400Gb/s", 50e9),
                                      ("400Gbit/s", 50e9), ("500 MB/s", 5e8), ("1.5TB/s", 1.5e12)])
def test_rates_in_vendors_units(text, bps):
    assert parse_rate(text, "k") == pytest.approx(bps)


@pytest.mark.parametrize("text,n", [("3.84TB", 3_840_000_000_000), ("512GiB", 512 * GIB), ("7.68TiB", round(7.68 * 2**40))])
def test_sizes_in_vendors_units(text, n):
    assert parse_size(text, "k") == n


@pytest.mark.parametrize("text", ["7", "400", "-7GB/s", "0GB/s", "7GB", "7XB/s", "fast"])
def test_a_rate_without_a_unit_or_positive_value_is_refused(text):
    with pytest.raises(UserError, match="^design.x: "):
        parse_rate(text, "design.x")


def test_k_nodes_share_the_aggregate_until_the_nic_binds():
    """k nodes that each move B bytes at once, sharing A: B*k/A, unless B/NIC is longer."""
    a, nic, b = 400 * GB, 50 * GB, 98.5 * GIB
    for k in (1, 4, 8, 64, 2048):
        assert b / node_share(a, nic, k) == pytest.approx(max(b * k / a, b / nic))
    assert node_share(a, nic, 2048) == pytest.approx(a / 2048)
    assert node_share(a, nic, 4) == nic


def test_the_design_sets_the_tiers_emulation(tmp_path):
    cfg = load_config(_design_yaml(tmp_path, nodes=2048, nic="50GB/s", write="400GB/s"))
    g, lo = run_emulation(cfg, "global"), run_emulation(cfg, "local")
    assert g.shared_by == "node" and g.write_gib_s * GIB == pytest.approx(400 * GB / 2048)
    assert g.read_gib_s == g.write_gib_s  # read defaults to the write rate
    assert lo.shared_by == "node" and lo.write_gib_s * GIB == pytest.approx(7 * GB)
    # a config written back and read again (tune's runs, results.json) means the same
    again = cfg.with_overrides("checkpoint.saves=2")
    assert run_emulation(again, "global") == g and again.design == cfg.design


def test_a_design_of_few_nodes_is_nic_bound(tmp_path):
    cfg = load_config(_design_yaml(tmp_path, nodes=4, nic="400Gb/s", write="400GB/s"))
    assert run_emulation(cfg, "global").write_gib_s * GIB == pytest.approx(50 * GB)


def test_the_nic_is_never_silently_unlimited(tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump({"extends": "llama3-8b", "design": {"job": {"nodes": 2},
                                                                       "global": {"write": "400GB/s"}}}))
    cfg = load_config(str(path))
    assert not cfg.design.nic_stated and cfg.design.nic_bps == pytest.approx(50 * GB)  # 400 Gb/s assumed
    assert run_emulation(cfg, "global").write_gib_s * GIB == pytest.approx(50 * GB)


@pytest.mark.parametrize("nodes,nic,write", [(64, "400Gb/s", "4GB/s"),      # the aggregate binds
                                             (4, "400Gb/s", "400GB/s")])  # the NIC binds
def test_simulated_drain_is_the_analytic_answer(tmp_path, nodes, nic, write):
    """Every node drains its B bytes at once: max(B*k/A, B/NIC), the simulator's and the run's share
    (the transfer alone: drain.verify size, no checksum read-back)."""
    cfg = _design_yaml(tmp_path, nodes=nodes, nic=nic, write=write, extra={"drain": {"verify": "size"}})
    out = _simulate(cfg, "--out", str(tmp_path / "sim"))
    assert out["nodes"] == nodes  # from design.job.nodes: no --nodes needed
    sync = out["modes"]["sync"]
    node_bytes = sync["peak_backlog_bytes"] / nodes
    a, link = parse_rate(write, "w"), parse_rate(nic, "n")
    expected = max(node_bytes * nodes / a, node_bytes / link)
    assert sync["drain_mean_s"] == pytest.approx(expected, rel=0.05)
    # the emulated node is paced at the same share the simulation gives each node
    emulated = run_emulation(load_config(_design_yaml(tmp_path, nodes=nodes, nic=nic, write=write)), "global")
    assert node_bytes / (emulated.write_gib_s * GIB) == pytest.approx(expected, rel=1e-6)


BAD = [
    ({"design.global.write": "400"}, "design.global.write: 400 has no unit: a bare number is ambiguous"),
    ({"design.global.write": "-4GB/s"}, "design.global.write: '-4GB/s' must be a finite rate > 0"),
    ({"design.node.nic": "4XB/s"}, "design.node.nic: '4XB/s': unknown rate unit"),
    ({"design.node.local.capacity": "3.84"}, "design.node.local.capacity: 3.84 has no unit"),
    ({"design.job.nodes": "0"}, "design.job.nodes: must be a whole number >= 1"),
    ({"tiers.global.emulate.write_gib_s": "3"}, "tiers.global.emulate: its rates are set by design.global"),
]


@pytest.mark.parametrize("overrides,message", BAD)
def test_bad_design_is_one_line_exit_2_nothing_written(tmp_path, capsys, overrides, message):
    out = tmp_path / "out"
    sets = [a for k, v in overrides.items() for a in ("--set", f"{k}={v}")]
    line = refused(capsys, "run", _design_yaml(tmp_path), *sets, "--out", out, "--quiet")
    assert line.startswith("ckpt-emu: error: ") and message in line, line
    assert not out.exists() and not (tmp_path / "nvme").exists() and not (tmp_path / "pfs").exists()


def test_fewer_modelled_nodes_than_emulated_ones_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    line = refused(capsys, "run", _design_yaml(tmp_path, nodes=1), "--nnodes", "2", "--rdzv-endpoint",
                   "127.0.0.1:29999", "--out", out, "--quiet")
    assert line == ("ckpt-emu: error: design.job.nodes: 1 modelled node(s), fewer than the 2 "
                                   "this run emulates (--nnodes)")
    assert not out.exists()


def test_one_node_never_takes_the_whole_global_tier(tmp_path):
    """Without a NIC anywhere in the config or flags, a 405B node restoring alone from an 800 GiB/s
    file system took it all (29.9 GiB in 37 ms). A 400 Gb/s NIC is assumed, and said."""
    from emulator.design.costs import restore_seconds
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({
        "extends": "llama3-405b",
        "tiers": {"local": {"backend": "dir", "path": str(tmp_path / "l"),
                            "emulate": {"write_gib_s": 6, "read_gib_s": 7, "shared_by": "node"}},
                  "global": {"backend": "dir", "path": str(tmp_path / "g"),
                             "emulate": {"write_gib_s": 400, "read_gib_s": 800, "shared_by": "job"}}}}))
    d = resolve(load_config(str(path)), nodes=2048)
    largest = d.job.heaviest.node_bytes
    assert restore_seconds(d, "global", alone=True) >= largest / (50 * GB)
    assert d.link("global").write.node_bps == pytest.approx(50 * GB)
    assert d.link("global").drain.node_bps == pytest.approx(7 * GIB)  # a drain reads the 7 GiB/s NVMe
    assert any("assumed 400Gb/s per node" in n for n in d.notes), d.notes
