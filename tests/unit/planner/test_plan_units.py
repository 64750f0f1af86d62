"""One unit family per answer: a plan asked in decimal units answers in them (TB, PB, GB/s), one
asked in binary units in those; "per node" is the mean node, the heaviest named beside it."""
from __future__ import annotations

import json

from emulator.cli import main


def _plan(capsys, *argv) -> str:
    assert main(["plan", *map(str, argv)]) == 0
    return capsys.readouterr().out


def test_a_plan_asked_in_tb_answers_in_tb_and_pb(capsys):
    out = _plan(capsys, "--accelerators", 24000, "--size", "5TB")
    assert "iB" not in out, out
    assert "checkpoint 5.00 TB" in out and "1.15 PB" in out and "a sustained 13.3 GB/s" in out
    out = _plan(capsys, "--accelerators", 100000, "--size", "15TB")
    assert "iB" not in out and "14.4 PB" in out, out  # 15 TB x 960 a day (was 12.8 PiB)


def test_a_plan_asked_in_tib_answers_in_tib(capsys):
    out = _plan(capsys, "--accelerators", 24000, "--size", "4.5TiB")
    assert "4,608.0 GiB" in out and "TiB" in out and "GiB/s" in out
    assert " TB" not in out and " GB/s" not in out, out


def test_a_designs_plan_speaks_its_global_storages_family(capsys):
    """A design whose global storage is in GB/s: its plan's sizes are decimal (its header, its volume a day)."""
    out = _plan(capsys, "--accelerators", 16000, "--size", "2TB", "--bandwidth", "400GB/s")
    head, volume = out.splitlines()[0], next(line for line in out.splitlines() if line.startswith("Global storage"))
    assert "iB" not in head + volume and " TB" in head and " PB" in volume, (head, volume)


def test_per_node_is_the_mean_with_the_heaviest_beside(capsys):
    """One replica writes (ZeRO-0, one_replica): its nodes hold the checkpoint, the others nothing;
    "per node" is the mean, the heaviest is named beside it."""
    args = ("design-llama70-128-nvme-s3", "--accelerators", 4096, "--set", "parallelism.writers=one_replica",
            "--set", "parallelism.zero_stage=0")
    job = json.loads(_plan(capsys, *args, "--json"))["job"]
    assert job["mean_node_bytes"] == job["checkpoint_bytes"] / job["nodes"] < job["heaviest_node_bytes"]
    head = _plan(capsys, *args).splitlines()[0]
    assert "1.91 GB per node on average, the heaviest" in head, head
    head = _plan(capsys, "design-llama70-128-nvme-s3", "--accelerators", 4096).splitlines()[0]
    assert "(1.91 GB per node)" in head, head  # every node alike
