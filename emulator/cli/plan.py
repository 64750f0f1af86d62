"""``ckpt-emu plan``: the analytic planner (emulator/planner) as a command, with or without a config.

- ``plan CONFIG [--accelerators N] [--nodes N] ...``: the config's design (emulator/design: its job,
  tiers, links, failure classes), resolved for the job the flags name;
- ``plan --accelerators N --size SIZE --bandwidth BW``: a napkin design, N accelerators and one
  global storage of aggregate BW (emulator/design/napkin.py); without ``--bandwidth`` only the
  failure model, the rule of thumb and the bandwidth it needs.

Both print one report: the failures per class and what each costs, one checkpoint's costs, the
reference intervals (rule of thumb, Young, Daly), per mode the best base interval and ``every`` per
tier with its goodput, what each tier needs at it, and what goes to global storage a day (flagged
when absurd; its S3 cost where the global tier is S3). Every flag is read here, in the one unit
grammar (emulator/units.py): a bad value is one line naming it, exit 2, nothing written.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

from emulator import planner
from emulator.cli.common import config_completer
from emulator.errors import ConfigError, UserError
from emulator.units import (
    fmt_bytes,
    fmt_duration,
    fmt_pct,
    fmt_rate,
    parse_duration,
    parse_size,
    rate_and_family,
    table,
)
from tiers.base import TierError
from tiers.safepath import check_reach

DEFAULT_PLOT = "./ckpt-emu-data/plan-sweep.png"
#: bounds far outside anything real that keep every derived figure finite (no overflow, no 0 interval)
MAX_ACCELERATORS = 10 ** 9
MAX_HOURS = 1e9
MAX_SECONDS = 1e9
MAX_BYTES = 10 ** 18
RATES = (1.0, 1e18)


def add_plan_parser(subparsers):
    """Register ``plan`` on an argparse subparsers object; returns its parser."""
    p = subparsers.add_parser(
        "plan", help="best checkpoint intervals, goodput and bandwidth of a design (instant, no I/O)",
        description="Plan a design's checkpoint intervals with the multi-level model: per failure class its "
                    "cost, per mode the best base interval and every-N-th per tier, the bandwidth each tier "
                    "needs, the volume written to global storage. CONFIG is a run config (preset or YAML); "
                    "without one, --accelerators, --size and --bandwidth describe a napkin design.",
        examples=("ckpt-emu plan design-llama405-2048-nvme-pfs",
                  "ckpt-emu plan llama3-405b-subset --accelerators 16384 --bandwidth 400GB/s --sweep",
                  "ckpt-emu plan --accelerators 16384 --size 5.3TB --bandwidth 400Gb/s  # a napkin design"))
    a = p.add_argument
    a("config", nargs="?", default=None, metavar="CONFIG", help="a run config (preset or YAML): plan its design"
      ).completer = config_completer
    a("--set", action="append", metavar="KEY=VALUE", help="override any key of CONFIG")
    a("--accelerators", metavar="N", help="accelerators in the job (CONFIG: its design's, else its preset's)")
    a("--nodes", metavar="N", help="nodes in the job (default: accelerators / the design's accelerators per node)")
    a("--size", metavar="SIZE", help="napkin: the checkpoint (105GiB, 1.5TB) or a preset sized by MLPerf's table")
    a("--bandwidth", metavar="RATE", help="global storage's aggregate write rate (400GB/s, 3.2Tb/s, 50GiB/s)")
    a("--nic", metavar="RATE", help="each node's link (default: the design's, else 400Gb/s)")
    a("--snapshot-rate", metavar="RATE", help="each accelerator's copy to host memory (default: the design's, "
      "else 48GiB/s)")
    a("--mttf-hours", metavar="H", help="MTTF of one accelerator in hours (default: the design's, else 50000)")
    a("--node-loss-fraction", metavar="F", help="share of failures that lose a node (default 0.78)")
    a("--group-loss-fraction", metavar="F", help="share of failures that lose a replica group (default 0.01)")
    a("--restart-seconds", metavar="T", help="one restart or replacement time for every failure class (90s, 10m; "
      "default: each class's own, design.failures)")
    a("--interval", metavar="T", help="the base interval to evaluate beside the best (default: the config's "
      "interval_steps x step_seconds; napkin: the rule of thumb's)")
    a("--calibrate", metavar="RESULTS_JSON", help="CONFIG: rates, fixed costs and recoveries a run measured")
    a("--failures", metavar="TRACE_CSV", help="CONFIG: plan for the failure rates of a trace (TIME[,CLASS] rows, "
      "as simulate reads it) instead of the failure model's")
    a("--checkpoints-per-failure", metavar="K", help="the rule of thumb's checkpoints per failure (default 20)")
    a("--overhead-budget", metavar="F", help="the rule of thumb's share of time for sync checkpoints (default 0.05)")
    a("--overlap-target", metavar="F", help="the largest share of a tier's interval its copy may take (default 0.10)")
    a("--sweep", action="store_true", help="also print goodput against the base interval and write a plot")
    a("--plot", metavar="PATH", help=f"where --sweep writes its PNG (default {DEFAULT_PLOT}; implies --sweep)")
    a("--json", action="store_true", help="print one JSON object instead of tables")
    a("--config", dest="plan_config", metavar="FILE", help="removed: give the run config as `plan CONFIG`")
    p.set_defaults(func=run_plan)
    return p


# --------------------------------------------------------------------------- flags

def _whole(value, flag: str) -> int | None:
    if value is None:
        return None
    try:
        n = int(str(value).strip(), 10)
    except ValueError:
        raise UserError(f"{flag}: expected a whole number, got {value!r}") from None
    if n < 1:
        raise UserError(f"{flag}: must be >= 1, got {value}")
    if n > MAX_ACCELERATORS:
        raise UserError(f"{flag}: must be <= {MAX_ACCELERATORS:,}, got {n:,}")
    return n


def _number(value, flag: str, *, at_most: float | None = None, at_least: float | None = None,
            zero: bool = False) -> float | None:
    if value is None:
        return None
    try:
        v = float(str(value).strip())
    except ValueError:
        raise UserError(f"{flag}: expected a number, got {value!r}") from None
    if not math.isfinite(v) or v < 0 or (v == 0 and not zero):
        raise UserError(f"{flag}: must be a finite number {'>= 0' if zero else '> 0'}, got {value!r}")
    if at_most is not None and v > at_most:
        raise UserError(f"{flag}: must be <= {at_most:g}, got {value}")
    if at_least is not None and v < at_least:
        raise UserError(f"{flag}: must be >= {at_least:g}, got {value}")
    return v


def _rate(value, flag: str) -> tuple[float | None, str | None]:
    if value is None:
        return None, None
    bps, family = rate_and_family(value, flag)
    if not RATES[0] <= bps <= RATES[1]:
        raise UserError(f"{flag}: {value!r} is outside {RATES[0]:g} B/s .. {RATES[1]:g} B/s")
    return bps, family


def _duration(value, flag: str, *, zero: bool = False) -> float | None:
    if value is None:
        return None
    seconds = parse_duration(value, flag, allow_zero=zero)
    if seconds > MAX_SECONDS:
        raise UserError(f"{flag}: {value!r} is more than {MAX_SECONDS:g} s")
    return seconds


def _failure_flags(args) -> dict:
    node = _number(args.node_loss_fraction, "--node-loss-fraction", at_most=1, zero=True)
    group = _number(args.group_loss_fraction, "--group-loss-fraction", at_most=1, zero=True)
    if (node or 0) + (group or 0) > 1:
        raise UserError(f"--node-loss-fraction + --group-loss-fraction: {(node or 0) + (group or 0):g} is above 1")
    mttf = _number(args.mttf_hours, "--mttf-hours", at_most=MAX_HOURS)
    restart = _duration(args.restart_seconds, "--restart-seconds", zero=True)
    return dict(mttf_hours=mttf, node_loss_fraction=node, group_loss_fraction=group, restart_s=restart)


def _plan_options(args) -> dict:
    return {k: v for k, v in (
        ("checkpoints_per_failure", _number(args.checkpoints_per_failure, "--checkpoints-per-failure",
                                                   at_most=1e6, at_least=0.01)),
        ("overhead_budget", _number(args.overhead_budget, "--overhead-budget", at_most=1)),
        ("overlap_target", _number(args.overlap_target, "--overlap-target", at_most=1))) if v is not None}


def resolve_size(text, where: str = "--size") -> tuple[int, str | None]:
    """A size with its unit (105GiB, 1.5TB), or a preset or config file sized by MLPerf's table:
    (bytes, the preset or file it came from, or None)."""
    from emulator.config import load_config, preset_names
    from emulator.config.mapping import names_a_file
    from emulator.sizing import checkpoint_size
    text = str(text).strip()
    path_like = text.endswith((".yaml", ".yml")) or "/" in text or names_a_file(text, or_folder=True)
    if not path_like and text not in preset_names():
        if text[:1].isdigit() or text[:1] in "+-.":
            size = parse_size(text, where)
            if size > MAX_BYTES:
                raise UserError(f"{where}: {text!r} is more than {MAX_BYTES:.0e} bytes")
            return size, None
        raise UserError(f"{where}: {text!r} is neither a size (e.g. 105GiB, 1.5TB) "
                        f"nor a preset ({', '.join(preset_names())})")
    try:
        cfg = load_config(text)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return checkpoint_size(cfg.model, cfg.parallelism).total_bytes, text


# --------------------------------------------------------------------------- the design

def config_design(args, *, calibration=None):
    """(config, design) of ``plan CONFIG``: the job the flags name, the design's tiers and failures."""
    from emulator.config import load_config
    from emulator.design import resolve
    if args.size is not None:
        raise UserError("--size: the config's model sizes its checkpoint (--size is for a napkin plan, "
                        "without CONFIG)")
    cfg = load_config(args.config, list(args.set or []))
    nodes, per_node = job_shape(cfg, _whole(args.accelerators, "--accelerators"), _whole(args.nodes, "--nodes"))
    bandwidth, _ = _rate(args.bandwidth, "--bandwidth")
    nic, _ = _rate(args.nic, "--nic")
    snapshot, _ = _rate(args.snapshot_rate, "--snapshot-rate")
    design = resolve(cfg, nodes=nodes, accelerators_per_node=per_node, calibration=calibration,
                     global_write_bps=bandwidth, nic_bps=nic, snapshot_bps=snapshot,
                     base_interval_s=_duration(args.interval, "--interval"), **_failure_flags(args))
    unpaced = [n for n in design.tiers if n != "peer" and design.sources.get(f"{n}_write") == "none"]
    if unpaced:
        keys = " and ".join(f"{'design.global' if n == 'global' else f'design.node.{n}'} (or "
                            f"tiers.{n}.emulate.write_gib_s)" for n in unpaced)
        raise UserError(f"plan: the {' and '.join(unpaced)} tier{'s have' if len(unpaced) > 1 else ' has'} no rate "
                        f"to plan with: give {keys}, or --calibrate RESULTS_JSON of a run")
    return cfg, design


