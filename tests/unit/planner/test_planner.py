"""`ckpt-emu plan` without a config: the reference formulas, the one-level closed form, the planner on a
napkin design (N accelerators, a checkpoint, one global store), and the command itself.

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

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator import planner
from emulator.cli import main
from emulator.cli.plan import resolve_size
from emulator.cli.plan_report import plot_figure
from emulator.design.snapshot import DEFAULTS as SNAPSHOT_DEFAULTS
from emulator.design.costs import copy_seconds, recovery_seconds, snapshot_seconds
from emulator.design.napkin import napkin_design
from emulator.planner import reference as ref
from emulator.units import GIB
from paths import ROOT



def near(got, want, rel=0.03):
    """Within a few percent (3% unless told): how the published figures are quoted."""
    return abs(got - want) <= rel * abs(want)


def figures(n, **kw) -> planner.planning.Reference:
    return planner.reference_figures(n, 50_000.0, **kw)


def cli(capsys, *argv):
    rc = main(["plan", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


# --------------------------------------------------------------------------- published figures

def test_16000_accelerators_mlperf_figures():
    r = figures(16_000)
    assert near(r.checkpoints_per_day, 155)               # 153.6
    assert near(r.rule_of_thumb_s / 60, 9.3)              # 9.375 min
    assert near(r.sync_budget_s, 28)                      # 28.1 s
    # by hand: 50,000 h / 16,000 = 3.125 h; / 20 = 9.375 min; 1,440 min / 9.375 = 153.6; 5% of 562.5 s = 28.125 s
    assert r.cluster_mttf_s == pytest.approx(3.125 * 3600)
    assert r.rule_of_thumb_s == pytest.approx(562.5)
    assert r.checkpoints_per_day == pytest.approx(153.6)
    assert r.sync_budget_s == pytest.approx(28.125)


def test_100000_accelerators_mlperf_figures():
    r = figures(100_000)
    assert near(r.checkpoints_per_day, 967)               # 960
    assert near(r.rule_of_thumb_s / 60, 1.5)              # 1.5 min
    assert near(r.sync_budget_s, 4.4)                     # 4.5 s (2.3%)


def test_24000_accelerators_cluster_mttf():
    assert near(figures(24_000).cluster_mttf_s / 60, 124)  # 125 min


def test_llama3_failure_rate_reproduced():
    """Meta: 419 unexpected interruptions in 54 days on 16,384 GPUs."""
    r = figures(16_384)
    assert near(r.failures_per_day, 419 / 54)             # 7.86 vs 7.76 a day
    assert r.failures_per_day == pytest.approx(24 * 16_384 / 50_000)


def test_failures_scale_with_accelerators():
    one, many = figures(1_000), figures(8_000)
    assert many.failures_per_day == pytest.approx(8 * one.failures_per_day)
    assert many.cluster_mttf_s == pytest.approx(one.cluster_mttf_s / 8)


# --------------------------------------------------------------------------- Young and Daly

def test_young_by_hand():
    # sqrt(2 * 72 * 3600) = sqrt(518,400) = 720
    assert ref.young_interval(72, 3600) == pytest.approx(720)
    assert ref.young_interval(2, 10_000) == pytest.approx(200)


def test_daly_by_hand():
    # C = 72, M = 3600: C/2M = 0.01, sqrt = 0.1, sqrt(2CM) = 720; 720 * (1 + 0.1/3 + 0.01/9) - 72 = 672.8
    assert ref.daly_interval(72, 3600) == pytest.approx(672.8)
    assert ref.daly_interval(2, 10_000) == pytest.approx(200 + 2 / 3 + 1 / 450 - 2)


def test_daly_large_cost_branch_returns_mttf():
    assert ref.daly_interval(100, 50) == 50          # C = 2M exactly
    assert ref.daly_interval(1_000, 50) == 50        # C > 2M
    assert ref.daly_interval(99.9, 50) != 50         # just below: the formula


@pytest.mark.parametrize("fn", [ref.young_interval, ref.daly_interval])
def test_interval_formulas_reject_non_positive(fn):
    with pytest.raises(ValueError):
        fn(0, 100)
    with pytest.raises(ValueError):
        fn(10, -1)


def test_reference_figures_quote_young_and_daly_for_the_sync_stall():
    r = figures(16_000, sync_stall_s=28.125)
    assert r.young_s == pytest.approx(math.sqrt(2 * 28.125 * 11_250))
    x = 28.125 / (2 * 11_250)
    assert r.daly_s == pytest.approx(math.sqrt(2 * 28.125 * 11_250) * (1 + math.sqrt(x) / 3 + x / 9) - 28.125)


# --------------------------------------------------------------------------- the one-level closed form

def _exact(interval, period, lag, recovery, mttf):
    """The closed form of reference.py's docstring, written out."""
    return interval / mttf * math.exp(-(period + lag + recovery) / mttf) / (1 - math.exp(-period / mttf))


