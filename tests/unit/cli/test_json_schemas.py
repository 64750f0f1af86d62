"""Every command's JSON against the schema shipped for it (docs/schemas/), and every figure the text
shows in it: ``plan`` (a napkin, a napkin with a bandwidth, a config's design), ``sizes``,
``simulate``; a run's results.json is checked in tests/unit/results/test_full_size_ratios.py (and the
live runs' in tests/system/metrics/)."""
from __future__ import annotations

import json

import jsonschema
import pytest
from schemas import SCHEMAS, assert_valid

from emulator.cli import main


def _json(capsys, *argv) -> dict:
    assert main(list(map(str, argv))) == 0
    return json.loads(capsys.readouterr().out)


def test_every_shipped_schema_is_a_valid_schema():
    names = sorted(p.name for p in SCHEMAS.glob("*.schema.json"))
    assert names == ["plan.schema.json", "results.schema.json", "simulate.schema.json", "sizes.schema.json"]
    for path in SCHEMAS.glob("*.schema.json"):
        jsonschema.Draft202012Validator.check_schema(json.loads(path.read_text()))


def test_a_napkin_plan_has_in_its_json_what_its_text_says(capsys):
    """24,000 accelerators and a 5 TB checkpoint (the issue's case): at the rule of thumb's 230.4
    checkpoints a day, 1.152e15 bytes a day, a sustained 13.3 GB/s; sync and async bandwidth beside."""
    d = _json(capsys, "plan", "--accelerators", 24000, "--size", "5TB", "--json")
    assert_valid("plan", d)
    needs = d["rule_of_thumb_needs"]
    assert needs["bytes_per_day"] == pytest.approx(5e12 * 230.4)
    assert needs["sustained_bytes_per_s"] == pytest.approx(5e12 * 230.4 / 86400)  # 13.3 GB/s
    assert needs["sync_bytes_per_s"] == pytest.approx(5e12 / 18.75)              # the sync budget, 18.75 s
    assert needs["async_bytes_per_s"] == pytest.approx(5e12 / (0.1 * 375))        # 10 % of 375 s
    assert main(["plan", "--accelerators", "24000", "--size", "5TB"]) == 0
    text = capsys.readouterr().out
    assert "266.7 GB/s" in text and "133.3 GB/s" in text and "a sustained 13.3 GB/s" in text
    # no size: the failure model and the rule of thumb alone
    d = _json(capsys, "plan", "--accelerators", 24000, "--json")
    assert_valid("plan", d)
    assert d["rule_of_thumb_needs"] is None and d["checkpoint_bytes"] is None


def test_a_designs_plan_has_its_sustained_rate_and_its_config_keys(capsys):
    d = _json(capsys, "plan", "--accelerators", 16000, "--size", "llama3-405b", "--bandwidth", "400GB/s", "--json")
    assert_valid("plan", d)
    v = d["global_volume"]
    assert v["sustained_bytes_per_s"] == pytest.approx(v["bytes_per_day"] / 86400)
    assert d["as_config"] is None and d["label"] == "a napkin design"  # no config: no step time
    d = _json(capsys, "plan", "design-nvme-pfs", "--json")
    assert_valid("plan", d)
    keys = d["as_config"]
    assert keys["interval_steps"] == max(1, round(d["recommended"]["base_interval_s"] / keys["step_seconds"]))
    assert main(["plan", "design-nvme-pfs"]) == 0
    assert f"checkpoint.interval_steps: {keys['interval_steps']} " in capsys.readouterr().out


def test_sizes_json_holds_to_its_schema(capsys):
    assert_valid("sizes", _json(capsys, "sizes", "llama3-70b-subset", "--json"))


def test_simulate_json_holds_to_its_schema(capsys, tmp_path):
    d = _json(capsys, "simulate", "design-nvme-pfs", "--days", "0.05", "--json", "--out", tmp_path / "sim")
    assert_valid("simulate", d)


BINARY_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")


def test_a_napkin_in_tb_answers_in_tb_and_pb_only(capsys):
    """The issue's check: asked in TB, the napkin plan says TB and PB, never a binary unit."""
    assert main(["plan", "--accelerators", "24000", "--size", "5TB"]) == 0
    text = capsys.readouterr().out
    assert "5.00 TB" in text and "1.15 PB" in text and not any(u in text for u in BINARY_UNITS)


def test_the_capacity_and_wear_text_is_in_every_json(capsys, tmp_path):
    """What the capacity tables of plan, simulate and sizes print is in their JSON, in one unit family:
    the shipped S3 design is decimal, so no binary unit in its tables or its global volume."""
    from emulator.units import fmt_bytes
    plan = _json(capsys, "plan", "design-memory-nvme-s3", "--json")
    assert_valid("plan", plan)
    sim = _json(capsys, "simulate", "design-memory-nvme-s3", "--interval", "planner", "--days", "1", "--json",
                "--out", tmp_path / "sim")
    assert_valid("simulate", sim)
    sizes = _json(capsys, "sizes", "design-memory-nvme-s3", "--json")
    assert_valid("sizes", sizes)
    assert main(["plan", "design-memory-nvme-s3"]) == 0
    plan_text = capsys.readouterr().out
    assert main(["simulate", "design-memory-nvme-s3", "--interval", "planner", "--days", "1",
                 "--out", str(tmp_path / "sim")]) == 0
    sim_text = capsys.readouterr().out
    assert main(["sizes", "design-memory-nvme-s3"]) == 0
    sizes_text = capsys.readouterr().out
    for text, tiers in ((plan_text, plan["capacity"]), (sim_text, sim["capacity"]["async"]["tiers"]),
                        (sizes_text, sizes["capacity"]["tiers"])):
        table = text[text.lower().index("capacity and wear"):]
        assert not any(u in table.split("Notes")[0].split("notes:")[0] for u in BINARY_UNITS)
        for h in tiers.values():
            row = next(line for line in table.splitlines() if line.strip().startswith(h["name"] + " "))
            assert fmt_bytes(h["held_bytes"], "decimal") in row and fmt_bytes(h["written_bytes_per_day"], "decimal") in row
            assert f"{h['checkpoints_per_day']:,.1f}" in row
            if h["drive_writes_per_day"] is not None:
                assert f"{h['drive_writes_per_day']:,.2f}" in row and f"{h['years_to_endurance']:,.1f}" in row
    v = plan["global_volume"]
    assert f"Global storage: {fmt_bytes(v['bytes_per_day'], 'decimal')} a day" in plan_text
    # one count of checkpoints a day: the volume's, the capacity table's and the S3 cost's
    assert plan["capacity"]["global"]["checkpoints_per_day"] == pytest.approx(v["checkpoints_per_day"])
    assert plan["s3_cost"]["interval_s"] == pytest.approx(86400 / v["checkpoints_per_day"])
    assert f"{fmt_bytes(sim['modes']['async']['global_bytes_per_day'], 'decimal')}" in sim_text