def _trace_rates(design, path: str):
    """``design`` failing at the rates of the trace at ``path`` (each class's failures over its span)."""
    from dataclasses import replace

    from emulator.simulation.arrivals import Arrivals, read_trace
    rates = Arrivals(design.failures, trace=read_trace(path)).rates()
    return replace(design, failures=design.failures.at_rates(rates))


def job_shape(cfg, accelerators: int | None, nodes: int | None) -> tuple[int | None, int | None]:
    """(nodes, accelerators per node) of the job ``--accelerators`` and ``--nodes`` name (None: the config's)."""
    per_node = cfg.design.accelerators_per_node if cfg.design is not None else 8
    if accelerators is None:
        return nodes, None
    if nodes is None:
        if accelerators % per_node:
            raise UserError(f"--accelerators: {accelerators:,} is not a whole number of {per_node}-accelerator "
                            f"nodes (design.job.accelerators_per_node); give --nodes too")
        return accelerators // per_node, per_node
    if accelerators % nodes:
        raise UserError(f"--nodes: {accelerators:,} accelerators do not split evenly over {nodes:,} nodes")
    return nodes, accelerators // nodes


def napkin(args):
    """(design or None, reference figures, size, preset) of a napkin plan."""
    from emulator.design.napkin import napkin_design
    if args.set:
        raise UserError("--set: overrides a config's keys; give a CONFIG (or describe the napkin with flags)")
    if args.calibrate is not None:
        raise UserError("--calibrate: calibrates a config's design; give the CONFIG the run was made of")
    if args.failures is not None:
        raise UserError("--failures: a trace's rates replace a config's failure model; give a CONFIG")
    accelerators = _whole(args.accelerators, "--accelerators")
    if accelerators is None:
        raise UserError("plan: give a CONFIG, or --accelerators N (with --size and --bandwidth) for a napkin plan")
    size, preset = resolve_size(args.size) if args.size is not None else (None, None)
    bandwidth, family = _rate(args.bandwidth, "--bandwidth")
    if bandwidth is not None and size is None:
        raise UserError("--bandwidth: needs --size, the checkpoint it moves")
    nic, _ = _rate(args.nic, "--nic")
    snapshot, _ = _rate(args.snapshot_rate, "--snapshot-rate")
    failures = _failure_flags(args)
    options = _plan_options(args)
    interval = _duration(args.interval, "--interval")
    nodes = _whole(args.nodes, "--nodes")
    per_node = 8
    if nodes is not None:
        if accelerators % nodes:
            raise UserError(f"--nodes: {accelerators:,} accelerators do not split evenly over {nodes:,} nodes")
        per_node = accelerators // nodes
    design = None
    if bandwidth is not None:
        design = napkin_design(accelerators, size, bandwidth, family=family, accelerators_per_node=per_node,
                               nic_bps=nic, snapshot_bps=snapshot, base_interval_s=interval, **failures)
    mttf = failures["mttf_hours"] or 50_000.0
    figures = planner.reference_figures(accelerators, mttf, **{k: v for k, v in options.items()
                                                               if k != "overlap_target"})
    if figures.cluster_mttf_s < 1:
        raise UserError(f"--mttf-hours: {mttf:g} h over {accelerators:,} accelerators is a cluster MTTF under a second")
    return design, figures, size, preset