def test_goodput_by_hand():
    # sync, T = 600 of training, C = 30: P = 630, within 0.03 points of (600/630)(1 - (R + P/2)/M)
    assert ref.goodput(600, 30, 10_800) == pytest.approx(_exact(600, 630, 0, 0, 10_800))
    assert ref.goodput(600, 30, 10_800) == pytest.approx(600 / 630 * (1 - 315 / 10_800), abs=3e-4)
    assert ref.goodput(600, 30, 10_800, 600) == pytest.approx(_exact(600, 630, 0, 600, 10_800))
    # async, stall 3, lag 30: no wait (30 < 600); P = 603
    assert ref.goodput(600, 3, 10_800, 0, 30) == pytest.approx(_exact(600, 603, 30, 0, 10_800))
    # async, interval 20 < lag 30: the next checkpoint waits 10 s for the copy; P = stall + lag = 33
    assert ref.goodput(20, 3, 10_800, 0, 30) == pytest.approx(_exact(20, 33, 30, 0, 10_800))


def test_goodput_falls_as_stall_recovery_lag_grow_and_mttf_shrinks():
    for lag in (0.0, 30.0):
        gs = [ref.goodput(600, s, 10_800, 600, lag) for s in (0.1, 1, 5, 30, 100, 300)]
        assert all(a > b for a, b in zip(gs, gs[1:])), gs
        gs = [ref.goodput(600, 10, m, 600, lag) for m in (1e6, 1e5, 3e4, 1e4, 5e3)]
        assert all(a > b for a, b in zip(gs, gs[1:])), gs
    assert ref.goodput(600, 3, 10_800, 0) > ref.goodput(600, 3, 10_800, 600)
    assert ref.goodput(600, 3, 10_800, 0, 0) > ref.goodput(600, 3, 10_800, 0, 30)


def test_the_exact_optimum_is_dalys_and_recovery_does_not_move_it():
    """Daly's higher-order formula approximates the optimum of this same model: they agree for C << M;
    the recovery scales goodput and leaves the best interval where it is."""
    assert ref.optimal_interval(28.125, 11_250, 600) == pytest.approx(ref.daly_interval(28.125, 11_250), rel=1e-4)
    assert ref.optimal_interval(28.125, 11_250, 0) == ref.optimal_interval(28.125, 11_250, 600)
    assert ref.optimal_interval(1, 11_250, 600, 60, 9) == pytest.approx(ref.daly_interval(10, 11_250), rel=1e-3)


def test_async_optimum_never_below_the_lag():
    """Training shorter than the copy's lag waits for it: the period stays stall + lag."""
    assert ref.optimal_interval(0.5, 10_800, 0, 1_000) == pytest.approx(1_000)


seconds = st.floats(min_value=1e-3, max_value=1e7, allow_nan=False)
small_seconds = st.floats(min_value=0, max_value=1e7, allow_nan=False)


