"""`ckpt-emu plan`: failure model, optimal intervals, goodput, bandwidth, and the command itself.

Pure math and one in-process CLI per test (plus one real subprocess); the whole file runs in seconds.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from emulator import planner
from emulator.cli import main
from emulator.cli.plan import parse_bandwidth, parse_bytes, plot_figure, resolve_size
from emulator.errors import ConfigError

GIB = 2 ** 30
ROOT = Path(__file__).resolve().parent.parent


def near(got, want, rel=0.03):
    """Within a few percent (3% unless told): how the published figures are quoted."""
    return abs(got - want) <= rel * abs(want)


def napkin(n, **kw) -> planner.Plan:
    return planner.plan(planner.PlanInputs(accelerators=n, **kw))


def cli(capsys, *argv):
    rc = main(["plan", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


# --------------------------------------------------------------------------- published figures

def test_16000_accelerators_mlperf_figures():
    p = napkin(16_000)
    assert near(p.checkpoints_per_day, 155)               # 153.6
    assert near(p.rule_of_thumb_interval_s / 60, 9.3)     # 9.375 min
    assert near(p.sync_budget_s, 28)                      # 28.1 s
    # by hand: 50,000 h / 16,000 = 3.125 h; / 20 = 9.375 min; 1,440 min / 9.375 = 153.6; 5% of 562.5 s = 28.125 s
    assert p.cluster_mttf_s == pytest.approx(3.125 * 3600)
    assert p.rule_of_thumb_interval_s == pytest.approx(562.5)
    assert p.checkpoints_per_day == pytest.approx(153.6)
    assert p.sync_budget_s == pytest.approx(28.125)


def test_100000_accelerators_mlperf_figures():
    p = napkin(100_000)
    assert near(p.checkpoints_per_day, 967)               # 960
    assert near(p.rule_of_thumb_interval_s / 60, 1.5)     # 1.5 min
    assert near(p.sync_budget_s, 4.4)                     # 4.5 s (2.3%)


def test_24000_accelerators_cluster_mttf():
    assert near(napkin(24_000).cluster_mttf_s / 60, 124)  # 125 min


def test_llama3_failure_rate_reproduced():
    """Meta: 419 unexpected interruptions in 54 days on 16,384 GPUs."""
    p = napkin(16_384)
    assert near(p.failures_per_day, 419 / 54)             # 7.86 vs 7.76 a day
    assert p.failures_per_day == pytest.approx(24 * 16_384 / 50_000)


def test_failures_scale_with_accelerators():
    one, many = napkin(1_000), napkin(8_000)
    assert many.failures_per_day == pytest.approx(8 * one.failures_per_day)
    assert many.cluster_mttf_s == pytest.approx(one.cluster_mttf_s / 8)


# --------------------------------------------------------------------------- Young and Daly

def test_young_by_hand():
    # sqrt(2 * 72 * 3600) = sqrt(518,400) = 720
    assert planner.young_interval(72, 3600) == pytest.approx(720)
    # sqrt(2 * 2 * 10,000) = sqrt(40,000) = 200
    assert planner.young_interval(2, 10_000) == pytest.approx(200)


def test_daly_by_hand():
    # C = 72, M = 3600: C/2M = 0.01, sqrt = 0.1, sqrt(2CM) = 720
    # 720 * (1 + 0.1/3 + 0.01/9) - 72 = 720 + 24 + 0.8 - 72 = 672.8
    assert planner.daly_interval(72, 3600) == pytest.approx(672.8)
    # C = 2, M = 10,000: C/2M = 1e-4, sqrt = 0.01, sqrt(2CM) = 200
    # 200 * (1 + 0.01/3 + 1e-4/9) - 2 = 200 + 2/3 + 1/450 - 2 = 198.66889
    assert planner.daly_interval(2, 10_000) == pytest.approx(200 + 2 / 3 + 1 / 450 - 2)


def test_daly_large_cost_branch_returns_mttf():
    assert planner.daly_interval(100, 50) == 50          # C = 2M exactly
    assert planner.daly_interval(1_000, 50) == 50        # C > 2M
    assert planner.daly_interval(99.9, 50) != 50         # just below: the formula


def test_plan_uses_young_and_daly_on_the_sync_cost():
    # 16,000 accelerators, no size: C = the time budget, 28.125 s; M = 11,250 s
    p = napkin(16_000)
    assert p.young_interval_s == pytest.approx(math.sqrt(2 * 28.125 * 11_250))   # 795.5 s
    x = 28.125 / (2 * 11_250)
    assert p.daly_interval_s == pytest.approx(
        math.sqrt(2 * 28.125 * 11_250) * (1 + math.sqrt(x) / 3 + x / 9) - 28.125)


@pytest.mark.parametrize("fn", [planner.young_interval, planner.daly_interval])
def test_interval_formulas_reject_non_positive(fn):
    with pytest.raises(ValueError):
        fn(0, 100)
    with pytest.raises(ValueError):
        fn(10, -1)


# --------------------------------------------------------------------------- goodput

def test_goodput_by_hand():
    # sync, T = 600, C = 30, M = 10,800, R = 0: (1 - 30/600)(1 - 300/10,800) = 0.95 * 0.972222
    assert planner.goodput(600, 30, 10_800) == pytest.approx(0.95 * (1 - 300 / 10_800))
    # restart 600 s adds to the loss per failure: (1 - 30/600)(1 - (600 + 300)/10,800)
    assert planner.goodput(600, 30, 10_800, 600) == pytest.approx(0.95 * (1 - 900 / 10_800))
    # async, stall 3, drain 30: no wait; lost = T/2 + D = 330 s per failure
    assert planner.goodput(600, 3, 10_800, 0, 30) == pytest.approx(597 / 600 * (1 - 330 / 10_800))
    # async, interval 20 < stall + drain 33: waits 13 s, period 33, lost = 16.5 + 30
    assert planner.goodput(20, 3, 10_800, 0, 30) == pytest.approx(17 / 33 * (1 - 46.5 / 10_800))


def test_goodput_falls_as_stall_grows_at_fixed_interval():
    for drain in (0.0, 30.0):
        gs = [planner.goodput(600, s, 10_800, 600, drain) for s in (0.1, 1, 5, 30, 100, 300)]
        assert all(a > b for a, b in zip(gs, gs[1:])), gs


def test_goodput_falls_as_mttf_shrinks():
    for drain in (0.0, 30.0):
        gs = [planner.goodput(600, 10, m, 600, drain) for m in (1e6, 1e5, 3e4, 1e4, 5e3)]
        assert all(a > b for a, b in zip(gs, gs[1:])), gs


def test_best_goodput_falls_as_the_cluster_grows():
    """Same measured costs, more accelerators: fails more often, so even the best interval does worse."""
    for mode in planner.MODES:
        gs = []
        for n in (1_000, 4_000, 16_000, 64_000, 100_000):
            inp = planner.PlanInputs(accelerators=n, stall_seconds=30, async_stall_seconds=3, drain_seconds=30)
            gs.append(planner.mode_goodput(inp, planner.mode_optimum(inp, mode), mode))
        assert all(a > b for a, b in zip(gs, gs[1:])), (mode, gs)


def test_goodput_falls_with_restart_and_drain():
    assert planner.goodput(600, 3, 10_800, 0) > planner.goodput(600, 3, 10_800, 600)
    assert planner.goodput(600, 3, 10_800, 0, 0) > planner.goodput(600, 3, 10_800, 0, 30)


def test_sync_optimum_is_young_with_no_restart_and_near_daly():
    inp = planner.PlanInputs(accelerators=16_000, stall_seconds=28.125, restart_seconds=0)
    p = planner.plan(inp)
    sw = planner.sweep(inp, points=400)
    best = sw.optimum["sync"]["interval_s"]
    assert best == pytest.approx(p.young_interval_s)        # sqrt(2CM) exactly when R = 0
    assert near(best, p.daly_interval_s, 0.05)              # Daly's correction is small at C << M
    # and the grid agrees: its best point is the grid point next to the exact optimum
    k = max(range(len(sw.intervals_s)), key=lambda i: sw.sync_goodput[i])
    ratio = sw.intervals_s[1] / sw.intervals_s[0]
    assert best / ratio <= sw.intervals_s[k] <= best * ratio


def test_restart_shortens_the_sync_optimum_slightly():
    inp = planner.PlanInputs(accelerators=16_000, stall_seconds=28.125, restart_seconds=600)
    best = planner.mode_optimum(inp, "sync")
    assert best == pytest.approx(math.sqrt(2 * 28.125 * (11_250 - 600)))
    assert best < planner.young_interval(28.125, 11_250)


def test_interference_costs_async_training_time_and_lengthens_its_optimum():
    """Steps slowed by the background drain lose I of training per checkpoint: like stall, not wall
    time, so the optimum is sqrt(2 (S + I) (M - R - D)); sync has none."""
    free = planner.PlanInputs(accelerators=16_000, stall_seconds=30, async_stall_seconds=1, drain_seconds=60,
                              restart_seconds=600)
    slowed = planner.PlanInputs(**{**vars(free), "interference_seconds": 9.0})
    m = planner.cluster_mttf_seconds(50_000, 16_000)
    assert planner.mode_optimum(slowed, "async") == pytest.approx(math.sqrt(2 * 10 * (m - 600 - 60)))
    t = 900.0
    assert planner.mode_goodput(slowed, t, "async") == pytest.approx(
        planner.mode_goodput(free, t, "async") * (t - 10) / (t - 1))
    assert planner.mode_goodput(slowed, t, "sync") == planner.mode_goodput(free, t, "sync")


def test_a_restore_adds_to_the_restart():
    """A failure costs the restart and then the restore (tune measures it); both modes count it."""
    both = planner.PlanInputs(accelerators=16_000, stall_seconds=30, restart_seconds=600, restore_seconds=200)
    lumped = planner.PlanInputs(accelerators=16_000, stall_seconds=30, restart_seconds=800)
    for mode in planner.MODES:
        assert planner.mode_optimum(both, mode) == planner.mode_optimum(lumped, mode)
        assert planner.mode_goodput(both, 900, mode) == planner.mode_goodput(lumped, 900, mode)
    assert planner.plan(both).costs.restore_s == 200 and planner.plan(both).costs.restart_s == 600
    with pytest.raises(ConfigError, match="restore_seconds"):
        planner.PlanInputs(accelerators=8, restore_seconds=-1)


def test_async_optimum_never_below_stall_plus_drain():
    # drain 1,000 s at a 10,800 s MTTF: sqrt(2 * 0.5 * (10,800 - 1,000)) = 99 s < 1,000.5 s
    assert planner.optimal_interval(0.5, 10_800, 0, 1_000) == pytest.approx(1_000.5)


def test_goodput_rejects_nonsense():
    with pytest.raises(ValueError):
        planner.goodput(0, 1, 100)
    with pytest.raises(ValueError):
        planner.goodput(10, -1, 100)


# --------------------------------------------------------------------------- properties

seconds = st.floats(min_value=1e-3, max_value=1e7, allow_nan=False)
small_seconds = st.floats(min_value=0, max_value=1e7, allow_nan=False)


@given(t=seconds, s=small_seconds, m=seconds, r=small_seconds, d=small_seconds)
def test_goodput_is_a_fraction(t, s, m, r, d):
    g = planner.goodput(t, s, m, r, d)
    assert 0.0 <= g <= 1.0


@given(s=st.floats(min_value=1e-6, max_value=1e6), m=st.floats(min_value=1, max_value=1e8),
       r=small_seconds, d=small_seconds, i=st.floats(min_value=0, max_value=1e5),
       ts=st.lists(st.floats(min_value=1e-6, max_value=1e9), min_size=1, max_size=30))
def test_exact_optimum_beats_any_interval(s, m, r, d, i, ts):
    best = planner.goodput(planner.optimal_interval(s, m, r, d, i), s, m, r, d, i)
    for t in ts:
        assert best >= planner.goodput(t, s, m, r, d, i) - 1e-12


inputs = st.builds(
    planner.PlanInputs,
    accelerators=st.integers(1, 1_000_000),
    mttf_hours=st.floats(1_000, 1e6),
    checkpoints_per_failure=st.floats(1, 100),
    overhead_budget=st.floats(0.001, 0.5),
    restart_seconds=st.floats(0, 3_600),
    stall_seconds=st.one_of(st.none(), st.floats(0.01, 3_600)),
    drain_seconds=st.one_of(st.none(), st.floats(0, 3_600)),
    async_stall_seconds=st.one_of(st.none(), st.floats(0.001, 600)),
    checkpoint_bytes=st.one_of(st.none(), st.integers(1, 10 ** 16)),
)


@settings(suppress_health_check=[HealthCheck.filter_too_much])
@given(inp=inputs)
def test_sweep_optimum_beats_every_grid_point(inp):
    assume(planner.cluster_mttf_seconds(inp.mttf_hours, inp.accelerators) >= planner.MIN_CLUSTER_MTTF_S)
    sw = planner.sweep(inp)
    assert len(sw.intervals_s) == 25
    for mode, ys in (("sync", sw.sync_goodput), ("async", sw.async_goodput)):
        assert all(0 <= y <= 1 for y in ys)
        assert sw.optimum[mode]["goodput"] >= max(ys) - 1e-12
        # the grid brackets the optimum, so the curve shows it
        assert sw.intervals_s[0] <= sw.optimum[mode]["interval_s"] <= sw.intervals_s[-1]


def _finite_numbers(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _finite_numbers(v)
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        yield obj


@given(n=st.integers(1, 10 ** 9), mttf=st.floats(1e-3, 1e9), k=st.floats(1e-3, 1e6),
       budget=st.floats(1e-6, 1), size=st.one_of(st.none(), st.integers(1, 10 ** 18)),
       bw=st.floats(1, 1e18), stall=st.one_of(st.none(), st.floats(1e-6, 1e9)))
def test_any_accepted_input_plans_to_finite_figures(n, mttf, k, budget, size, bw, stall):
    """The input bounds keep every derived figure finite: no inf, nan or zero interval reaches a table."""
    try:
        inp = planner.PlanInputs(accelerators=n, mttf_hours=mttf, checkpoints_per_failure=k,
                                 overhead_budget=budget, checkpoint_bytes=size, stall_seconds=stall,
                                 bandwidth=bw if size is not None else None)
    except ConfigError as exc:
        assert exc.field == "mttf_hours" and "cluster MTTF" in str(exc)
        return
    d = planner.plan(inp).to_dict()
    assert all(math.isfinite(v) for v in _finite_numbers(d))
    for e in d["intervals"].values():
        assert e["interval_s"] > 0 and 0 <= e["sync_goodput"] <= 1 and 0 <= e["async_goodput"] <= 1


@pytest.mark.parametrize("field,value", [
    ("accelerators", 0), ("accelerators", 1.5), ("accelerators", True), ("mttf_hours", -1),
    ("mttf_hours", math.nan), ("mttf_hours", math.inf), ("overhead_budget", 1.5), ("overlap_target", 0),
    ("restart_seconds", -1), ("stall_seconds", 0), ("drain_seconds", -0.1), ("checkpoint_bytes", 0),
    ("checkpoint_bytes", 1.5), ("checkpoint_bytes", 10 ** 19), ("checkpoints_per_failure", 0),
])
def test_inputs_reject_bad_values_naming_the_field(field, value):
    kw = {"accelerators": 1_000, field: value}
    with pytest.raises(ConfigError) as exc:
        planner.PlanInputs(**kw)
    assert exc.value.field == field and str(exc.value).startswith(f"{field}: ")


# --------------------------------------------------------------------------- costs and bandwidth

def test_bandwidth_for_llama3_405b_at_16000():
    size, preset = resolve_size("llama3-405b")
    assert preset == "llama3-405b"
    assert near(size / GIB, 5292, 0.01)                  # MLPerf Storage: ~5.29 TB ("GB" = GiB)
    p = napkin(16_000, checkpoint_bytes=size)
    # by hand: 5.6825e12 B in the 28.125 s budget = 202 GB/s; drained over 10% of 562.5 s = 56.25 s: 101 GB/s
    assert p.sync_bandwidth_bytes_per_s == pytest.approx(size / 28.125)
    assert near(p.sync_bandwidth_bytes_per_s / 1e9, 202, 0.01)
    assert p.async_drain_bandwidth_bytes_per_s == pytest.approx(size / 56.25)
    assert p.async_drain_bandwidth_bytes_per_s == pytest.approx(p.sync_bandwidth_bytes_per_s / 2)
    assert p.bytes_per_day == pytest.approx(size * 153.6)
    assert p.average_bytes_per_s == pytest.approx(size * 153.6 / 86_400)


def test_bandwidth_at_100000_is_higher_for_the_same_model():
    """The interval, not the model, drives the bandwidth: 6.25x the failures, 6.25x the bandwidth."""
    size = 105 * GIB
    a, b = napkin(16_000, checkpoint_bytes=size), napkin(100_000, checkpoint_bytes=size)
    assert b.sync_bandwidth_bytes_per_s == pytest.approx(6.25 * a.sync_bandwidth_bytes_per_s)
    assert b.bytes_per_day == pytest.approx(6.25 * a.bytes_per_day)


def test_no_size_no_bandwidth_figures():
    p = napkin(16_000)
    assert p.sync_bandwidth_bytes_per_s is None and p.bytes_per_day is None


def test_costs_come_from_measurement_then_bandwidth_then_budget():
    c = planner.resolve_costs(planner.PlanInputs(accelerators=16_000))
    assert (c.sync_stall_source, c.drain_source, c.async_stall_source) == ("budget", "sync-cost", "assumed")
    assert c.sync_stall_s == pytest.approx(28.125) and c.drain_s == c.sync_stall_s
    assert c.async_stall_s == pytest.approx(planner.ASYNC_STALL_FRACTION * 28.125)
    c = planner.resolve_costs(planner.PlanInputs(accelerators=16_000, checkpoint_bytes=10 ** 12, bandwidth=1e11))
    assert (c.sync_stall_source, c.sync_stall_s, c.drain_source, c.drain_s) == ("bandwidth", 10.0, "bandwidth", 10.0)
    c = planner.resolve_costs(planner.PlanInputs(accelerators=16_000, checkpoint_bytes=10 ** 12, bandwidth=1e11,
                                                 stall_seconds=7, drain_seconds=4, async_stall_seconds=0.5))
    assert (c.sync_stall_s, c.drain_s, c.async_stall_s) == (7, 4, 0.5)
    assert {c.sync_stall_source, c.drain_source, c.async_stall_source} == {"measured"}


def test_estimate_overheads_and_overlap():
    inp = planner.PlanInputs(accelerators=16_000, stall_seconds=30, async_stall_seconds=3, drain_seconds=60)
    e = planner.estimate(inp, 600)
    assert (e.sync_overhead, e.async_overhead, e.drain_overlap) == pytest.approx((0.05, 0.005, 0.1))


@pytest.mark.parametrize("text,want", [
    ("105GiB", 105 * GIB), ("1.5TB", 1_500_000_000_000), ("123456", 123456), ("2e12", 2 * 10 ** 12),
    ("7 kib", 7168), (".5MB", 500_000), (4096, 4096), ("12 parsecs", None), ("1e400", None), ("", None),
])
def test_parse_bytes(text, want):
    assert parse_bytes(text) == want


def test_parse_bandwidth():
    assert parse_bandwidth("200GB/s") == 200e9
    assert parse_bandwidth("50 GiB/sec") == 50 * GIB
    assert parse_bandwidth(1e9) == 1e9


# --------------------------------------------------------------------------- the command

PLAN_KEYS = {
    "inputs", "costs", "cluster_mttf_s", "failures_per_day", "rule_of_thumb_interval_s", "checkpoints_per_day",
    "sync_budget_s", "young_interval_s", "daly_interval_s", "intervals", "sync_bandwidth_bytes_per_s",
    "async_drain_bandwidth_bytes_per_s", "bytes_per_day", "average_bytes_per_s", "size_from",
}
ESTIMATE_KEYS = {"interval_s", "sync_goodput", "async_goodput", "sync_overhead", "async_overhead", "drain_overlap"}


def test_plan_json_through_the_real_cli():
    proc = subprocess.run([sys.executable, "-m", "emulator.cli", "plan", "--accelerators", "16000",
                           "--size", "llama3-405b", "--json"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)                           # exactly one JSON object
    assert set(d) == PLAN_KEYS
    assert set(d["intervals"]) == {"rule_of_thumb", "young", "daly", "optimal_sync", "optimal_async"}
    assert all(set(e) == ESTIMATE_KEYS for e in d["intervals"].values())
    assert set(d["costs"]) == {"sync_stall_s", "sync_stall_source", "async_stall_s", "async_stall_source",
                               "drain_s", "drain_source", "restart_s", "commit_s", "interference_s",
                               "restore_s"}
    assert d["size_from"] == "llama3-405b"
    assert near(d["checkpoints_per_day"], 155) and near(d["sync_budget_s"], 28)
    assert near(d["sync_bandwidth_bytes_per_s"] / 1e9, 202, 0.01)


def test_plan_table(capsys):
    rc, out, err = cli(capsys, "--accelerators", "16000", "--size", "llama3-405b")
    assert rc == 0 and err == ""
    for text in ("cluster MTTF", "187.5 min", "7.68", "9.4 min", "153.6", "28.1 s", "Young", "Daly",
                 "202.0 GB/s", "101.0 GB/s", "best for sync", "best for async"):
        assert text in out, text


def test_sweep_json_and_plot(tmp_path, capsys):
    png = tmp_path / "sub" / "sweep.png"
    rc, out, err = cli(capsys, "--accelerators", "16000", "--sweep", "--plot", png, "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert set(d) == PLAN_KEYS | {"sweep", "plot"} and d["plot"] == str(png)
    sw = d["sweep"]
    assert len(sw["intervals_s"]) == len(sw["sync_goodput"]) == len(sw["async_goodput"]) == 25
    for mode in ("sync", "async"):
        assert sw["optimum"][mode]["goodput"] >= max(sw[f"{mode}_goodput"])
        assert sw["optimum"][mode]["interval_s"] == pytest.approx(d["intervals"][f"optimal_{mode}"]["interval_s"])
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    assert struct.unpack(">II", data[16:24]) == (800, 500)
    assert len(data) > 20_000                             # two curves, stars, legend: not a blank image


def test_sweep_table_marks_the_optimum(tmp_path, capsys):
    rc, out, _ = cli(capsys, "--accelerators", "16000", "--sweep", "--plot", tmp_path / "s.png")
    assert rc == 0
    table = out.split("Goodput vs interval", 1)[1]
    assert table.count("<- sync") == 1 and table.count("<- async") == 1
    assert "best sync: every 12.9 min" in table and "plot written to" in out


def test_plot_alone_implies_the_sweep(tmp_path, capsys):
    png = tmp_path / "p.png"
    rc, out, _ = cli(capsys, "--accelerators", "16000", "--plot", png)
    assert rc == 0 and png.read_bytes()[:4] == b"\x89PNG" and "Goodput vs interval" in out


def test_plot_marks_the_optima_and_labels_the_axes():
    p = napkin(16_000)
    fig = plot_figure(p)
    (ax,) = fig.axes
    assert "interval" in ax.get_xlabel() and "goodput" in ax.get_ylabel()
    stars = [ln for ln in ax.get_lines() if ln.get_marker() == "*"]
    sw = planner.sweep(p.inputs)
    assert len(stars) == 2
    for ln, mode in zip(stars, planner.MODES):
        assert ln.get_xdata()[0] == pytest.approx(sw.optimum[mode]["interval_s"] / 60)
        assert ln.get_ydata()[0] == pytest.approx(sw.optimum[mode]["goodput"] * 100)
        lo, hi = ax.get_ylim()
        assert lo <= ln.get_ydata()[0] <= hi              # in view
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(t.startswith("best sync") for t in legend) and any(t.startswith("Young") for t in legend)


def test_config_plan_section_and_flags_override(tmp_path, capsys):
    cfg = tmp_path / "plan.yaml"
    cfg.write_text("run: {scale: 0.1}\nplan:\n  accelerators: 100000\n  mttf-hours: 50000\n  size: 105GiB\n"
                   "  restart_seconds: 0\n")
    rc, out, _ = cli(capsys, "--config", cfg, "--json")
    d = json.loads(out)
    assert rc == 0 and d["inputs"]["accelerators"] == 100_000 and d["inputs"]["checkpoint_bytes"] == 105 * GIB
    assert d["costs"]["restart_s"] == 0
    rc, out, _ = cli(capsys, "--config", cfg, "--accelerators", "16000", "--json")
    assert rc == 0 and json.loads(out)["inputs"]["accelerators"] == 16_000


@pytest.mark.parametrize("argv,names", [
    (["--accelerators", "-5"], "--accelerators"),
    (["--accelerators", "0"], "--accelerators"),
    (["--accelerators", "abc"], "--accelerators"),
    (["--size", "1TB"], "--accelerators"),                            # missing
    (["--accelerators", "16000", "--mttf-hours", "-3"], "--mttf-hours"),
    (["--accelerators", "16000", "--overhead-budget", "1.5"], "--overhead-budget"),
    (["--accelerators", "16000", "--restart-seconds", "-1"], "--restart-seconds"),
    (["--accelerators", "16000", "--stall-seconds", "nan"], "--stall-seconds"),
    (["--accelerators", "16000", "--size", "12 parsecs"], "--size"),
    (["--accelerators", "16000", "--size=-5GB"], "--size"),
    (["--accelerators", "16000", "--size", "1e400"], "--size"),
    (["--accelerators", "16000", "--size", "llama9-7b"], "--size"),     # unknown preset
    (["--accelerators", "16000", "--bandwidth", "100GB/s"], "--bandwidth"),   # no size
    (["--accelerators", "16000", "--size", "1TB", "--bandwidth", "fast"], "--bandwidth"),
    (["--accelerators", "16000", "--mttf-hours", "1e-9"], "--mttf-hours"),   # cluster MTTF < 1 s
    (["--accelerators", "16000", "--config", "/nonexistent/plan.yaml"], "--config"),
])
def test_bad_input_is_one_line_naming_the_flag(capsys, argv, names):
    rc, out, err = cli(capsys, *argv)
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ckpt-emu: error: ") and names in lines[0], err


@pytest.mark.parametrize("section,names", [
    ("  accelerators: 16000\n  mttf_hour: 5\n", "plan.mttf_hour: unknown key"),
    ("  accelerators: 16000.5\n", "plan.accelerators"),
    ("  accelerators: 16000\n  size: .inf\n", "plan.size"),
    ("  accelerators: 16000\n  overlap_target: -1\n", "plan.overlap_target"),
    ("  accelerators: 16000\n  size: twelve parsecs\n", "plan.size"),
    ("  mttf_hours: 1000\n", "--accelerators"),
    ("  - 1\n", "plan: must be a mapping"),
])
def test_bad_config_is_one_line_naming_the_key(tmp_path, capsys, section, names):
    cfg = tmp_path / "plan.yaml"
    cfg.write_text("plan:\n" + section)
    rc, out, err = cli(capsys, "--config", cfg)
    lines = err.strip().splitlines()
    assert rc == 2 and out == "" and len(lines) == 1 and names in lines[0], err
    if "plan." in names:
        assert str(cfg) in lines[0]


def test_config_without_a_plan_section(tmp_path, capsys):
    """A run config (no plan: section) gives its checkpoint size; the accelerators are still needed."""
    cfg = tmp_path / "run.yaml"
    cfg.write_text("run: {scale: 0.1}\n")
    rc, _, err = cli(capsys, "--config", cfg)
    assert rc == 2 and "--accelerators N is required" in err


def test_unwritable_plot_is_one_line(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    rc, out, err = cli(capsys, "--accelerators", "16000", "--plot", blocker / "x.png")
    assert rc == 2 and out == "" and err.startswith("ckpt-emu: error: --plot ") and len(err.splitlines()) == 1


_FLAGS = ["--mttf-hours", "--checkpoints-per-failure", "--overhead-budget", "--size", "--restart-seconds",
          "--stall-seconds", "--async-stall-seconds", "--drain-seconds", "--bandwidth", "--overlap-target"]
_VALUES = st.one_of(
    st.sampled_from(["1TB", "105GiB", "200GB/s", "llama3-8b", "0", "-0", "-5GB", "5e-324", "1e-320", "1e308",
                     "1e309", "1e400", "1e400PB", "9" * 400, "inf", "nan", "x", "1..2", ""]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-10 ** 30, 10 ** 30).map(str),
)


@settings(max_examples=200, deadline=None)
@given(n=st.one_of(st.integers(-10, 10 ** 12).map(str), st.sampled_from(["16000", "", "1.5", "1e3", "9" * 400])),
       opts=st.lists(st.tuples(st.sampled_from(_FLAGS), _VALUES), max_size=4))
def test_plan_never_crashes(n, opts):
    """Whatever the numbers: a plan (exit 0) or one error line (exit 2), never a traceback."""
    argv = ["plan", f"--accelerators={n}"] + [f"{f}={v}" for f, v in opts]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    if rc == 0:
        assert err.getvalue() == "" and "Plan for" in out.getvalue()
        assert "nan" not in out.getvalue() and "inf" not in out.getvalue()
    else:
        assert rc == 2 and len(err.getvalue().strip().splitlines()) == 1, err.getvalue()
