"""The shipped dashboard and rules against a real Prometheus scraping real runs: every panel and rule has
data, and shows the report's full-size figures.
"""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import pytest
from dashboards import (
    dashboard,
    multi_level,
    promtool,
    recording_rules,
    soak_only,
    substitute,
    targets,
)
from emu import results, small_config
from prom import ROOT, finite, free_port, http_get, prometheus, require  # noqa: F401 - fixture
from schemas import assert_valid

from emulator.fullsize import full_record

#: a paced design small enough for a test: 2 ranks, the NVMe and the PFS share of the default, a
#: fixed dilation (k = 0.0005 x 20 = 0.01: a full-size second is 10 ms here, a step of 25 s 0.25 s;
#: small_config's step is the wall's at no dilation, hence 0.25 / 20)
DILATION, STEP_S = 20, 0.25 / 20
DESIGN = {"node": {"local": {"write": "7GB/s", "read": "7GB/s"}, "nic": "400Gb/s"},
          "global": {"write": "2GB/s", "read": "4GB/s"}}


def test_live_run_feeds_every_panel_and_rule_with_the_reports_full_size_figures(tmp_path, prometheus):
    """A real 2-rank paced run (the baseline, sync, async; a checkpoint every 8 steps) scraped every
    second: every panel query and every recording rule returns data while it runs, and at the end
    (the last scrape) every panel that has a counterpart in results.json shows the report's figure
    at full size, not the run's measured one (which is 1/k = 100 times shorter here)."""
    port = free_port()
    cfg = small_config(tmp_path, ranks=2, training={"step_seconds": STEP_S}, run={"timeline": True, "dilation": DILATION},
                       checkpoint={"interval_steps": 8, "saves": 3, "modes": ["sync", "async"], "loads": 1,
                                   "keep": 2, "baseline": True}, design=DESIGN)
    out = tmp_path / "out"
    queries = {f"panel {p['title']!r} {t['refId']}": substitute(t["expr"]) for p, t in targets(dashboard())}
    queries.update({f"rule {r['record']}": r["record"] for r in recording_rules()})
    queries = {name: q for name, q in queries.items()
               if not multi_level(q) and not multi_level(name) and not soak_only(q)}

    prometheus.set_targets([f"127.0.0.1:{port}"])
    started = time.time()
    log = open(tmp_path / "cli.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "emulator.cli", "run", str(cfg), "--quiet",
                             "--metrics-port", str(port)], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    pending, live_text = dict(queries), None
    try:
        deadline = time.monotonic() + 300
        while proc.poll() is None:
            assert time.monotonic() < deadline, f"the run did not end in time; no data yet for: {sorted(pending)}"
            if live_text is None:
                try:
                    text = http_get(f"http://127.0.0.1:{port}/metrics", timeout=2)
                    # once every family is there: a drain finished and a checkpoint is complete
                    if 'phase="drain"' in text and "ckpt_emu_last_complete_checkpoint_timestamp_seconds{" in text:
                        live_text = text
                except OSError:
                    pass
            for name, expr in list(pending.items()):
                if finite(prometheus.query(expr)):
                    del pending[name]
            time.sleep(1.0)
        rc = proc.wait(timeout=120)
        time.sleep(2)  # the last rule evaluation
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()
        prometheus.set_targets([])
    cli_log = (tmp_path / "cli.log").read_text()
    assert rc == 0, cli_log
    # Whatever the 1 s polls missed (data between two polls, or in the run's last seconds)
    # is still in Prometheus: evaluate the rest over the run's span.
    for name, expr in list(pending.items()):
        if finite(prometheus.query_range(expr, started, time.time(), 1.0)):
            del pending[name]
    assert not pending, f"no data for: {json.dumps(pending, indent=1)}\n{cli_log}"

    assert live_text is not None, "the live endpoint never showed a finished drain"
    r = promtool("check", "metrics", input=live_text)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not re.search(r'[{,]step="', live_text)
    info = prometheus.query_range('ckpt_emu_info{job="ckpt-emu"}', started, time.time())
    assert info and info[0]["metric"]["ranks"] == "2" and info[0]["metric"]["modes"] == "sync,async"

    res = results(out)
    assert_valid("results", res)
    assert_panels_show_the_reports_figures(prometheus, res, window=f"{int(time.time() - started) + 5}s")
    # the run's own timeline picture, and one drawn again from its results.json
    assert set(res["timeline"]) == {"none", "sync", "async"} and all(res["timeline"].values())
    from timeline_picture import assert_png_shows_kinds
    assert_png_shows_kinds(out / "timeline.png")


