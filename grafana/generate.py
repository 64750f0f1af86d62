"""Generate grafana/dashboards/ckpt-emu.json (the committed file is this script's output).

    python3 grafana/generate.py            # rewrite the JSON
    python3 grafana/generate.py --check    # exit 1 if the committed JSON is out of date

Edit the panels here, not in the JSON; tests/unit/metrics/test_grafana.py fails when they differ.

The dashboard is built with grafana-foundation-sdk, Grafana's dashboards-as-code library (its
typed builders and models; its JSON encoder writes the file). It is a development dependency
only (the ``test`` extra): nothing in ``emulator`` imports it. The JSON is the output of the build
constraints.txt pins, the one generated for Grafana 11.0 (schema 39, the version of this
dashboard): the SDK publishes one build per Grafana version and the builds write different
defaults, so another one would rewrite the file; :func:`render` refuses to run with it.

Every panel and the ``job`` variable use the ``datasource`` variable (uid
``${datasource}``), so the dashboard works with any Prometheus datasource, whatever its
name or uid, without ``__inputs``. Variables: ``datasource``, ``job`` (the scrape job(s)
of the run, from ``ckpt_emu_info``) and ``window`` (the window for per-checkpoint
statistics: checkpoints come once per interval, often minutes apart, so
``$__rate_interval`` would mostly see none). Byte and time rates use
``$__rate_interval``.

Every series the emulator serves is the full-size design's (durations on the design's clock, bytes
of the full-size checkpoint: emulator/metrics.py), so a panel shows it as served. Only what
Prometheus derives from the wall clock is converted here: a rate() is per wall second, x
``ckpt_emu_time_factor`` per second of the design; an age, / it. Units are decimal (GB/s, GB), the
family the shipped designs are written in (docs/metrics-and-dashboards.md).
"""
from __future__ import annotations

import argparse
import json
import sys
from importlib.metadata import version
from pathlib import Path

from grafana_foundation_sdk.builders import common, dashboard, prometheus, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models.common import (
    AxisColorMode, AxisPlacement, BarAlignment, GraphDrawStyle, GraphGradientMode, GraphThresholdsStyleMode,
    LegendDisplayMode, LegendPlacement, LineInterpolation, LineStyle, ScaleDistribution, SortOrder, StackingMode,
    TooltipDisplayMode, VisibilityMode)
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync, DataSourceRef, DynamicConfigValue, FieldColor, FieldColorModeId, GridPos, Threshold,
    VariableHide, VariableOption, VariableRefresh, VariableSort)
from grafana_foundation_sdk.models.prometheus import QueryEditorMode

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "grafana" / "dashboards" / "ckpt-emu.json"
UID = "ckpt-emu"
SCHEMA_VERSION = 39  # as Grafana 11.0 writes it; the SDK's model defaults to 36
SDK = "grafana-foundation-sdk"
DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
J = 'job=~"$job"'


#: the run's time factor (wall seconds here per second of the design: scale x dilation,
#: docs/time-dilation.md): a rate() of a served counter (per wall second) times it is per design second,
#: an age on the wall clock over it is the design's
TIME_FACTOR = f"scalar(max(ckpt_emu_time_factor{{{J}}}))"


def target(expr: str, legend: str, ref: str) -> prometheus.Dataquery:
    """A range query in code mode on the ``datasource`` variable."""
    return (prometheus.Dataquery().datasource(DS).editor_mode(QueryEditorMode.CODE).expr(expr)
            .legend_format(legend).range().ref_id(ref))


def thresholds(line: tuple | None) -> dashboard.ThresholdsConfig:
    """No threshold (green), or a (value, colour) line over a transparent base."""
    steps = [Threshold(value=None, color="transparent"), Threshold(value=line[0], color=line[1])] if line \
        else [Threshold(value=None, color="green")]
    return dashboard.ThresholdsConfig().mode(model.ThresholdsMode.ABSOLUTE).steps(steps)


