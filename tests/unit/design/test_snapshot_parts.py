"""The snapshot as parts (emulator/design/snapshot.py): fixed, per tensor, bytes at the staging's rate,
DCP's planning by ranks; each named in plan's and simulate's outputs, each default with its source."""
import json
import math

import pytest

from emulator.cli import main
from emulator.config import load_config
from emulator.design import resolve
from emulator.design.costs import checkpoint_costs, snapshot_seconds
from emulator.design.snapshot import DEFAULTS, SOURCES, planning_seconds, staged_bytes, summary

GIB = 1 << 30


def _design(*sets, base="validation/dlrover-gpt-1.5b"):
    return resolve(load_config(base, list(sets)))


def test_the_snapshot_is_its_parts_summed():
    d = _design("design.node.snapshot.staging=pinned", "design.node.snapshot.fixed_ms=50",
                "design.node.snapshot.per_tensor_us=30")
    rank_bytes = staged_bytes(d)
    parts = d.snapshot.parts(rank_bytes)
    assert parts == pytest.approx({"fixed": 0.05, "tensors": 1740 * 30e-6, "bytes": rank_bytes / (48 * GIB)})
    assert snapshot_seconds(d) == pytest.approx(sum(parts.values()))
    assert checkpoint_costs(d).async_stall_s == pytest.approx(snapshot_seconds(d))


@pytest.mark.parametrize("staging,rate", [("pinned", 48 * GIB), ("pageable", 8.8 * GIB), ("fresh", 0.9 * GIB)])
def test_each_staging_has_its_measured_rate_and_a_stated_rate_wins(staging, rate):
    assert _design(f"design.node.snapshot.staging={staging}").snapshot.rate_bps == pytest.approx(rate)
    stated = _design(f"design.node.snapshot.staging={staging}", "design.node.snapshot.rate=20GB/s")
    assert stated.snapshot.rate_bps == 20e9 and stated.sources["snapshot"] == "design"


def test_unstated_parts_take_the_defaults_and_say_where_they_come_from():
    d = _design()
    assert (d.snapshot.fixed_s, d.snapshot.per_tensor_s) == (DEFAULTS["fixed_s"], DEFAULTS["per_tensor_s"]["torch_save"])
    out = summary(resolve(load_config("validation/dlrover-gpt-1.5b")))
    assert out["sources"]["snapshot_fixed_s"] == SOURCES["fixed_s"]
    assert out["sources"]["snapshot_per_tensor_s"] == SOURCES["per_tensor_s"]
    assert out["seconds"] == pytest.approx(sum(out["parts_s"].values()))
    stated = summary(resolve(load_config("validation/dlrover-gpt-1.5b", ["design.node.snapshot.fixed_ms=5"])))
    assert stated["sources"]["snapshot_fixed_s"] == "design" and stated["parts_s"]["fixed"] == pytest.approx(0.005)


def test_dcp_stages_what_a_rank_holds_and_plans_after_the_snapshot():
    """ZeRO-0 on 2 DP ranks, balanced writers: each rank writes about half of what it holds, but DCP
    stages all of it; its planning runs after the snapshot: in the sync stall and the lag, not the
    async stall."""
    torch_save = _design("parallelism.writers=balanced")
    dcp = _design("parallelism.writers=balanced", "checkpoint.engine=dcp")
    assert staged_bytes(dcp) == pytest.approx(2 * staged_bytes(torch_save), rel=0.1)
    assert dcp.snapshot.per_tensor_s == DEFAULTS["per_tensor_s"]["dcp"] and torch_save.snapshot.plan_s == 0
    plan = dcp.snapshot.plan_s
    assert plan == pytest.approx(planning_seconds(16, 1740, 1e-3, 60e-6))
    c = checkpoint_costs(dcp)
    assert c.async_stall_s == pytest.approx(snapshot_seconds(dcp))
    assert c.lag_s["global"] == pytest.approx(checkpoint_costs(torch_save).lag_s["global"] + plan, rel=1e-6)


