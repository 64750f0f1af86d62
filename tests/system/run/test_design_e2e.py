"""Designs in real runs: one emulated node of a 2048-node job drains in the analytic time; run and simulate
agree on a design.
"""
from __future__ import annotations

import pytest
from emu import run_yaml
from emu import simulate_json as _simulate

from emulator.config import load_config
from emulator.design import resolve
from emulator.design.costs import copy_seconds
from emulator.units import GIB


@pytest.mark.timeout(600)
def test_run_and_simulate_agree_on_a_design(tmp_path):
    """One design, emulated by a real run and simulated as that run: the same checkpoint bytes and
    drain time (the drain: bytes over the node's share, then the checksum read-back of the last
    file copied), and no deadline misses in either. At dilation 4, not the probe's choice: a loaded
    host's probe chose a factor that made the run take 7 minutes (a step is 0.25 s x D here)."""
    cfg = {"extends": "llama3-8b", "parallelism": {"ranks": 2},
           "run": {"scale": 0.0005, "dilation": 4, "out": str(tmp_path / "out")},
           "training": {"step_seconds": 500}, "checkpoint": {"interval_steps": 4, "saves": 3, "loads": 0,
                                                               "modes": ["sync"], "baseline": False},
           "tiers": {"local": {"backend": "dir", "path": str(tmp_path / "nvme")},
                     "global": {"backend": "dir", "path": str(tmp_path / "pfs")}},
           "design": {"job": {"nodes": 1, "accelerators_per_node": 2},
                      "node": {"local": {"write": "2GB/s", "read": "2GB/s"}, "nic": "400Gb/s"},
                      "global": {"write": "0.05GiB/s", "read": "0.1GiB/s"}}}
    path, res = run_yaml(cfg, tmp_path, timeout=500)
    sim = _simulate(str(path), "--as-run", "--set", f"run.dilation={res['dilation']['factor']}",
                    "--out", str(tmp_path / "sim"))  # as it ran: at its dilation
    emulated, simulated = res["modes"]["sync"], sim["modes"]["sync"]
    node_bytes = sum(r["records"][0]["file_bytes"] for r in res["per_rank"])
    assert simulated["peak_backlog_bytes"] == pytest.approx(node_bytes, rel=0.01)
    print(f"drain emulated {emulated['drain_mean_s']:.3f} s, simulated {simulated['drain_mean_s']:.3f} s")
    assert simulated["drain_mean_s"] == pytest.approx(emulated["drain_mean_s"], rel=0.15)
    assert emulated["deadline_misses"] == simulated["deadline_misses"] == 0


@pytest.mark.timeout(600)
def test_one_emulated_node_of_a_2048_node_job_drains_in_the_analytic_time(tmp_path):
    """The issue's design: Llama-3 405B, 2,048 nodes of 8 ranks (TP8 PP32 DP64: node 0, holding data-
    parallel rank 0's weights, 29.9 GiB at full size; most nodes 2.6 GiB), 400 GB/s aggregate, 50 GB/s
    NIC, 7 GB/s NVMe. Node 0 emulated by a real run at scale 0.001: its full-size drain is its fair
    finish among every node draining at once (the lighter ones done first), within 5 % (the transfer
    alone: drain.verify size, as the closed form has no read-back)."""
    scale = 0.001
    cfg = {"extends": "llama3-405b-subset", "run": {"scale": scale, "out": str(tmp_path / "out")},
           "training": {"step_seconds": 10},  # 40 s between checkpoints: the 14 s drain is done first
           "checkpoint": {"interval_steps": 4, "saves": 2, "loads": 0, "modes": ["sync"], "baseline": False},
           "drain": {"verify": "size"},
           "tiers": {"local": {"backend": "dir", "path": str(tmp_path / "nvme")},
                     "global": {"backend": "dir", "path": str(tmp_path / "pfs")}},
           "design": {"job": {"nodes": 2048},
                      "node": {"local": {"write": "7GB/s", "read": "7GB/s"}, "nic": "50GB/s"},
                      "global": {"write": "400GB/s"}}}
    path, res = run_yaml(cfg, tmp_path, timeout=550)
    node_bytes = sum(r["records"][0]["file_bytes"] for r in res["per_rank"])
    design = resolve(load_config(str(path)))
    assert len(res["per_rank"]) == 8 and node_bytes / scale == pytest.approx(design.job.heaviest.node_bytes, rel=0.01)
    assert node_bytes / scale / GIB == pytest.approx(29.9, rel=0.01)
    analytic = copy_seconds(design, "global")
    assert res["modes"]["sync"]["full_size"]["drain_mean_s"] == pytest.approx(analytic, rel=0.05)