def series_style(p: timeseries.Panel, draw: GraphDrawStyle, stack: bool,
                 threshold_style: GraphThresholdsStyleMode) -> timeseries.Panel:
    """The series style every panel shares, every field written out as Grafana saves it, with the
    drawing, stacking and threshold style of this panel."""
    return (p.axis_border_show(False).axis_centered_zero(False).axis_color_mode(AxisColorMode.TEXT).axis_label("")
            .axis_placement(AxisPlacement.AUTO).bar_alignment(BarAlignment.CENTER).draw_style(draw).fill_opacity(10)
            .gradient_mode(GraphGradientMode.NONE)
            .hide_from(common.HideSeriesConfig().legend(False).tooltip(False).viz(False))
            .insert_nulls(False).line_interpolation(LineInterpolation.LINEAR).line_width(1).point_size(4)
            .scale_distribution(common.ScaleDistributionConfig().type(ScaleDistribution.LINEAR))
            .show_points(VisibilityMode.AUTO).span_nulls(False)
            .stacking(common.StackingConfig().group("A").mode(StackingMode.NORMAL if stack else StackingMode.NONE))
            .thresholds_style(common.GraphThresholdsStyleConfig().mode(threshold_style)))


def panel(title: str, description: str, targets: list, *, unit: str, grid: tuple, threshold_line: tuple | None = None,
          threshold_style: GraphThresholdsStyleMode = GraphThresholdsStyleMode.LINE, overrides: list | None = None,
          draw: GraphDrawStyle = GraphDrawStyle.LINE, stack: bool = False) -> timeseries.Panel:
    """A time-series panel at grid = (x, y, w, h), its axis from 0, with a table legend (last and max)
    and a multi-series tooltip; threshold_line = (value, colour) draws that line in threshold_style."""
    x, y, w, h = grid
    p = (timeseries.Panel().title(title).description(description).datasource(DS)
         .grid_pos(GridPos(x=x, y=y, w=w, h=h)).targets(targets)
         .color_scheme(dashboard.FieldColor().mode(FieldColorModeId.PALETTE_CLASSIC))
         .unit(unit).min(0).thresholds(thresholds(threshold_line))
         .legend(common.VizLegendOptions().calcs(["lastNotNull", "max"]).display_mode(LegendDisplayMode.TABLE)
                 .placement(LegendPlacement.BOTTOM).show_legend(True))
         .tooltip(common.VizTooltipOptions().mode(TooltipDisplayMode.MULTI).sort(SortOrder.DESCENDING)))
    series_style(p, draw, stack, threshold_style if threshold_line else GraphThresholdsStyleMode.OFF)
    for regex, properties in overrides or []:
        p.override_by_regexp(regex, properties)
    return p


def override(regex: str, props: dict) -> tuple[str, list[DynamicConfigValue]]:
    """Field properties (id: value) for the series whose names match regex."""
    return regex, [DynamicConfigValue(id_val=k, value=v) for k, v in props.items()]


DASHED = {"custom.lineStyle": LineStyle(dash=[10, 10], fill="dash"), "custom.fillOpacity": 0}