def test_planning_grows_with_the_ranks_hops_by_their_log_items_linearly():
    one, many = planning_seconds(1, 100, 1e-3, 0.0), planning_seconds(1024, 100, 1e-3, 0.0)
    assert one == 0 and many == pytest.approx(4 * 10 * 1e-3)
    assert planning_seconds(2048, 100, 0.0, 1e-6) == pytest.approx(100 * 2049 * 1e-6)


def test_the_first_save_pins_its_buffers_only_with_pinned_staging():
    pinned, pageable = _design("design.node.snapshot.staging=pinned"), _design()
    b = staged_bytes(pinned)
    assert pinned.snapshot.first_save_s(b) == pytest.approx(b / DEFAULTS["pin_bps"])
    assert pageable.snapshot.first_save_s(b) == 0
    none = _design("design.node.snapshot.staging=pinned", "design.node.snapshot.pin_rate=none")
    assert none.snapshot.pin_bps == math.inf and none.snapshot.first_save_s(b) == 0


def test_as_run_the_parts_take_the_time_factor_and_the_bytes_the_dilation():
    cfg = load_config("validation/dlrover-gpt-1.5b", ["run.dilation=4"])
    full, run = resolve(cfg), resolve(cfg, as_run=True)
    tf = cfg.run.scale * 4
    assert run.snapshot.fixed_s == pytest.approx(full.snapshot.fixed_s * tf)
    assert run.snapshot.per_tensor_s == pytest.approx(full.snapshot.per_tensor_s * tf)
    assert run.snapshot.rate_bps == pytest.approx(full.snapshot.rate_bps / 4)


def test_plan_and_simulate_name_each_part(tmp_path, capsys):
    assert main(["plan", "validation/dlrover-gpt-1.5b", "--json"]) == 0
    snap = json.loads(capsys.readouterr().out)["costs"]["snapshot"]
    assert set(snap["parts_s"]) == {"fixed", "tensors", "bytes"} and "tensors x" in snap["describe"]
    assert main(["plan", "validation/dlrover-gpt-1.5b"]) == 0
    assert "fixed 140 ms + 1,740 tensors x 10 us" in capsys.readouterr().out
    assert main(["simulate", "validation/dcp-llama2-7b-ibm", "--days", "1", "--out", str(tmp_path / "s")]) == 0
    text = capsys.readouterr().out
    assert "snapshot per rank: fixed 140 ms + 585 tensors x 200 us" in text and "DCP's planning after it" in text


@pytest.mark.parametrize("sets,key", [
    (["design.node.snapshot.staging=cached"], "design.node.snapshot.staging: must be pinned, pageable, fresh"),
    (["design.node.snapshot.per_tensor_us=-1"], "design.node.snapshot.per_tensor_us: must be a finite number"),
    (["checkpoint.engine=orbax"], "checkpoint.engine: must be torch_save or dcp"),
])
def test_bad_snapshot_and_engine_input_is_one_line_and_exit_2(sets, key, capsys, tmp_path):
    out = tmp_path / "out"
    args = [a for s in sets for a in ("--set", s)]
    assert main(["plan", "validation/dlrover-gpt-1.5b", *args]) == 2
    assert main(["run", "validation/dlrover-gpt-1.5b", "--out", str(out), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("ckpt-emu: error: ") and key in line for line in err)
    assert not out.exists()


def test_dcp_with_the_mlperf_protocol_is_refused(capsys, tmp_path):
    out = tmp_path / "out"
    assert main(["run", "mlperf-llama3-8b", "--set", "checkpoint.engine=dcp", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "checkpoint.engine: checkpoint.protocol mlperf writes DLIO's" in err[0]
    assert not out.exists()


def test_a_napkin_design_pays_the_snapshots_fixed_part_too():
    """A napkin knows no tensors, but its checkpoint still has the fixed part every save pays: without
    it the napkin's async stall was the bytes alone (7 ms where a config's is 150 ms or more)."""
    from emulator.design.napkin import napkin_design
    d = napkin_design(1024, 10 ** 12, 100e9)
    assert d.snapshot.fixed_s == DEFAULTS["fixed_s"] and d.sources["snapshot_fixed_s"] == "default"
    assert d.snapshot.seconds(10 ** 12 / 1024) > DEFAULTS["fixed_s"]
