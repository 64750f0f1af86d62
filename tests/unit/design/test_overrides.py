"""The commands' flags restate only what they name (issue 53, reproductions 1 and 5): applied on the
config's design after the config, as ``--set`` is, and validated the same way
(emulator/design/overrides.py)."""
from __future__ import annotations

import json

import pytest
import yaml

from emulator.cli import main
from emulator.config import load_config
from emulator.design import resolve
from emulator.design.overrides import Overrides

HSDP = ("--set", "parallelism.shard_group=16")
#: one node whose NVMe reads at 2 GB/s: its drain reads its files from there, whatever the NIC
SLOW_READ = {"extends": "default", "design": {"job": {"nodes": 1}, "node": {
    "local": {"write": "7GB/s", "read": "2GB/s"}, "nic": "400Gb/s"},
    "global": {"write": "100GB/s", "read": "100GB/s", "latency_ms": 1}}}


def _json(capsys, *argv) -> dict:
    assert main([*map(str, argv), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_nodes_keep_the_shard_group_and_the_writers(capsys):
    """An HSDP job on 32 nodes: the first replica group's 16 nodes write 1/16 of the checkpoint each
    (57 GiB), as ``sizes`` says; --nodes rebuilt the layout as plain ZeRO-3 (28.5 GiB a node)."""
    sizes = _json(capsys, "sizes", "design-llama70-128-nvme-s3", *HSDP, "--set", "design.job.nodes=32")
    plan = _json(capsys, "plan", "design-llama70-128-nvme-s3", *HSDP, "--nodes", 32)
    assert plan["job"]["nodes"] == 32
    assert plan["job"]["heaviest_node_bytes"] == max(sizes["per_node_bytes"])
    d = resolve(load_config("design-llama70-128-nvme-s3", ["parallelism.shard_group=16",
                                                            "parallelism.writers=every_replica"]), nodes=32)
    assert (d.job.layout.shard_group, d.job.layout.writers, d.job.layout.dp) == (16, "every_replica", 32)


def test_the_designs_own_nic_changes_nothing(tmp_path, capsys):
    """--nic equal to the design's NIC dropped the cap of the NVMe's read on the drain (56.5 s became 2.5 s)."""
    path = tmp_path / "slow-read.yaml"
    path.write_text(yaml.safe_dump(SLOW_READ))
    plain = _json(capsys, "plan", path)
    same = _json(capsys, "plan", path, "--nic", "400Gb/s")
    assert same["costs"]["copy_s"] == plain["costs"]["copy_s"]
    assert plain["costs"]["copy_s"]["global"] == pytest.approx(105e9 / 2e9, rel=0.1)  # the NVMe's read binds


def test_a_flag_and_the_same_set_give_one_design():
    """--nic 200Gb/s, --global-bandwidth and --nodes are design.node.nic, design.global.write and
    design.job.nodes given by --set: the same links, job and failures."""
    cfg = load_config("design-llama70-128-nvme-s3")
    flags = resolve(cfg, overrides=Overrides(nic="200Gb/s", global_write="50GB/s", nodes=64, mttf_hours=20_000))
    sets = resolve(load_config("design-llama70-128-nvme-s3", [
        "design.node.nic=200Gb/s", "design.global.write=50GB/s", "design.global.read=100GB/s",
        "design.job.nodes=64", "design.failures.mttf_hours=20000"]))
    assert flags.links == sets.links and flags.job == sets.job and flags.failures == sets.failures


@pytest.mark.parametrize("command", ["plan", "simulate"])
def test_loss_fractions_above_one_are_one_line_exit_2(command, capsys, tmp_path):
    """The design's group_loss_fraction plus --node-loss-fraction above 1: plan failed with an internal
    error (exit 3) and simulate ran with a negative process-crash rate (exit 0)."""
    extra = ["--days", "1", "--out", str(tmp_path / "sim")] if command == "simulate" else []
    rc = main([command, "default", "--set", "design.failures.group_loss_fraction=0.3",
               "--node-loss-fraction", "0.8", *extra])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.count("\n") == 1, err
    assert "--node-loss-fraction" in err and "group_loss_fraction" in err and "above 1" in err
    assert not (tmp_path / "sim").exists()