def panels() -> list[timeseries.Panel]:
    """The panels, row by row (two 12-wide panels or 12 + 6 + 6 per row, 8 high), numbered from 1."""
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
            threshold_style=GraphThresholdsStyleMode.DASHED))
    # ---- row 2: drains
    out.append(panel(
        "Drain overlap (worst node)",
        "Fraction of the design's time with a drain to the global tier in progress, on the node that "
        "drains longest. Solid: rate of drain-busy seconds over 5m, per second of the design (recording "
        "rule ckpt_emu:drain_overlap:ratio). Dashed: the emulator's own figure since the mode started, the "
        "drain in flight included and not capped (ckpt_emu_drain_overlap_ratio, as in the report's "
        "brackets): above 100%, drains are falling behind. "
        "The red line is 10%: most model builders keep overlap below it; above it, the global "
        "tier is close to being too slow for the interval (the CkptEmuDrainOverlapHigh alert fires after "
        "10 minutes above 10% over 30-minute windows).",
        [target(f"ckpt_emu:drain_overlap:ratio{{{J}}}", "{{job}} (5m rate)", "A"),
         target(f"max by (mode) (ckpt_emu_drain_overlap_ratio{{{J}}})", "since {{mode}} start (emulator)", "B")],
        unit="percentunit", grid=(0, 8, 12, 8), threshold_line=(0.1, "red"),
        overrides=[override("since .*", DASHED)]))
    out.append(panel(
        "Drain backlog and deadline misses",
        "Left axis: bytes (of the full-size checkpoint) that drains in flight still have to copy to the "
        "global tier, summed over nodes (it should return to 0 well before the next checkpoint). Right axis, bars: drain deadline misses "
        "per `window` by mode, i.e. checkpoints that started before the previous drain had finished; in "
        "async mode each one adds a wait to that checkpoint's stall.",
        [target(f"sum(ckpt_emu_drain_backlog_bytes{{{J}}})", "backlog", "A"),
         target(f"sum by (mode) (increase(ckpt_emu_drain_deadline_misses_total{{{J}}}[$window]))",
                "deadline misses {{mode}}", "B")],
        unit="decbytes", grid=(12, 8, 12, 8),
        overrides=[override("deadline misses.*", {"unit": "short", "custom.axisPlacement": AxisPlacement.RIGHT,
                                                  "custom.drawStyle": GraphDrawStyle.BARS,
                                                  "custom.fillOpacity": 60, "decimals": 0})]))
    # ---- row 3: tiers
    out.append(panel(
        "Write throughput per tier",
        "Bytes of the full-size checkpoint written per second of the design to each tier, summed over "
        "every rank and node: `local` is the ranks' checkpoint writes to node-local storage, `global` is "
        "the drains (and any direct writes when there is no local tier or it is full). Bytes are counted "
        "when a file or a drain completes, so long drains show as bursts.",
        [target(f"sum by (tier) (rate(ckpt_emu_written_bytes_total{{{J}}}[$__rate_interval])) * {TIME_FACTOR}",
                "{{tier}}", "A")],
        unit="Bps", grid=(0, 16, 12, 8)))
    out.append(panel(
        "Age of newest durable checkpoint per tier",
        "Seconds of the design since the newest checkpoint became complete (every file present and "
        "verified, manifest written last) on each tier the run has (memory, peer, local, global), at each "
        "scrape (the wall clock's age over ckpt_emu_time_factor); for the per-node tiers, the node with "
        "the oldest one. This is the work a failure that the tier survives "
        "would lose now. The dashed line is the CkptEmuNoDurableCheckpoint alert threshold: 3 of the "
        "global tier's intervals plus the newest checkpoint's durability lag (each tier's own threshold: "
        "the panel 'Checkpoint age per tier over its alert threshold').",
        [target(f"max by (tier) (timestamp(ckpt_emu_last_complete_checkpoint_timestamp_seconds{{{J}}}) "
                f"- ckpt_emu_last_complete_checkpoint_timestamp_seconds{{{J}}}) / {TIME_FACTOR}", "{{tier}}", "A"),
         target(f"3 * max(ckpt_emu:global_interval:seconds{{{J}}}) + max(ckpt_emu_last_durability_lag_seconds{{{J}}})",
                "alert threshold", "B")],
        unit="s", grid=(12, 16, 12, 8),
        overrides=[override("alert threshold.*",
                            {**DASHED, "color": FieldColor(mode=FieldColorModeId.FIXED, fixed_color="red")})]))
    # ---- row 4: MLPerf figures and phases
    out.append(panel(
        "Save / load throughput at full size",
        "MLPerf-style throughput of the latest save and load at full size: the full-size checkpoint's "
        "bytes over the slowest rank's time on the design's clock (the report's save throughput in "
        "brackets), published by rank 0 after each checkpoint (save: the local write, or the direct "
        "global write) and each restore (load, labelled with the last mode). Restores need more "
        "bandwidth than saves: every data-parallel replica reads the same checkpoint.",
        [target(f"max by (op, mode) (ckpt_emu_throughput_bytes_per_second{{{J}}})", "{{op}} ({{mode}})", "A")],
        unit="Bps", grid=(0, 24, 12, 8)))
    out.append(panel(
        "Phase duration p99 by phase and tier",
        "99th percentile over `window` of each checkpoint phase, per rank (snapshot, its device-to-host part d2h on a GPU, local_write, load) "
        "or per node (drain); with multi-level checkpointing also replicate (the send to the peers), "
        "persist (memory to NVMe) and fetch (a replacement node's copy back from a peer): where the time "
        "of a checkpoint goes. A drain p99 close to the checkpoint interval predicts deadline misses.",
        [target(f"histogram_quantile(0.99, sum by (le, phase, tier) "
                f"(rate(ckpt_emu_phase_duration_seconds_bucket{{{J}}}[$window])))", "{{phase}} ({{tier}})", "A")],
        unit="s", grid=(12, 24, 12, 8)))
    # ---- row 5: training and faults
    out.append(panel(
        "Training step time p50 / p99 by mode",
        "Time of one training step's emulated compute at full size, per rank. It should stay at the "
        "configured step time (training.step_seconds); if it grows during async checkpoints, the background writes and drains compete with "
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
        unit="short", grid=(12, 32, 12, 8), draw=GraphDrawStyle.BARS, stack=True))
    # ---- row 6: what the job loses end to end, and how long a checkpoint takes to be safe
    out.append(panel(
        "Slowdown against the no-checkpoint baseline",
        "Each checkpointing mode's time per training step over the baseline's (mode `none`: the "
        "same steps without checkpoints, run first), minus 1, on the design's clock, worst rank: everything checkpointing costs "
        "the job, stalls and interference (background writes and drains slowing the steps) alike. "
        "The report splits it into the two.",
        [target(f"max by (mode) (ckpt_emu_slowdown_ratio{{{J}}})", "{{mode}}", "A")],
        unit="percentunit", grid=(0, 40, 12, 8), threshold_line=(0.05, "red"),
        threshold_style=GraphThresholdsStyleMode.DASHED))
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
    # ---- row 7: what the global tier is asked (S3)
    out.append(panel(
        "S3 requests per second by kind and phase",
        "Requests the ranks send to an S3 global tier, every attempt (retries included), by kind (PUT, "
        "the multipart requests, GET, HEAD, LIST, DELETE) and the phase they are charged to: checkpoint "
        "(upload, verification, manifest, retention) or restore, per wall second. These are this run's "
        "requests, at its scale (fewer parts than the full-size files have): the report's S3 section "
        "gives them at full size. Compare those with the store's per-prefix limits (AWS: 3,500 PUT-class "
        "and 5,500 GET-class per second); all zero without S3. docs/s3-requests.md prices them.",
        [target(f"sum by (kind, phase) (rate(ckpt_emu_s3_requests_total{{{J}}}[$__rate_interval]))",
                "{{kind}} ({{phase}})", "A")],
        unit="reqps", grid=(0, 48, 24, 8)))
    out += tier_panels()
    for i, p in enumerate(out, start=1):
        p.id(i)
    return out