# --------------------------------------------------------------------------- the report

def _rate_of(bps: float, family: str) -> str:
    return "unlimited" if math.isinf(bps) else fmt_rate(bps, family)


def _header(p: planner.Plan, label: str) -> list:
    d = p.design
    j = d.job
    per = "" if len(j.groups) == 1 else f", the heaviest node {fmt_bytes(j.heaviest.node_bytes)}"
    return [f"Plan for {label}: {j.nodes:,} node{'s' if j.nodes != 1 else ''} x {j.accelerators_per_node} "
            f"accelerators ({j.accelerators:,}), checkpoint {fmt_bytes(j.checkpoint_bytes)}"
            f" ({fmt_bytes(j.heaviest.node_bytes)} per node{per})", ""]


def _failure_rows(p: planner.Plan) -> list:
    r = p.reference
    rows = [[f"Failures (MTTF {r.mttf_hours:,g} h per accelerator)"],
            ["  cluster MTTF", fmt_duration(r.cluster_mttf_s)],
            ["  failures per day", f"{r.failures_per_day:.3g}"]]
    return rows


def _class_table(p: planner.Plan) -> str:
    rows = [[c.name, f"{c.per_day:.3g}", c.tier, fmt_duration(c.detect_s), fmt_duration(c.restart_s),
             fmt_duration(c.restore_s), fmt_duration(c.recovery_s)] for c in p.classes]
    return table(rows, ["class", "per day", "restores from", "detect", "restart", "restore", "recovery"],
                 left=(0, 2))