@given(t=seconds, s=small_seconds, m=seconds, r=small_seconds, d=small_seconds)
def test_goodput_is_a_fraction(t, s, m, r, d):
    assert 0.0 <= ref.goodput(t, s, m, r, d) <= 1.0


@given(s=st.floats(min_value=1e-6, max_value=1e6), m=st.floats(min_value=1, max_value=1e8),
       r=small_seconds, d=small_seconds, i=st.floats(min_value=0, max_value=1e5),
       ts=st.lists(st.floats(min_value=1e-6, max_value=1e9), min_size=1, max_size=30))
def test_exact_optimum_beats_any_interval(s, m, r, d, i, ts):
    best = ref.goodput(ref.optimal_interval(s, m, r, d, i), s, m, r, d, i)
    for t in ts:
        assert best >= ref.goodput(t, s, m, r, d, i) - 1e-12


# --------------------------------------------------------------------------- the planner on a napkin design

def _one_class(design):
    """The design with all failures of one class (node), so one level and one class: the closed form."""
    from dataclasses import replace
    fm = design.failures
    classes = tuple(replace(c, share=1.0 if c.name == "node" else 0.0) for c in fm.classes)
    return replace(design, failures=replace(fm, classes=classes))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_one_level_is_the_closed_form(mode):
    """A napkin design, one class of failures: the planner's best interval and goodput are the
    closed form's for its costs (stall: all of it, or the snapshot; lag: 0, or the copy)."""
    d = _one_class(napkin_design(16_000, 5292 * GIB, 400e9, mttf_hours=50_000))
    p = planner.plan(d, modes=(mode,))
    copy, snap, m = copy_seconds(d, "global"), snapshot_seconds(d), d.failures.cluster_mttf_s
    r = recovery_seconds(d, "node")
    stall, lag = (snap + copy, 0.0) if mode == "sync" else (snap, copy)
    best = p.modes[mode].best
    assert best.base_interval_s == pytest.approx(ref.optimal_interval(stall, m, r, lag), rel=1e-3)
    assert best.goodput == pytest.approx(ref.goodput(best.base_interval_s, stall, m, r, lag), rel=1e-9)


def test_the_async_stall_is_the_snapshot_not_a_tenth_of_the_sync_stall():
    """Reproduction 9: the async stall is each accelerator's bytes over the snapshot rate plus its fixed
    cost (today's plan assumed 10 % of the sync stall: 11.4 s here, against 6.9 ms)."""
    d = napkin_design(16_000, 5292 * GIB, 50e9, snapshot_bps=48 * GIB)
    file_bytes = d.job.heaviest.file_bytes
    p = planner.plan(d)
    assert p.costs.async_stall_s == pytest.approx(SNAPSHOT_DEFAULTS["fixed_s"] + file_bytes / (48 * GIB))
    assert p.costs.sync_stall_s == pytest.approx(p.costs.async_stall_s + copy_seconds(d, "global"))
    assert p.costs.async_stall_s < 0.01 * p.costs.sync_stall_s
    async_levels = p.modes["async"].best.inputs.levels
    assert async_levels[0].stall_s == pytest.approx(p.costs.async_stall_s)
    assert async_levels[0].lag_s == pytest.approx(copy_seconds(d, "global"))


def test_the_search_beats_every_cell_of_its_grid_and_flags_its_edge():
    d = napkin_design(16_000, 5292 * GIB, 400e9)
    p = planner.plan(d)
    for s in p.modes.values():
        assert all(s.best.goodput >= g - 1e-12 for _, g, _ in s.curve)
        assert s.grid_best.base_interval_s in p.grid.base_interval_s and not s.on_edge
    narrow = planner.Grid(base_interval_s=(60.0, 120.0, 240.0))  # the sync optimum (~9 min) is above it
    edge = planner.plan(d, grid=narrow, modes=("sync",)).modes["sync"]
    assert edge.grid_best.base_interval_s == 240.0 and edge.on_edge == ("base interval",)