def tier_panels() -> list[timeseries.Panel]:
    """Rows 8 and 9: multi-level checkpointing, each tier against its own interval, and what a
    failure of each class costs."""
    age = f"ckpt_emu:tier_checkpoint_age:seconds{{{J}}}"
    threshold = f"(3 * ckpt_emu:tier_interval:seconds{{{J}}} + ckpt_emu:tier_durability_lag:seconds{{{J}}})"
    return [
        panel("Checkpoint age per tier over its alert threshold",
              "Seconds since the newest checkpoint complete on each tier the run announced (the node with "
              "the oldest one), over that tier's alert threshold: 3 of the tier's configured intervals "
              "plus its newest checkpoint's lag (recording rules ckpt_emu:tier_*). A healthy tier stays "
              "near 1/3 or below; above the red line at 100% for a minute, CkptEmuTierCheckpointStale "
              "fires (memory, peer, local; the global tier's alert is CkptEmuNoDurableCheckpoint). "
              "Before a tier's first checkpoint the age counts from the first checkpointing mode's start.",
              [target(f"max by (tier) ({age} / {threshold})", "{{tier}}", "A")],
              unit="percentunit", grid=(0, 56, 12, 8), threshold_line=(1, "red"),
              threshold_style=GraphThresholdsStyleMode.DASHED),
        panel("Durability lag p50 / p99 by tier",
              "From a checkpoint's snapshot until it is complete on each tier, over `window`: memory "
              "(the copy into host memory), peer (the replica in other nodes' memory), local (persisted "
              "to NVMe), global. Until then a failure the tier would survive loses that checkpoint; a "
              "lag near the tier's interval means the tier is not keeping up.",
              [target(f"histogram_quantile(0.5, sum by (le, tier) "
                      f"(rate(ckpt_emu_tier_durability_lag_seconds_bucket{{{J}}}[$window])))", "p50 {{tier}}", "A"),
               target(f"histogram_quantile(0.99, sum by (le, tier) "
                      f"(rate(ckpt_emu_tier_durability_lag_seconds_bucket{{{J}}}[$window])))", "p99 {{tier}}", "B")],
              unit="s", grid=(12, 56, 12, 8)),
        panel("Recovery time by failure class",
              "Time from a failure until training runs again, slowest rank (restart of the pipeline, "
              "fetch from a peer, restore), mean and p99 over `window`, by class: process (a crash; host "
              "memory survives), node (a node lost; its peers hold a copy), group (a replica group lost; "
              "restore from the global tier). Failures are rare: pick a window longer than the time "
              "between them, or the lines show only for a window after each recovery.",
              [target(f"sum by (failure_class) (rate(ckpt_emu_recovery_seconds_sum{{{J}}}[$window])) "
                      f"/ sum by (failure_class) (rate(ckpt_emu_recovery_seconds_count{{{J}}}[$window]))",
                      "mean {{failure_class}}", "A"),
               target(f"histogram_quantile(0.99, sum by (le, failure_class) "
                      f"(rate(ckpt_emu_recovery_seconds_bucket{{{J}}}[$window])))", "p99 {{failure_class}}", "B")],
              unit="s", grid=(0, 64, 12, 8)),
        panel("Work lost by the latest recovery, by failure class",
              "Training time lost by the most recent recovery from a failure of each class: from the "
              "step of the checkpoint it restored to the failure. The interval of the tier a class "
              "restores from bounds it (process: memory; node: peer; group: global). No line for a class "
              "that has not failed.",
              [target(f"max by (failure_class) (ckpt_emu_last_lost_work_seconds{{{J}}})", "{{failure_class}}", "A")],
              unit="s", grid=(12, 64, 12, 8)),
    ] + soak_panels()