def _cost_rows(p: planner.Plan) -> list:
    c, d = p.costs, p.design
    rows = [["One checkpoint, alone (every node at once)"], ["  snapshot", fmt_duration(c.snapshot_s),
                                                              f"{d.sources.get('snapshot', 'design')}"]]
    for name in d.tiers:
        rows.append([f"  {name} copy", fmt_duration(c.copy_s[name]), f"durable {fmt_duration(c.lag_s[name])} "
                     f"after the snapshot"])
    rows += [["  sync stall C", fmt_duration(c.sync_stall_s), "snapshot + every copy"],
             ["  async stall", fmt_duration(c.async_stall_s), "the snapshot"]]
    return rows


def _reference_rows(r) -> list:
    rows = [[f"Reference intervals ({r.checkpoints_per_failure:g} checkpoints per failure, "
             f"{r.overhead_budget * 100:g}% overhead budget)"],
            ["  rule of thumb", fmt_duration(r.rule_of_thumb_s), f"{r.checkpoints_per_day:,.1f} a day, a sync "
             f"checkpoint may take {fmt_duration(r.sync_budget_s)}"]]
    if r.young_s is not None:
        rows += [["  Young sqrt(2CM)", fmt_duration(r.young_s), "for the sync stall C"],
                 ["  Daly", fmt_duration(r.daly_s), "for the sync stall C"]]
    return rows