def assert_panels_show_the_reports_figures(prometheus, res: dict, window: str) -> None:
    """Each panel, and the series it reads, at the run's last scrape (``window``: the whole run) against
    the report's full-size figure: the same histogram's quantiles by mode and by tier, histogram means
    against the report's means, gauges against the report's figures."""
    last = last_scrape(prometheus)
    k = res["time_factor"]
    at = lambda expr: one_value(prometheus.query(panel_expr(expr, window), at=last), expr)  # noqa: E731
    assert at("max(ckpt_emu_time_factor)") == pytest.approx(k)
    modes, levels = res["modes"], res["levels"]
    # the global tier's durability lag, served by tier and by mode: one lag, one figure (the issue saw
    # 1.75 s and 7 s); both the report's at full size
    newest_by_tier = at('max(ckpt_emu_last_tier_durability_lag_seconds{tier="global"})')
    newest_by_mode = at("max(ckpt_emu_last_durability_lag_seconds)")
    assert newest_by_tier == pytest.approx(newest_by_mode, rel=0.05)
    by_tier = panel_values(prometheus, "Durability lag p50 / p99 by tier", window, last)
    by_mode = panel_values(prometheus, "Durability lag p50 / p99 by mode", window, last)
    for quantile in ("p50", "p99"):
        assert by_tier[f"{quantile} global"] == pytest.approx(by_mode[f"{quantile} async"], rel=0.20)
    global_lag = levels["global"]["lag_full_size_mean_s"]
    assert newest_by_tier == pytest.approx(global_lag, rel=0.15)
    assert mean(at, "ckpt_emu_tier_durability_lag_seconds", 'tier="global"') == pytest.approx(global_lag, rel=0.15)
    assert mean(at, "ckpt_emu_tier_durability_lag_seconds", 'tier="local"') == pytest.approx(
        levels["local"]["lag_full_size_mean_s"], rel=0.15)
    saves = panel_values(prometheus, "Save / load throughput at full size", window, last)
    for mode in ("sync", "async"):
        full = modes[mode]["full_size"]
        # the newest checkpoint's save throughput against the report's mean over the mode's checkpoints
        assert saves[f"save ({mode})"] == pytest.approx(full["save_bytes_per_s"], rel=0.10), mode
        assert mean(at, "ckpt_emu_durability_lag_seconds", f'mode="{mode}"') == pytest.approx(
            full["lag_mean_s"], rel=0.15), mode
        # every rank's stall (the report's is the slowest rank's per checkpoint)
        assert mean(at, "ckpt_emu_checkpoint_stall_seconds", f'mode="{mode}"') == pytest.approx(
            per_rank_mean(res, "stall_s", mode), rel=0.05), mode
        assert at(f'max(ckpt_emu_drain_overlap_ratio{{mode="{mode}"}})') == pytest.approx(
            full["drain_overlap_ratio"], rel=0.25), mode
        assert at(f'max(ckpt_emu_slowdown_ratio{{mode="{mode}"}})') == pytest.approx(
            full["slowdown_ratio"], abs=0.25 * abs(full["slowdown_ratio"]) + 0.01), mode
        # the recording rule over the mode's steps (its 5 minutes hold the whole run)
        assert at(f'max(ckpt_emu:overhead:ratio{{mode="{mode}"}})') == pytest.approx(
            full["overhead_ratio"], abs=0.25 * full["overhead_ratio"] + 0.005), mode
        assert mean(at, "ckpt_emu_step_duration_seconds", f'mode="{mode}"') == pytest.approx(
            full["step_p50_s"], rel=0.10), mode
    # every rank's write, every node's drain (the node leader's record: rank 0's)
    for phase, field, ranks in (("local_write", "local_write_s", None), ("drain", "drain_s", {0})):
        assert mean(at, "ckpt_emu_phase_duration_seconds", f'phase="{phase}"') == pytest.approx(
            per_rank_mean(res, field, ranks=ranks), rel=0.05), phase
    load = res["load"]
    assert saves["load (async)"] == pytest.approx(res["bytes"]["run_emulated"] / load["load_worst_full_size_s"],
                                                  rel=0.15)
    # bytes of the full-size checkpoint: every checkpoint's to the local tier and to the global one
    checkpoints = sum(modes[m]["checkpoints"] for m in ("sync", "async"))
    for tier in ("local", "global"):
        written = at(f'sum(increase(ckpt_emu_written_bytes_total{{tier="{tier}"}}[{window}]))')
        assert written == pytest.approx(checkpoints * res["bytes"]["run_emulated"], rel=0.05), tier
    interval = res["levels"]["global"]["interval_s"]  # the design's: interval steps x the step's full size
    assert at('max(ckpt_emu_checkpoint_interval_seconds{mode="async"})') == pytest.approx(interval)
    assert at('max(ckpt_emu_tier_interval_seconds{tier="global"})') == pytest.approx(interval)
    # an age on the wall clock, in the design's time (after training the run goes on with its loads:
    # the age grows past the alert's threshold then, as a stopped job's would)
    ages = panel_values(prometheus, "Age of newest durable checkpoint per tier", window, last)
    durable = at('max(ckpt_emu_last_complete_checkpoint_timestamp_seconds{tier="global"})')
    assert ages["global"] == pytest.approx((last - durable) / k, rel=0.01)
    assert ages["alert threshold"] == pytest.approx(3 * interval + newest_by_mode, rel=0.01)