def soak_panels() -> list[timeseries.Panel]:
    """Row 10: a soak (ckpt-emu run --soak): how many recoveries it made, and what must stay flat."""
    return [
        panel("Soak: recoveries per window, by failure class",
              "Recoveries of a soak (`ckpt-emu run --soak`, failures injected on a schedule) per `window`, "
              "by failure class, and their total: every scheduled failure should show here once, and the run "
              "train on after it. Their durations are in the panel 'Recovery time by failure class'.",
              [target(f"sum by (failure_class) (increase(ckpt_emu_recovery_seconds_count{{{J}}}[$window]))",
                      "{{failure_class}}", "A"),
               target(f"sum(ckpt_emu_recovery_seconds_count{{{J}}})", "total", "B")],
              unit="short", grid=(0, 72, 12, 8),
              overrides=[override("total", {"custom.axisPlacement": AxisPlacement.RIGHT, **DASHED})]),
        panel("Soak: resident memory and tier files",
              "What a soak must keep flat, sampled after each of its checkpoints: the resident memory of "
              "the nodes' rank processes (left axis, summed over ranks and nodes) and the files in each "
              "directory tier's folder (right axis, the fullest node's). A line that keeps rising over "
              "hours is a leak; a saw-tooth of a checkpoint's files is retention at work.",
              [target(f"sum(ckpt_emu_resident_bytes{{{J}}})", "resident memory", "A"),
               target(f"max by (tier) (ckpt_emu_tier_files{{{J}}})", "{{tier}} files", "B")],
              unit="decbytes", grid=(12, 72, 12, 8),
              overrides=[override(".* files", {"unit": "short", "custom.axisPlacement": AxisPlacement.RIGHT,
                                              "decimals": 0})]),
    ]