def _every_text(cell) -> str:
    return ", ".join(f"{n} every {e}" for n, e in list(cell.every.items())[1:]) or "one tier"


def _best_table(p: planner.Plan) -> str:
    rows = []
    for m, s in p.modes.items():
        mark = "<- recommended" if m == p.recommended else ""
        edge = f"on the grid's edge: {', '.join(s.on_edge)}" if s.on_edge else ""
        rows.append([m, fmt_duration(s.best.base_interval_s), _every_text(s.best), fmt_pct(s.best.goodput),
                     fmt_pct(s.configured.goodput), " ".join(x for x in (mark, edge) if x)])
    own = next(iter(p.modes.values())).configured
    return table(rows, ["mode", "interval", "other tiers", "goodput",
                        f"at the design's ({fmt_duration(own.base_interval_s)}, {_every_text(own)})", ""],
                 left=(0, 2, 5))


def _tier_table(p: planner.Plan) -> str:
    rows = []
    for t in p.tiers:
        per = "for the job" if t.scope == "job" else "per node"
        rows.append([t.name, f"every {t.every}", fmt_duration(t.interval_s), fmt_duration(t.copy_s),
                     fmt_pct(t.overlap), f"{_rate_of(t.rate_bps, t.family)} {per}",
                     f"{fmt_rate(t.needed_bps, t.family)} {per}", f"x{t.headroom:.3g}",
                     "" if t.overlap <= p.overlap_target else "over the overlap target"])
    return table(rows, ["tier", "takes", "interval", "copy", "overlap", "moves at",
                        f"needs ({p.overlap_target * 100:g}% overlap)", "headroom", ""], left=(0, 1, 5, 6, 8))


def _volume_lines(p: planner.Plan, s3: dict | None) -> list:
    v = p.volume
    if v is None:
        return []
    lines = [f"Global storage: {fmt_bytes(v.bytes_per_day)} a day ({v.checkpoints_per_day:,.1f} checkpoints, "
             f"{v.per_failure:,.0f} per failure that restores from it)"]
    if v.flagged:
        kept = p.modes[p.recommended].kept
        lines.append(f"  FLAG: more than {v.limit_per_failure:g} checkpoints per failure ("
                     f"{v.limit_per_failure / p.reference.checkpoints_per_failure:g} x the rule of thumb) and more "
                     f"than one every 15 minutes: storage traffic, wear and cost the model does not price, for little goodput")
        if kept is not None:
            g = kept.every.get("global", 1) * kept.base_interval_s
            lines.append(f"  best under that: every {fmt_duration(kept.base_interval_s)}, {_every_text(kept)} "
                         f"(global every {fmt_duration(g)}), goodput {fmt_pct(kept.goodput)} "
                         f"({(kept.goodput - p.best.goodput) * 100:+.2f} points)")
    if s3 is not None:
        from emulator.simulation import s3cost
        lines.append(f"  S3 cost at the recommended interval: {s3cost.format_cost(s3)}")
    return lines


def _config_lines(p: planner.Plan, cfg) -> list:
    step = cfg.training.step_seconds if cfg is not None else 0
    if not step:
        return []
    base = max(1, round(p.best.base_interval_s / step))
    tiers = ", ".join(f"tiers.{n}.interval_steps: {base * e}" for n, e in list(p.best.every.items())[1:] if e > 1)
    return [f"  as config: checkpoint.interval_steps: {base} ({fmt_duration(base * step)} of "
            f"{fmt_duration(step)} steps){', ' + tiers if tiers else ''}"]


