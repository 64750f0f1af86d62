"""Capacity and wear as every engine's answer (emulator/design/wear.py): per tier what it holds at once
(its keep and the checkpoint in flight) against its capacity, what it is written a day, the NVMe's
drive writes a day and the years to its endurance rating; a tier too small flagged the same way in
``plan``, ``simulate`` and ``sizes``; and a planner whose recommendation meets its bounds."""
from __future__ import annotations

import json

import pytest

from emulator.cli import main

DAY = 86400.0


def _out(capsys, *argv) -> str:
    assert main([*map(str, argv)]) == 0
    return capsys.readouterr().out


def _nvme(capsys, capacity: str, keep: int = 2, *more) -> tuple[dict, str]:
    args = ("design-nvme-pfs", "--set", f"design.node.local.capacity={capacity}", "--set", f"tiers.local.keep={keep}",
            *more)
    return json.loads(_out(capsys, "plan", *args, "--json")), _out(capsys, "plan", *args)


def test_the_nvme_holds_its_keep_and_wears_at_the_closed_form(capsys):
    d, text = _nvme(capsys, "3.84TB")
    local, node = d["capacity"]["local"], d["job"]["heaviest_node_bytes"]
    assert local["keep"] == 2 and local["checkpoints"] == 3 and local["held_bytes"] == pytest.approx(3 * node)
    assert local["capacity_bytes"] == 3.84e12 and local["over_capacity"] is False
    # checkpoints a day as the global volume counts them: one a period while the job runs
    per_day = d["global_volume"]["checkpoints_per_day"] * d["recommended"]["every"]["global"] \
        / d["recommended"]["every"]["local"]
    assert local["checkpoints_per_day"] == pytest.approx(per_day)
    assert local["written_bytes_per_day"] == pytest.approx(node * per_day)
    assert local["drive_writes_per_day"] == pytest.approx(node * per_day / 3.84e12)
    # 1 DWPD over 5 years by default: the years until 3.84 TB x 365 x 5 are written
    assert local["years_to_endurance"] == pytest.approx(3.84e12 * 365 * 5 / (node * per_day * 365))
    assert d["capacity"]["global"]["drive_writes_per_day"] is None  # wear is the NVMe's
    assert d["capacity"]["global"]["written_bytes_per_day"] == pytest.approx(d["global_volume"]["bytes_per_day"])
    assert "Capacity and wear" in text and f"{local['drive_writes_per_day']:,.2f}" in text
    assert "OVER CAPACITY" not in text and "assumed 1 DWPD over 5 years" in text


def test_a_tier_too_small_for_its_keep_is_flagged_alike_in_every_engine(capsys, tmp_path):
    """3 x 112 GB of the heaviest node do not fit in 200 GB: every engine says so in the same words and,
    as a run does (checkpoint.on_local_full: global), models every checkpoint without the tier."""
    d, text = _nvme(capsys, "200GB", keep=2)
    assert "local" not in d["tiers"] and "global" in d["tiers"]
    said = [n for n in d["notes"] if n.startswith("tiers.local: OVER CAPACITY: a capacity of 186.3 GiB per node "
                                                    "cannot hold the 3 checkpoints it keeps at once (314.1 GiB")]
    assert said and "every checkpoint skips it" in said[0] and said[0] in text
    flag = ["--set", "design.node.local.capacity=200GB", "--set", "tiers.local.keep=2"]
    sim = json.loads(_out(capsys, "simulate", "design-nvme-pfs", *flag, "--days", "0.2", "--json",
                          "--out", tmp_path / "sim"))
    assert all(said[0] in c["flags"] for c in sim["capacity"].values())
    assert said[0] in _out(capsys, "simulate", "design-nvme-pfs", *flag, "--days", "0.2", "--out", tmp_path / "sim")
    sizes = json.loads(_out(capsys, "sizes", "design-nvme-pfs", *flag, "--json"))
    assert said[0] in sizes["capacity"]["flags"]
    assert said[0] in _out(capsys, "sizes", "design-nvme-pfs", *flag)


def test_plan_and_simulate_say_the_same_capacity_and_wear(capsys, tmp_path):
    """The shipped 70B design: what each tier holds is the same figure; what it is written a day agrees
    within the simulation's noise (the simulation counts the checkpoints it took)."""
    plan = json.loads(_out(capsys, "plan", "design-llama70-128-nvme-s3", "--json"))
    sim = json.loads(_out(capsys, "simulate", "design-llama70-128-nvme-s3", "--interval", "planner", "--days", "10",
                          "--json", "--out", tmp_path / "sim"))
    mode = plan["recommended"]["mode"]
    for name, p in plan["capacity"].items():
        s = sim["capacity"][mode]["tiers"][name]
        assert s["held_bytes"] == p["held_bytes"] and s["mean_held_bytes"] == p["mean_held_bytes"]
        assert s["written_bytes_per_day"] == pytest.approx(p["written_bytes_per_day"], rel=0.03), name


def test_sizes_says_capacity_and_wear_at_the_configs_intervals(capsys):
    d = json.loads(_out(capsys, "sizes", "design-memory-nvme-s3", "--json"))
    c = d["capacity"]
    assert c["mode"] == "async" and set(c["tiers"]) == {"memory", "local", "global"}
    local = c["tiers"]["local"]
    # at most one checkpoint a base interval, each tier its every-th; fewer while the job recovers, and
    # where a 107 s copy to S3 stretches the 60 s interval's period
    assert 0.5 < local["checkpoints_per_day"] * c["every"]["local"] * c["base_interval_s"] / DAY <= 1
    assert local["drive_writes_per_day"] == pytest.approx(local["written_bytes_per_day"] / local["capacity_bytes"])
    assert d["job"]["heaviest_node_bytes"] > d["job"]["mean_node_bytes"]
    text = _out(capsys, "sizes", "design-memory-nvme-s3")
    assert "capacity and wear at the config's intervals" in text and "GiB" not in text


def test_the_recommendation_lasts_the_nvmes_rating(capsys):
    """A 400 GB NVMe taking every checkpoint of a short interval wears out in months: the planner
    recommends the best cell whose NVMe lasts its 5 years (1 DWPD: at most 1 drive write a day)."""
    d, text = _nvme(capsys, "400GB", 1)
    local = d["capacity"]["local"]
    assert local["years_to_endurance"] >= 5 and local["drive_writes_per_day"] <= 1.0 + 1e-9
    assert d["recommended"]["broken"] == []
    rated = json.loads(_out(capsys, "plan", "design-nvme-pfs", "--set", "design.node.local.capacity=400GB",
                            "--set", "tiers.local.keep=1", "--nvme-endurance", "3DWPD", "--json"))
    assert rated["capacity"]["local"]["drive_writes_per_day"] <= 3.0 + 1e-9
    assert rated["recommended"]["goodput"] >= d["recommended"]["goodput"]
    assert "assumed 1 DWPD" not in "".join(rated["notes"])


@pytest.mark.parametrize("bad", ["0DWPD", "fast", "-3PB"])
@pytest.mark.parametrize("command", ["plan", "simulate", "sizes"])
def test_a_bad_endurance_rating_is_one_line(capsys, tmp_path, command, bad):
    out = ["--out", str(tmp_path / "sim")] if command == "simulate" else []
    assert main([command, "design-nvme-pfs", "--nvme-endurance", bad, *out]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--nvme-endurance" in err and not (tmp_path / "sim").exists()