def last_scrape(prometheus) -> float:
    """When Prometheus last scraped the run (its final values)."""
    raw = prometheus.api("query", query="ckpt_emu_time_factor[15m]")["result"]
    return max(float(t) for series in raw for t, _ in series["values"])


def panel_expr(expr: str, window: str) -> str:
    """A panel's query as Grafana sends it, its per-checkpoint window spanning the whole run."""
    return substitute(expr.replace("$window", window))


def panel_values(prometheus, title: str, window: str, at: float) -> dict:
    """{legend: value} of a panel's queries at ``at`` (legends as Grafana draws them)."""
    panel = next(p for p in dashboard()["panels"] if p["title"] == title)
    out = {}
    for t in panel["targets"]:
        for series in prometheus.query(panel_expr(t["expr"], window), at=at):
            legend = re.sub(r"\{\{(\w+)\}\}", lambda m: series["metric"].get(m.group(1), ""), t["legendFormat"])
            out[legend] = float(series["value"][1])
    return out


def one_value(result: list, expr: str) -> float:
    assert len(result) == 1, f"{expr}: {result}"
    return float(result[0]["value"][1])


def per_rank_mean(res: dict, field: str, mode: str | None = None, ranks: set | None = None) -> float:
    """The mean of a record field at full size over the ranks' checkpoints (of ``mode``; of ``ranks``)."""
    values = [full_record(x, res["time_factor"], bytes_factor=res["scale"])[field] for r in res["per_rank"]
              for x in r["records"] if (mode is None or x["mode"] == mode) and (ranks is None or r["rank"] in ranks)]
    return sum(values) / len(values)


def mean(at, histogram: str, selector: str) -> float:
    """A served histogram's mean over the run (sum over count, every node's, every series' of the selector)."""
    return at(f"sum(increase({histogram}_sum{{{selector}}}[$window])) / "
              f"sum(increase({histogram}_count{{{selector}}}[$window]))")


def test_live_levels_run_feeds_the_tier_and_recovery_panels(tmp_path, prometheus):
    """A real run with levels (host memory every checkpoint, NVMe every 2nd, global every 4th)
    that loses its node after the 8th checkpoint and recovers from global: every per-tier and
    per-class panel query and recording rule returns data over the run's span."""
    import shutil
    import uuid
    shm = f"/dev/shm/ckpt-emu-test-{uuid.uuid4().hex[:8]}"
    port = free_port()
    cfg = small_config(tmp_path, ranks=2, training={"step_seconds": 0.2},
                       checkpoint={"interval_steps": 2, "saves": 8, "modes": ["async"], "loads": 1},
                       tiers={"memory": {"backend": "dir", "path": shm + "/node{node}"},
                              "local": {"interval_steps": 4}, "global": {"interval_steps": 8}})
    queries = {f"panel {p['title']!r} {t['refId']}": substitute(t["expr"]) for p, t in targets(dashboard())}
    queries.update({f"rule {r['record']}": r["record"] for r in recording_rules()})
    queries = {name: q for name, q in queries.items() if multi_level(q) or multi_level(name)}
    assert len(queries) >= 6
    prometheus.set_targets([f"127.0.0.1:{port}"])
    started = time.time()
    try:
        proc = subprocess.run([sys.executable, "-m", "emulator.cli", "run", str(cfg), "--quiet",
                               "--metrics-port", str(port), "--lose-nodes", "8:0"],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
        time.sleep(3)  # the last rule evaluation
    finally:
        prometheus.set_targets([])
        shutil.rmtree(shm, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr
    assert results(tmp_path / "out")["recoveries"][0]["class"] == "node"
    pending = {name: q for name, q in queries.items()
               if not finite(prometheus.query_range(q, started, time.time(), 1.0))}
    assert not pending, f"no data for: {json.dumps(pending, indent=1)}"