def render(p: planner.Plan, label: str, *, cfg=None, s3: dict | None = None) -> str:
    out = _header(p, label)
    out.append(table(_failure_rows(p), indent="", left=(0, 2)))
    out.append(_class_table(p))
    out.append(table(_cost_rows(p) + _reference_rows(p.reference), indent="", left=(0, 2)))
    out += ["", "Best intervals (the multi-level model over a grid of base intervals and every-N-th per tier)",
            _best_table(p), "",
            f"Tiers at the recommended intervals ({p.recommended}, every {fmt_duration(p.best.base_interval_s)})",
            _tier_table(p)]
    out += _config_lines(p, cfg) + _volume_lines(p, s3)
    if p.notes:
        out += ["Notes"] + [f"  - {n}" for n in p.notes]
    return "\n".join(out)


def render_napkin(r, size: int | None, preset: str | None, overlap_target: float) -> str:
    out = [f"Plan for {r.accelerators:,} accelerators (MTTF {r.mttf_hours:,g} h each)"
           + (f", checkpoint {fmt_bytes(size)}" + (f" ({preset})" if preset else "") if size else ""), ""]
    rows = [["Failures"], ["  cluster MTTF", fmt_duration(r.cluster_mttf_s)],
            ["  failures per day", f"{r.failures_per_day:.3g}"]] + _reference_rows(r)
    if size:
        rows += [["Bandwidth needed at the rule of thumb's interval"],
                 ["  sync: size / time budget", fmt_rate(size / r.sync_budget_s)],
                 [f"  async: size / ({overlap_target * 100:g}% x interval)",
                  fmt_rate(size / (overlap_target * r.rule_of_thumb_s))],
                 ["  written per day", fmt_bytes(size * r.checkpoints_per_day)]]
    out.append(table(rows, indent="", left=(0, 2)))
    out.append("give --size and --bandwidth (or a CONFIG) for the best intervals and their goodput"
               if not size else "give --bandwidth (the global storage's write rate) for the best intervals and "
                                "their goodput")
    return "\n".join(out)


#: the sweep shows the base intervals where some mode is within this many points of its best
SWEEP_SPAN = 0.20


def _shown(p: planner.Plan) -> list:
    """Indices of the grid's base intervals the sweep shows: where some mode comes within SWEEP_SPAN of its best."""
    curves = [(s.curve, s.best.goodput) for s in p.modes.values()]
    return [k for k in range(len(curves[0][0])) if any(c[k][1] >= best - SWEEP_SPAN for c, best in curves)]


def render_sweep(p: planner.Plan) -> str:
    modes = list(p.modes)
    curves = [p.modes[m].curve for m in modes]
    rows = []
    for k in _shown(p):
        marks = [f"<- {m}" for m, c in zip(modes, curves) if c[k][0] == p.modes[m].grid_best.base_interval_s]
        rows.append([fmt_duration(curves[0][k][0])] + [fmt_pct(c[k][1]) for c in curves] + [" ".join(marks)])
    lines = [f"Goodput against the base interval (each at its best every-N-th per tier; within "
             f"{SWEEP_SPAN * 100:g} points of a best)", table(rows, ["interval", *modes, ""], left=(0, len(modes) + 1))]
    for m in modes:
        b = p.modes[m].best
        lines.append(f"  best {m}: every {fmt_duration(b.base_interval_s)}, goodput {fmt_pct(b.goodput)}")
    return "\n".join(lines)