def test_bandwidth_at_the_rule_of_thumb_for_llama3_405b(capsys):
    """Without --bandwidth: what the store needs at the rule of thumb's interval (MLPerf's figures)."""
    size, preset = resolve_size("llama3-405b")
    assert preset == "llama3-405b" and near(size / GIB, 5292, 0.01)
    rc, out, err = cli(capsys, "--accelerators", "16000", "--size", "llama3-405b")
    assert rc == 0 and err == ""
    # 5.6825e12 B in the 28.125 s budget = 202 GB/s; over 10% of 562.5 s = 101 GB/s
    for text in ("187.5 min", "7.68", "9.4 min", "153.6 a day", "28.1 s", "202.0 GB/s", "101.0 GB/s", "872.8 TB",
                 "give --bandwidth"):
        assert text in out, text


# --------------------------------------------------------------------------- the command

def test_plan_json_through_the_real_cli():
    proc = subprocess.run([sys.executable, "-m", "emulator.cli", "plan", "--accelerators", "16000",
                           "--size", "llama3-405b", "--bandwidth", "400GB/s", "--json"], capture_output=True,
                          text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)                           # exactly one JSON object
    assert {"job", "reference", "costs", "classes", "modes", "recommended", "tiers", "global_volume", "grid",
            "sources", "notes"} <= set(d)
    assert set(d["modes"]) == {"sync", "async"} and set(d["classes"]) == {"process", "node", "group"}
    rec, optimum = d["recommended"], d["optimum"]
    # the recommendation: the best cell within the bounds; the unconstrained optimum beside it, and why not
    assert rec["goodput"] == max((m["kept"] or m["best"])["goodput"] for m in d["modes"].values())
    assert rec["broken"] == [] and optimum["goodput"] > rec["goodput"]
    assert optimum["broken"] and optimum["broken"][0].startswith("global volume:")
    assert near(d["reference"]["checkpoints_per_day"], 155) and near(d["reference"]["sync_budget_s"], 28)
    assert d["job"]["accelerators"] == 16000 and d["sources"]["snapshot"] == "assumed"


def test_plan_table(capsys):
    rc, out, err = cli(capsys, "--accelerators", "16000", "--size", "llama3-405b", "--bandwidth", "400GB/s")
    assert rc == 0 and err == ""
    for text in ("cluster MTTF", "187.5 min", "7.68", "process", "node", "group", "restores from", "Young",
                 "Daly", "rule of thumb", "9.4 min", "Best intervals", "<- recommended", "400.0 GB/s for the job",
                 "Global storage:", "Notes"):
        assert text in out, text


def test_the_recommendation_meets_the_volume_bound_and_the_optimum_is_its_comparison(capsys):
    """Async with a free background copy checkpoints as often as the copy allows: writing the 405B
    checkpoint every minute is petabytes a day. The planner recommends the best cell under the global
    volume bound and shows the unconstrained optimum beside it, with the bound it breaks."""
    rc, out, _ = cli(capsys, "--accelerators", "16000", "--size", "llama3-405b", "--bandwidth", "400GB/s", "--json")
    d = json.loads(out)
    v, rec, optimum = d["global_volume"], d["recommended"], d["optimum"]
    assert not v["flagged"] and v["per_failure"] <= v["limit_per_failure"] and rec["broken"] == []
    assert optimum["goodput"] > rec["goodput"] and optimum["base_interval_s"] < rec["base_interval_s"]
    assert optimum["broken"][0].startswith("global volume:")
    rc, out, _ = cli(capsys, "--accelerators", "16000", "--size", "llama3-405b", "--bandwidth", "400GB/s")
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if "<- recommended" in line)
    assert "unconstrained optimum (async)" in lines[at + 1] and "not recommended: global volume" in lines[at + 1]
    # a small job checkpointing every few hours is not flagged, however many checkpoints per failure
    rc, out, _ = cli(capsys, "--accelerators", "8", "--size", "105GB", "--bandwidth", "2GB/s", "--json")
    assert rc == 0 and json.loads(out)["global_volume"]["flagged"] is False


