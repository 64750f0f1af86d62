"""Issue 32's reproductions for `ckpt-emu plan`, through the command alone (each fails on the code before the
one planner: it read `400Gb/s` as 400 GB/s, took the async stall as 10 % of the sync stall, and refused
`plan FILE --accelerators N`). The planner's own checks: tests/unit/planner/test_planner.py, tests/unit/planner/test_plan_design.py."""
from __future__ import annotations

import json

import pytest
import yaml

from emulator.cli import main
from emulator.design.snapshot import DEFAULTS

GIB = 1 << 30
LLAMA70B = {  # the 70B design: a 200 Gb/s NIC, a 6 GB/s NVMe, a 100 GB/s object store
    "extends": "llama3-70b-subset", "training": {"step_seconds": 10.0}, "checkpoint": {"interval_steps": 25},
    "design": {"job": {"nodes": 16}, "node": {"local": {"write": "6GB/s", "read": "6GB/s"}, "nic": "200Gb/s"},
               "global": {"write": "100GB/s", "read": "100GB/s", "latency_ms": 1}}}


def cli(capsys, *argv):
    rc = main(["plan", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def test_a_bandwidth_in_bits_is_a_bit_rate_and_is_printed_as_one(capsys):
    """Reproduction 5: `--bandwidth 400Gb/s` is 50 GB/s, the rates in the report are in bits as it was
    written, and a bare number is refused with one line."""
    rc, out, _ = cli(capsys, "--accelerators", "16000", "--size", "5292GiB", "--bandwidth", "400Gb/s", "--json")
    d = json.loads(out)
    assert rc == 0 and d["tiers"]["global"]["rate_bytes_per_s"] == pytest.approx(50e9, rel=1e-9)
    assert d["costs"]["copy_s"]["global"] == pytest.approx(5292 * GIB / 50e9, rel=1e-6)
    rc, out, _ = cli(capsys, "--accelerators", "16000", "--size", "5292GiB", "--bandwidth", "400Gb/s")
    assert rc == 0 and "400.0 Gb/s for the job" in out and "GB/s for the job" not in out
    rc, out, err = cli(capsys, "--accelerators", "16000", "--size", "1TB", "--bandwidth", "1e11")
    assert rc == 2 and out == "" and err.count("\n") == 1 and "--bandwidth: '1e11'" in err


def test_the_async_stall_is_the_snapshot(capsys):
    """Reproduction 9: the async stall is each accelerator's share over the snapshot rate (5,292 GiB over
    16,000 accelerators at 48 GiB/s: 6.9 ms) plus the fixed part every save pays (140 ms by default),
    not 10 % of the sync stall (1.42 s here)."""
    rc, out, _ = cli(capsys, "--accelerators", "16000", "--size", "5292GiB", "--bandwidth", "400GB/s",
                     "--snapshot-rate", "48GiB/s", "--json")
    c = json.loads(out)["costs"]
    per_accelerator = -(-5292 * GIB // 16000)
    assert rc == 0 and c["async_stall_s"] == pytest.approx(DEFAULTS["fixed_s"] + per_accelerator / (48 * GIB))
    assert c["sync_stall_s"] == pytest.approx(c["async_stall_s"] + 5292 * GIB / 400e9)


def test_plan_file_with_accelerators_plans_that_job(tmp_path, capsys):
    """`plan FILE --accelerators 1024` (before: "plan it with --accelerators"): the file's design on 128
    nodes of 8, its data parallelism what those accelerators give (TP8 DP128), each node 7.1 GiB."""
    path = tmp_path / "l70.yaml"
    path.write_text(yaml.safe_dump(LLAMA70B))
    rc, out, err = cli(capsys, path, "--accelerators", 1024, "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert (d["job"]["nodes"], d["job"]["accelerators"]) == (128, 1024)
    assert d["job"]["heaviest_node_bytes"] / GIB == pytest.approx(7.12, abs=0.01)
    assert d["job"]["checkpoint_bytes"] == pytest.approx(128 * d["job"]["heaviest_node_bytes"])
    # the store's aggregate shared by the 128 nodes (100 GB/s; their 25 GB/s NICs do not bind)
    assert d["costs"]["copy_s"]["global"] >= d["job"]["checkpoint_bytes"] / 100e9
    rc, out, _ = cli(capsys, path, "--accelerators", 1024, "--nodes", 256, "--json")
    assert rc == 0 and json.loads(out)["job"]["nodes"] == 256