def plot_figure(p: planner.Plan):
    """Goodput against the base interval for each mode, the optima and the reference intervals marked."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    fig = Figure(figsize=(8, 5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    shown = _shown(p)
    for (mode, s), color in zip(p.modes.items(), ("tab:blue", "tab:orange")):
        ax.plot([s.curve[k][0] / 60 for k in shown], [s.curve[k][1] * 100 for k in shown], color=color, label=mode)
        ax.plot([s.best.base_interval_s / 60], [s.best.goodput * 100], marker="*", markersize=14, color=color,
                linestyle="none", label=f"best {mode}: {fmt_duration(s.best.base_interval_s)}, "
                                        f"{fmt_pct(s.best.goodput)}")
    r = p.reference
    for name, t, style in (("rule of thumb", r.rule_of_thumb_s, ":"), ("Young", r.young_s, "--"),
                           ("Daly", r.daly_s, "-.")):
        if t is not None:
            ax.axvline(t / 60, color="grey", linestyle=style, linewidth=1, label=f"{name}: {fmt_duration(t)}")
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    best = [s.best.goodput * 100 for s in p.modes.values()]
    ax.set_ylim(max(0.0, min(best) - 25), min(100.0, max(best) + 2))
    ax.set_xlabel("base checkpoint interval (minutes)")
    ax.set_ylabel("expected goodput (%)")
    ax.set_title(f"{p.design.job.accelerators:,} accelerators, cluster MTTF {fmt_duration(r.cluster_mttf_s)}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower center")
    return fig


def write_plot(p: planner.Plan, path: str) -> Path:
    """PNG of :func:`plot_figure` at ``path`` (parent folders are created)."""
    out = Path(path)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        plot_figure(p).savefig(out, format="png")
    except OSError as exc:
        raise UserError(f"--plot {path}: cannot write: {exc.strerror}") from None
    return out


def s3_figures(cfg, p: planner.Plan) -> dict | None:
    """The S3 cost of the recommended global interval, where the config's global tier is S3."""
    if cfg is None or cfg.tiers.global_.backend != "s3" or "global" not in p.best.every:
        return None
    from emulator.simulation import s3cost
    part = cfg.tiers.global_.options.part_size_mib * (1 << 20)
    groups = [(g.nodes, g.files, g.file_bytes) for g in p.design.job.groups]
    verify = p.design.verify if p.design.tiers[0] != "global" else "none"
    ckpt, restore = s3cost.job_requests(groups, part, verify=verify, keep=p.design.tier("global").keep)
    interval = p.best.every["global"] * p.best.terms.period_s
    return s3cost.cost_figures(cfg.cost, checkpoint=ckpt, checkpoint_bytes=p.design.job.checkpoint_bytes,
                               keep=p.design.tier("global").keep, interval_s=interval, restore=restore,
                               restore_bytes=p.design.job.checkpoint_bytes)


def _label(cfg) -> str:
    return cfg.model.name if cfg is not None else "a napkin design"


def _check_plot_path(path: str) -> None:
    """Before any work: the plot's folder exists or can be made (a file on its way is refused)."""
    try:
        there, _ = check_reach(Path(path).parent, what=f"--plot {path}")
    except NotADirectoryError as exc:
        raise UserError(f"--plot {path}: cannot write: {exc.filename} is not a directory") from None
    except TierError as exc:
        raise UserError(str(exc)) from None
    if not os.access(there, os.W_OK | os.X_OK):
        raise UserError(f"--plot {path}: cannot write: {there} is not writable")


def run_plan(args) -> int:
    if args.plan_config is not None:
        raise UserError("--config: a plan: section is no longer read; give the run config as `plan CONFIG`, or "
                        "describe the job with flags (--accelerators, --size, --bandwidth)")
    want_sweep = args.sweep or args.plot is not None
    if want_sweep:
        _check_plot_path(args.plot or DEFAULT_PLOT)
    options = _plan_options(args)
    cfg = None
    if args.config is not None:
        calibration = None
        if args.calibrate is not None:
            from emulator.simulation.calibrate import read_calibration
            calibration = read_calibration(args.calibrate)
        cfg, design = config_design(args, calibration=calibration)
        if args.failures is not None:
            design = _trace_rates(design, args.failures)
    else:
        design, figures, size, preset = napkin(args)
        if design is None:
            if want_sweep:
                raise UserError("--sweep: needs the costs: give --size and --bandwidth (or a CONFIG)")
            overlap = options.get("overlap_target", planner.OVERLAP_TARGET)
            if args.json:
                print(json.dumps({"reference": vars(figures), "checkpoint_bytes": size, "size_from": preset}, indent=1))
            else:
                print(render_napkin(figures, size, preset, overlap))
            return 0
    p = planner.plan(design, **options)
    plot = write_plot(p, args.plot or DEFAULT_PLOT) if want_sweep else None
    s3 = s3_figures(cfg, p)
    if args.json:
        d = p.to_dict()
        d.update(s3_cost=s3, plot=str(plot) if plot else None)
        print(json.dumps(d, indent=1))
        return 0
    print(render(p, _label(cfg), cfg=cfg, s3=s3))
    if want_sweep:
        print()
        print(render_sweep(p))
        print(f"\nplot written to {plot}")
    return 0