def datasource_variable() -> dashboard.DatasourceVariable:
    """Any Prometheus datasource: every query uses it."""
    return (dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus")
            .hide(VariableHide.DONT_HIDE).include_all(False).multi(False).regex(""))


def job_variable() -> dashboard.QueryVariable:
    """The scrape job(s) of the run, all by default (``.+``, not the list of values)."""
    query = "label_values(ckpt_emu_info, job)"
    return (dashboard.QueryVariable("job").label("Job").datasource(DS)
            .query({"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery", "qryType": 1})
            .current(VariableOption(selected=True, text=["All"], value=["$__all"]))
            .hide(VariableHide.DONT_HIDE).include_all(True).all_value(".+").multi(True).options([])
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED).regex("").sort(VariableSort.ALPHABETICAL_ASC))


def window_variable() -> dashboard.IntervalVariable:
    """The window of per-checkpoint statistics, 5m by default (see the module docstring)."""
    values = ("1m", "5m", "15m", "30m", "1h")
    return (dashboard.IntervalVariable("window").label("Window (per-checkpoint statistics)").values(",".join(values))
            .auto(False).step_count(30).min_interval("10s")
            .current(VariableOption(selected=True, text="5m", value="5m"))
            .options([VariableOption(selected=v == "5m", text=v, value=v) for v in values])
            .hide(VariableHide.DONT_HIDE))


def annotations() -> dashboard.AnnotationQuery:
    """Grafana's built-in annotations and alerts, hidden."""
    return (dashboard.AnnotationQuery().built_in(1).datasource(DataSourceRef(type_val="grafana", uid="-- Grafana --"))
            .enable(True).hide(True).icon_color("rgba(0, 211, 255, 1)").name("Annotations & Alerts")
            .type("dashboard"))


def build() -> model.Dashboard:
    """The whole dashboard, as the SDK's model."""
    d = (dashboard.Dashboard("ckpt-emu: checkpoint stalls, drains and durability").uid(UID)
         .description("Live metrics of ckpt-emu runs (tiered checkpoint emulator). Generated by grafana/generate.py.")
         .tags(["ckpt-emu", "checkpointing", "storage"]).version(1).editable().tooltip(DashboardCursorSync.CROSSHAIR)
         .live_now(False).refresh("10s").time("now-1h", "now").timezone("").fiscal_year_start_month(0).week_start("")
         .links([]).annotation(annotations())
         .variables([datasource_variable(), job_variable(), window_variable()]))
    for p in panels():
        d.with_panel(p)
    out = d.build()
    out.schema_version = SCHEMA_VERSION  # the builder has no setter for it
    return out


def pinned_sdk() -> str | None:
    """The SDK version constraints.txt pins (None without a pin)."""
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        name, _, pinned = line.partition("==")
        if name.strip() == SDK:
            return pinned.strip()
    return None


def render() -> str:
    """The dashboard's JSON, as committed; only with the pinned SDK build, whose output it is."""
    pinned, installed = pinned_sdk(), version(SDK)
    if installed != pinned:
        raise RuntimeError(f"{SDK} {installed} is installed, constraints.txt pins {pinned}: "
                           "pip install -c constraints.txt -e '.[test]'")
    return json.dumps(build(), cls=JSONEncoder, indent=2) + "\n"


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
