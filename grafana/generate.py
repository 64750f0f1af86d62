"""Generate grafana/dashboards/ckpt-emu.json (the committed file is this script's output).

    python3 grafana/generate.py            # rewrite the JSON
    python3 grafana/generate.py --check    # exit 1 if the committed JSON is out of date

Edit the panels here, not in the JSON; tests/test_grafana.py fails when they differ.

Every panel and the ``job`` variable use the ``datasource`` variable (uid
``${datasource}``), so the dashboard works with any Prometheus datasource, whatever its
name or uid, without ``__inputs``. Variables: ``datasource``, ``job`` (the scrape job(s)
of the run, from ``ckpt_emu_info``) and ``window`` (the window for per-checkpoint
statistics: checkpoints come once per interval, often minutes apart, so
``$__rate_interval`` would mostly see none). Byte and time rates use
``$__rate_interval``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from emulator.units import GIB

OUT = Path(__file__).resolve().parent / "dashboards" / "ckpt-emu.json"
UID = "ckpt-emu"
DS = {"type": "prometheus", "uid": "${datasource}"}
J = 'job=~"$job"'


def target(expr: str, legend: str, ref: str) -> dict:
    return {"datasource": DS, "editorMode": "code", "expr": expr, "legendFormat": legend, "range": True,
            "refId": ref}


def thresholds(*steps) -> dict:
    """steps: (value or None for the base, colour)."""
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for v, c in steps]}


def panel(title: str, description: str, targets: list, *, unit: str, grid: tuple, min_=0, max_=None,
          threshold_line: tuple | None = None, threshold_style: str = "line", overrides: list | None = None,
          draw: str = "line", stack: bool = False) -> dict:
    custom = {
        "axisBorderShow": False, "axisCenteredZero": False, "axisColorMode": "text", "axisLabel": "",
        "axisPlacement": "auto", "barAlignment": 0, "drawStyle": draw, "fillOpacity": 10,
        "gradientMode": "none", "hideFrom": {"legend": False, "tooltip": False, "viz": False},
        "insertNulls": False, "lineInterpolation": "linear", "lineWidth": 1, "pointSize": 4,
        "scaleDistribution": {"type": "linear"}, "showPoints": "auto", "spanNulls": False,
        "stacking": {"group": "A", "mode": "normal" if stack else "none"},
        "thresholdsStyle": {"mode": threshold_style if threshold_line else "off"},
    }
    defaults = {"color": {"mode": "palette-classic"}, "custom": custom, "unit": unit, "min": min_,
                "thresholds": thresholds((None, "transparent"), (threshold_line[0], threshold_line[1]))
                if threshold_line else thresholds((None, "green"))}
    if max_ is not None:
        defaults["max"] = max_
    x, y, w, h = grid
    return {
        "type": "timeseries", "title": title, "description": description, "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
        "options": {"legend": {"calcs": ["lastNotNull", "max"], "displayMode": "table", "placement": "bottom",
                               "showLegend": True},
                    "tooltip": {"mode": "multi", "sort": "desc"}},
        "targets": targets,
    }


def override(regex: str, props: dict) -> dict:
    return {"matcher": {"id": "byRegexp", "options": regex},
            "properties": [{"id": k, "value": v} for k, v in props.items()]}


DASHED = {"custom.lineStyle": {"dash": [10, 10], "fill": "dash"}, "custom.fillOpacity": 0}


def panels() -> list[dict]:
    out = []
    # ---- row 1: the training loop's view
    out.append(panel(
        "Checkpoint stall p50 / p99 by mode",
        "Time the training loop was blocked by one checkpoint, per rank: staging (the GPU-to-host copy "
        "stand-in), plus the local write and the drain in sync mode, plus any wait for a late previous "
        "drain in async mode. Quantiles of the stall histogram over every rank of every node, over the "
        "`window` variable. Sync stalls should be much higher than async ones; an async p99 near the "
        "sync one means drains are late.",
        [target(f"histogram_quantile(0.5, sum by (le, mode) "
                f"(rate(ckpt_emu_checkpoint_stall_seconds_bucket{{{J}}}[$window])))", "p50 {{mode}}", "A"),
         target(f"histogram_quantile(0.99, sum by (le, mode) "
                f"(rate(ckpt_emu_checkpoint_stall_seconds_bucket{{{J}}}[$window])))", "p99 {{mode}}", "B")],
        unit="s", grid=(0, 0, 12, 8)))
    for i, mode in enumerate(("sync", "async")):
        out.append(panel(
            f"Checkpoint overhead: {mode}",
            f"Checkpoint overhead of {mode} mode: stall seconds over training-loop seconds, summed over "
            "every rank (recording rule ckpt_emu:overhead:ratio, 5m windows). The dashed line is the MLPerf "
            "rule of thumb (keep checkpointing under 5% of the time). Shown next to the other mode's "
            "panel with the same scale to compare sync and async on the same work; a mode shows no data "
            "while it is not training.",
            [target(f'ckpt_emu:overhead:ratio{{{J},mode="{mode}"}}', "{{job}} " + mode, "A")],
            unit="percentunit", grid=(12 + 6 * i, 0, 6, 8), threshold_line=(0.05, "red"),
            threshold_style="dashed"))
    # ---- row 2: drains
    out.append(panel(
        "Drain overlap (worst node)",
        "Fraction of wall time with a drain to the global tier in progress, on the node that drains "
        "longest. Solid: rate of drain-busy seconds over 5m (recording rule ckpt_emu:drain_overlap:ratio). "
        "Dashed: the emulator's own figure since the mode started, the drain in flight included and not "
        "capped (ckpt_emu_drain_overlap_ratio, as in the report): above 100%, drains are falling behind. "
        "The red line is 10%: most model builders keep overlap below it; above it, the global "
        "tier is close to being too slow for the interval (the CkptEmuDrainOverlapHigh alert fires after "
        "10 minutes above 10% over 30-minute windows).",
        [target(f"ckpt_emu:drain_overlap:ratio{{{J}}}", "{{job}} (5m rate)", "A"),
         target(f"max by (mode) (ckpt_emu_drain_overlap_ratio{{{J}}})", "since {{mode}} start (emulator)", "B")],
        unit="percentunit", grid=(0, 8, 12, 8), threshold_line=(0.1, "red"),
        overrides=[override("since .*", DASHED)]))
    out.append(panel(
        "Drain backlog and deadline misses",
        "Left axis: bytes that drains in flight still have to copy to the global tier, summed over nodes "
        "(it should return to 0 well before the next checkpoint). Right axis, bars: drain deadline misses "
        "per `window` by mode, i.e. checkpoints that started before the previous drain had finished; in "
        "async mode each one adds a wait to that checkpoint's stall.",
        [target(f"sum(ckpt_emu_drain_backlog_bytes{{{J}}})", "backlog", "A"),
         target(f"sum by (mode) (increase(ckpt_emu_drain_deadline_misses_total{{{J}}}[$window]))",
                "deadline misses {{mode}}", "B")],
        unit="bytes", grid=(12, 8, 12, 8),
        overrides=[override("deadline misses.*", {"unit": "short", "custom.axisPlacement": "right",
                                                  "custom.drawStyle": "bars", "custom.fillOpacity": 60,
                                                  "decimals": 0})]))
    # ---- row 3: tiers
    out.append(panel(
        "Write throughput per tier",
        "Bytes written per second to each tier, summed over every rank and node: `local` is the ranks' "
        "checkpoint writes to node-local storage, `global` is the drains (and any direct writes when "
        "there is no local tier or it is full). Bytes are counted when a file or a drain completes, so "
        "long drains show as bursts.",
        [target(f"sum by (tier) (rate(ckpt_emu_written_bytes_total{{{J}}}[$__rate_interval]))", "{{tier}}",
                "A")],
        unit="binBps", grid=(0, 16, 12, 8)))
    out.append(panel(
        "Age of newest durable checkpoint per tier",
        "Seconds since the newest checkpoint became complete (every file present and verified, manifest "
        "written last) on each tier, at each scrape; for the local tier, the node with the oldest one. "
        "This is the work a failure would lose now. The dashed line is the CkptEmuNoDurableCheckpoint "
        "alert threshold: 3 configured checkpoint intervals plus the newest checkpoint's durability lag.",
        [target(f"max by (tier) (timestamp(ckpt_emu_last_complete_checkpoint_timestamp_seconds{{{J}}}) "
                f"- ckpt_emu_last_complete_checkpoint_timestamp_seconds{{{J}}})", "{{tier}}", "A"),
         target(f"3 * max(ckpt_emu_checkpoint_interval_seconds{{{J}}}) + max(ckpt_emu_last_durability_lag_seconds{{{J}}})",
                "alert threshold", "B")],
        unit="s", grid=(12, 16, 12, 8),
        overrides=[override("alert threshold.*", {**DASHED, "color": {"fixedColor": "red", "mode": "fixed"}})]))
    # ---- row 4: MLPerf figures and phases
    out.append(panel(
        "Save / load throughput (GiB/s)",
        "MLPerf-style throughput of the latest save and load: all ranks' bytes over the slowest rank's "
        "time, published by rank 0 after each checkpoint (save: the local write, or the direct global "
        "write) and each restore (load, labelled with the last mode). Restores need more bandwidth than "
        "saves: every data-parallel replica reads the same checkpoint.",
        [target(f"max by (op, mode) (ckpt_emu_throughput_bytes_per_second{{{J}}}) / {GIB}", "{{op}} ({{mode}})",
                "A")],
        unit="GiBs", grid=(0, 24, 12, 8)))
    out.append(panel(
        "Phase duration p99 by phase and tier",
        "99th percentile over `window` of each checkpoint phase, per rank (snapshot, its device-to-host part d2h on a GPU, local_write, load) "
        "or per node (drain): where the time of a checkpoint goes. A drain p99 close to the checkpoint "
        "interval predicts deadline misses.",
        [target(f"histogram_quantile(0.99, sum by (le, phase, tier) "
                f"(rate(ckpt_emu_phase_duration_seconds_bucket{{{J}}}[$window])))", "{{phase}} ({{tier}})", "A")],
        unit="s", grid=(12, 24, 12, 8)))
    # ---- row 5: training and faults
    out.append(panel(
        "Training step time p50 / p99 by mode",
        "Wall time of one training step's emulated compute, per rank. It should stay at the configured "
        "step time; if it grows during async checkpoints, the background writes and drains compete with "
        "the training loop for the host (CPU, memory bandwidth).",
        [target(f"histogram_quantile(0.5, sum by (le, mode) "
                f"(rate(ckpt_emu_step_duration_seconds_bucket{{{J}}}[$__rate_interval])))", "p50 {{mode}}", "A"),
         target(f"histogram_quantile(0.99, sum by (le, mode) "
                f"(rate(ckpt_emu_step_duration_seconds_bucket{{{J}}}[$__rate_interval])))", "p99 {{mode}}", "B")],
        unit="s", grid=(0, 32, 12, 8)))
    out.append(panel(
        "Faults and retries",
        "Events per `window` by kind: injected faults (the failures config section), drain retries, "
        "abandoned and failed drains, checksum mismatches on restore, a full local tier, tier errors. "
        "All zero in a healthy run.",
        [target(f"sum by (kind) (increase(ckpt_emu_faults_total{{{J}}}[$window]))", "{{kind}}", "A")],
        unit="short", grid=(12, 32, 12, 8), draw="bars", stack=True))
    # ---- row 6: what the job loses end to end, and how long a checkpoint takes to be safe
    out.append(panel(
        "Slowdown against the no-checkpoint baseline",
        "Each checkpointing mode's wall time per training step over the baseline's (mode `none`: the "
        "same steps without checkpoints, run first), minus 1, worst rank: everything checkpointing costs "
        "the job, stalls and interference (background writes and drains slowing the steps) alike. "
        "The report splits it into the two.",
        [target(f"max by (mode) (ckpt_emu_slowdown_ratio{{{J}}})", "{{mode}}", "A")],
        unit="percentunit", grid=(0, 40, 12, 8), threshold_line=(0.05, "red"), threshold_style="dashed"))
    out.append(panel(
        "Durability lag p50 / p99 by mode",
        "From a checkpoint's snapshot until it is complete on the global tier (local write, drain, "
        "manifest): how long a checkpoint is at risk after training went on. In async mode this is the "
        "commit cost the interval planner uses.",
        [target(f"histogram_quantile(0.5, sum by (le, mode) "
                f"(rate(ckpt_emu_durability_lag_seconds_bucket{{{J}}}[$window])))", "p50 {{mode}}", "A"),
         target(f"histogram_quantile(0.99, sum by (le, mode) "
                f"(rate(ckpt_emu_durability_lag_seconds_bucket{{{J}}}[$window])))", "p99 {{mode}}", "B")],
        unit="s", grid=(12, 40, 12, 8)))
    for i, p in enumerate(out, start=1):
        p["id"] = i
    return out


def templating() -> dict:
    return {"list": [
        {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
         "current": {}, "hide": 0, "includeAll": False, "multi": False, "options": [], "refresh": 1,
         "regex": "", "skipUrlSync": False},
        {"name": "job", "label": "Job", "type": "query", "datasource": DS,
         "definition": "label_values(ckpt_emu_info, job)",
         "query": {"query": "label_values(ckpt_emu_info, job)", "refId": "PrometheusVariableQueryEditor-VariableQuery",
                   "qryType": 1},
         "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
         "hide": 0, "includeAll": True, "allValue": ".+", "multi": True, "options": [], "refresh": 2,
         "regex": "", "skipUrlSync": False, "sort": 1},
        {"name": "window", "label": "Window (per-checkpoint statistics)", "type": "interval",
         "query": "1m,5m,15m,30m,1h", "auto": False, "auto_count": 30, "auto_min": "10s",
         "current": {"selected": True, "text": "5m", "value": "5m"},
         "options": [{"selected": v == "5m", "text": v, "value": v} for v in ("1m", "5m", "15m", "30m", "1h")],
         "hide": 0, "refresh": 2, "skipUrlSync": False},
    ]}


def dashboard() -> dict:
    return {
        "uid": UID,
        "title": "ckpt-emu: checkpoint stalls, drains and durability",
        "description": "Live metrics of ckpt-emu runs (tiered checkpoint emulator). Generated by grafana/generate.py.",
        "tags": ["ckpt-emu", "checkpointing", "storage"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "liveNow": False,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "fiscalYearStartMonth": 0,
        "weekStart": "",
        "links": [],
        "annotations": {"list": [{
            "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True, "hide": True,
            "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard"}]},
        "templating": templating(),
        "panels": panels(),
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the committed JSON differs")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is out of date: run python3 grafana/generate.py", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