def test_sweep_json_and_plot(tmp_path, capsys):
    png = tmp_path / "sub" / "sweep.png"
    rc, out, err = cli(capsys, "--accelerators", "16000", "--size", "1TB", "--bandwidth", "100GB/s", "--sweep",
                       "--plot", png, "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["plot"] == str(png)
    for m in ("sync", "async"):
        curve = d["modes"][m]["curve"]
        assert len(curve) == len(d["grid"]["base_interval_s"])
        assert d["modes"][m]["best"]["goodput"] >= max(c["goodput"] for c in curve) - 1e-12
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    assert struct.unpack(">II", data[16:24]) == (800, 500)
    assert len(data) > 20_000                             # two curves, stars, legend: not a blank image


def test_sweep_table_marks_each_modes_best_row(tmp_path, capsys):
    rc, out, _ = cli(capsys, "--accelerators", "16000", "--size", "1TB", "--bandwidth", "100GB/s", "--plot",
                     tmp_path / "s.png")
    assert rc == 0
    sweep = out.split("Goodput against the base interval", 1)[1]
    assert sweep.count("<- sync") == 1 and sweep.count("<- async") == 1
    assert "best sync: every" in sweep and "plot written to" in out


def test_plot_marks_the_optima_and_labels_the_axes():
    p = planner.plan(napkin_design(16_000, 5292 * GIB, 400e9))
    (ax,) = plot_figure(p).axes
    assert "interval" in ax.get_xlabel() and "goodput" in ax.get_ylabel()
    stars = [ln for ln in ax.get_lines() if ln.get_marker() == "*"]
    assert len(stars) == 2
    for ln, mode in zip(stars, p.modes):
        assert ln.get_xdata()[0] == pytest.approx(p.modes[mode].best.base_interval_s / 60)
        lo, hi = ax.get_ylim()
        assert lo <= ln.get_ydata()[0] <= hi
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(t.startswith("best sync") for t in legend) and any(t.startswith("Young") for t in legend)


def test_a_plan_section_file_is_refused_with_what_to_do_instead(tmp_path, capsys):
    """One meaning for a config argument: `plan CONFIG` is a run config; the old `--config FILE` with a
    plan: section says how to give the same figures now."""
    cfg = tmp_path / "plan.yaml"
    cfg.write_text("plan:\n  accelerators: 100000\n  size: 105GiB\n")
    rc, out, err = cli(capsys, "--config", cfg)
    assert rc == 2 and out == "" and err.count("\n") == 1 and "plan CONFIG" in err and "--accelerators" in err


@pytest.mark.parametrize("argv,names", [
    (["--accelerators", "-5"], "--accelerators"),
    (["--accelerators", "0"], "--accelerators"),
    (["--accelerators", "abc"], "--accelerators"),
    (["--size", "1TB"], "--accelerators"),                            # missing
    (["--accelerators", "16000", "--mttf-hours", "-3"], "--mttf-hours"),
    (["--accelerators", "16000", "--overhead-budget", "1.5"], "--overhead-budget"),
    (["--accelerators", "16000", "--restart-seconds", "-1"], "--restart-seconds"),
    (["--accelerators", "16000", "--size", "12 parsecs"], "--size"),
    (["--accelerators", "16000", "--size=-5GB"], "--size"),
    (["--accelerators", "16000", "--size", "123456"], "--size"),       # a size needs its unit
    (["--accelerators", "16000", "--size", "llama9-7b"], "--size"),     # unknown preset
    (["--accelerators", "16000", "--bandwidth", "100GB/s"], "--bandwidth"),   # no size
    (["--accelerators", "16000", "--size", "1TB", "--bandwidth", "fast"], "--bandwidth"),
    (["--accelerators", "16000", "--size", "1TB", "--bandwidth", "100"], "--bandwidth"),   # no unit
    (["--accelerators", "16000", "--size", "1TB", "--bandwidth", "100GB"], "--bandwidth"),  # a size, not a rate
    (["--accelerators", "16000", "--size", "1TB", "--bandwidth", "100Zb/s"], "--bandwidth"),  # unknown unit
    (["--accelerators", "16000", "--size", "1TB", "--bandwidth", "1GB/s", "--nic", "1e9"], "--nic"),
    (["--accelerators", "16000", "--mttf-hours", "1e-9"], "--mttf-hours"),   # cluster MTTF < 1 s
    (["--accelerators", "16000", "--node-loss-fraction", "0.7", "--group-loss-fraction", "0.4"],
     "--node-loss-fraction + --group-loss-fraction"),
    (["--accelerators", "16000", "--set", "run.scale=1"], "--set"),
])
def test_bad_input_is_one_line_naming_the_flag(tmp_path, capsys, argv, names):
    rc, out, err = cli(capsys, *argv, "--plot", tmp_path / "p.png")
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ckpt-emu: error: ") and names in lines[0], err
    assert not (tmp_path / "p.png").exists()


def test_unwritable_plot_is_one_line(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    rc, out, err = cli(capsys, "--accelerators", "16000", "--size", "1TB", "--bandwidth", "1TB/s",
                       "--plot", blocker / "x.png")
    assert rc == 2 and out == "" and err.startswith("ckpt-emu: error: --plot ") and len(err.splitlines()) == 1


_FLAGS = ["--mttf-hours", "--checkpoints-per-failure", "--overhead-budget", "--size", "--restart-seconds",
          "--bandwidth", "--nic", "--snapshot-rate", "--interval", "--overlap-target", "--nodes"]
_VALUES = st.one_of(
    st.sampled_from(["1TB", "105GiB", "200GB/s", "400Gb/s", "llama3-8b", "0", "-0", "-5GB", "5e-324", "1e-320",
                     "1e308", "1e309", "1e400", "1e400PB", "1e400GB/s", "9" * 400, "inf", "nan", "x", "1..2", "",
                     "10m", "2h", "1e-300GB/s"]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-10 ** 30, 10 ** 30).map(str),
)


@settings(max_examples=150, deadline=None)
@given(n=st.one_of(st.integers(-10, 10 ** 7).map(str), st.sampled_from(["16000", "", "1.5", "1e3", "9" * 400])),
       opts=st.lists(st.tuples(st.sampled_from(_FLAGS), _VALUES), max_size=4))
def test_plan_never_crashes(n, opts):
    """Whatever the numbers: a plan (exit 0) or one error line (exit 2), never a traceback or a nan."""
    argv = ["plan", f"--accelerators={n}"] + [f"{f}={v}" for f, v in opts]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    if rc == 0:
        assert err.getvalue() == "" and "Plan for" in out.getvalue()
        assert "nan" not in out.getvalue() and " inf" not in out.getvalue()
    else:
        assert rc == 2 and len(err.getvalue().strip().splitlines()) == 1, err.getvalue()


def test_a_vanishing_checkpoints_per_failure_is_refused(capsys):
    """Hypothesis found 2.2e-313: the rule of thumb's interval came out as "inf h"."""
    assert main(["plan", "--accelerators", "16000", "--checkpoints-per-failure", "2.2e-313"]) == 2
    assert "--checkpoints-per-failure: must be >= 0.01" in capsys.readouterr().err


def test_a_size_too_long_for_a_file_name_is_one_line(capsys):
    """Hypothesis found --size=999...9 (400 digits): looking for a file of that name raised ENAMETOOLONG."""
    assert main(["plan", "--accelerators", "16000", "--size", "9" * 400]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ckpt-emu: error: --size"), err
