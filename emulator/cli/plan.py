"""``ckpt-emu plan``: the planner (emulator/planner.py) as a command.

Values come from defaults, then a ``plan:`` section of ``--config FILE``, then
flags, the later winning. Flags are parsed here rather than by argparse types
so every bad value becomes one UserError/ConfigError line naming the flag or
key it came from (the top-level CLI prints it as "ckpt-emu: error: ..." and
exits 2).

``ckpt-emu plan CONFIG`` plans a run config's levels instead (memory, peer, NVMe, global:
emulator/simulation/level_design.py): per tier its interval and bandwidth, goodput by the
analytic model and by the SimPy level model, the planner's intervals, and per failure class
its recovery and the work it loses.
"""
from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

from emulator import planner
from emulator.config.mapping import load_yaml, read_config_text
from emulator.errors import ConfigError, UserError
from emulator.units import fmt_bytes, fmt_duration, fmt_pct, fmt_rate, table
from tiers.base import TierError
from tiers.safepath import check_reach

DEFAULT_PLOT = "./ckpt-emu-data/plan-sweep.png"

#: YAML key / flag stem -> PlanInputs field; "size" is the one renamed
_KEYS = {
    "accelerators": "accelerators",
    "mttf_hours": "mttf_hours",
    "checkpoints_per_failure": "checkpoints_per_failure",
    "overhead_budget": "overhead_budget",
    "size": "checkpoint_bytes",
    "restart_seconds": "restart_seconds",
    "stall_seconds": "stall_seconds",
    "drain_seconds": "drain_seconds",
    "async_stall_seconds": "async_stall_seconds",
    "commit_seconds": "commit_seconds",
    "overlap_target": "overlap_target",
    "bandwidth": "bandwidth",
}
_UNITS = {"": 1, "b": 1}
for _i, _p in enumerate("kmgtp", start=1):
    _UNITS[_p] = _UNITS[_p + "b"] = 1000 ** _i
    _UNITS[_p + "ib"] = 1024 ** _i
_SIZE_RE = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?)\s*([a-z]*)\s*$", re.IGNORECASE)


def _amount(text):
    """A number with an optional byte unit -> float (may be negative or inf); None if it is not one."""
    if isinstance(text, bool):
        return None
    if isinstance(text, int):  # exact (a YAML integer)
        return text if abs(text) < 10 ** 300 else (math.inf if text > 0 else -math.inf)
    if isinstance(text, float):
        return text
    m = _SIZE_RE.match(str(text))
    if not m or m.group(2).lower() not in _UNITS:
        return None
    if re.fullmatch(r"[+-]?\d+", m.group(1)):  # exact for whole numbers of any size
        n = int(m.group(1)) * _UNITS[m.group(2).lower()]
        return n if abs(n) < 10 ** 300 else (math.inf if n > 0 else -math.inf)
    return float(m.group(1)) * _UNITS[m.group(2).lower()]


def parse_bytes(text) -> int | None:
    """'105GiB', '1.5TB', '123456', '2e12' -> bytes; None if it is not a byte size.

    Units are case-insensitive: K/M/G/T/P(B) are powers of 1000, KiB..PiB of 1024.
    A size with a sign is parsed (so that the caller can say it must be > 0);
    one that is not finite is None.
    """
    v = _amount(text)
    if v is None or not math.isfinite(v):
        return None
    return v if isinstance(v, int) else int(round(v))


def resolve_size(text, where: str = "--size") -> tuple[int, str | None]:
    """A byte size, or a preset name / config file sized with MLPerf's formulas.

    Returns (bytes, preset-or-file name or None).
    """
    v = _amount(text)
    if v is not None:
        if not math.isfinite(v):
            raise UserError(f"{where}: {text!r} is not a finite size")
        n = v if isinstance(v, int) else int(round(v))
        if n <= 0:
            raise UserError(f"{where}: must be > 0 bytes, got {text!r}")
        return n, None
    from emulator.config import load_config, preset_names
    from emulator.sizing import checkpoint_size

    text = str(text).strip()
    path_like = text.endswith((".yaml", ".yml")) or "/" in text or Path(text).exists()
    if not path_like and text not in preset_names():
        raise UserError(f"{where}: {text!r} is neither a size (e.g. 105GiB, 1.5TB, 123456) "
                        f"nor a preset ({', '.join(preset_names())})")
    try:
        cfg = load_config(text)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return checkpoint_size(cfg.model, cfg.parallelism).total_bytes, text


def parse_bandwidth(text, where: str = "--bandwidth") -> float:
    """'200GB/s', '50GiB', '1e11' -> bytes per second."""
    s = text if isinstance(text, (int, float)) and not isinstance(text, bool) else re.sub(
        r"\s*/\s*s(ec)?\s*$", "", str(text), flags=re.IGNORECASE)
    v = _amount(s)
    if v is None:
        raise UserError(f"{where}: {text!r} is not a bandwidth (e.g. 200GB/s, 50GiB/s)")
    if not math.isfinite(v):
        raise UserError(f"{where}: {text!r} is not a finite bandwidth")
    return float(v)


def add_plan_parser(subparsers):
    """Register ``plan`` on an argparse subparsers object; returns its parser."""
    p = subparsers.add_parser(
        "plan", help="checkpoint interval, goodput and bandwidth for a cluster (instant, no I/O)",
        description="Plan checkpoint intervals from a failure model: cluster MTTF, rule-of-thumb, "
                    "Young and Daly intervals, expected goodput (sync and async) and the bandwidth needed.")
    a = p.add_argument
    a("config", nargs="?", default=None, metavar="CONFIG",
      help="a run config (preset or YAML) with levels: plan its tiers' intervals (the flags below marked "
           "'levels' apply)")
    a("--set", action="append", metavar="KEY=VALUE", help="levels: override any key of CONFIG")
    a("--nodes", metavar="N", help="levels: nodes in the job (default: the config's design.job.nodes)")
    a("--node-loss-fraction", metavar="F", help="levels: share of failures that lose a node (default 0.78)")
    a("--group-loss-fraction", metavar="F", help="levels: share of failures that lose a replica group "
      "(default 0.01, an assumption)")
    a("--calibrate", metavar="RESULTS_JSON", help="levels: lags and recoveries from a run's results.json")
    a("--failures", metavar="TRACE_CSV", help="levels: failure trace (TIME[,KIND]; KIND process|node|group)")
    a("--days", metavar="D", help="levels: days the SimPy level model simulates (default 30)")
    a("--seed", metavar="N", help="levels: random seed of the simulated failures (default 0)")
    a("--accelerators", metavar="N", help="accelerators in the job (required, here or in --config)")
    a("--mttf-hours", metavar="H", help="per-accelerator MTTF in hours (default 50000)")
    a("--checkpoints-per-failure", metavar="K", help="checkpoints per expected failure (default 20)")
    a("--overhead-budget", metavar="F", help="fraction of time sync checkpoints may take (default 0.05)")
    a("--size", metavar="SIZE", help="checkpoint size: bytes (105GiB, 1.5TB, 123456) or a preset (llama3-405b)")
    a("--restart-seconds", metavar="S", help=f"restart cost per failure (default {planner.DEFAULT_RESTART_SECONDS:g})")
    a("--stall-seconds", metavar="S", help="measured sync checkpoint stall (default: size/bandwidth, else the time budget)")
    a("--async-stall-seconds", metavar="S", help="measured async stall (default: "
      f"{planner.ASYNC_STALL_FRACTION:.0%}% of the sync stall)")
    a("--drain-seconds", metavar="S", help="measured drain time (default: size/bandwidth, else the sync stall)")
    a("--commit-seconds", metavar="S", help="measured async commit: from the end of the stall until durable on "
      "the global tier, i.e. local write + drain + manifest (the report's durability lag; default: the drain time)")
    a("--bandwidth", metavar="BW", help="global storage write bandwidth, e.g. 200GB/s (sets sync stall and drain)")
    a("--overlap-target", metavar="F", help="largest drain overlap for async (default 0.10)")
    a("--config", metavar="FILE", dest="plan_config", help="YAML file with a plan: section using these names")
    a("--sweep", action="store_true", help="also print goodput vs interval and write a plot")
    a("--plot", metavar="PATH", help=f"where --sweep writes its PNG (default {DEFAULT_PLOT}; implies --sweep)")
    a("--json", action="store_true", help="print one JSON object instead of tables")
    p.set_defaults(func=run_plan)
    return p


# --------------------------------------------------------------------------- inputs

def _read_plan_section(path: str) -> dict:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--config {path}: file not found")
    try:
        data = load_yaml(read_config_text(p, f"--config {path}"), path)
    except UnicodeDecodeError:
        raise ConfigError(f"--config {path}: not a text file") from None
    if not isinstance(data, dict) or "plan" not in data:
        raise ConfigError(f"{path}: no 'plan:' section")
    section = data["plan"] or {}
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: plan: must be a mapping")
    out = {}
    for raw, value in section.items():
        key = str(raw).replace("-", "_")
        if key not in _KEYS:
            raise ConfigError(f"{path}: plan.{raw}: unknown key (known keys: {', '.join(_KEYS)})")
        out[key] = value
    return out


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def build_inputs(args) -> tuple[planner.PlanInputs, str | None]:
    """PlanInputs from --config's plan: section and flags; also the preset the size came from."""
    cfg_path = getattr(args, "plan_config", None)
    raw = {k: (v, f"{cfg_path}: plan.{k}") for k, v in (_read_plan_section(cfg_path) if cfg_path else {}).items()}
    for key in _KEYS:
        value = getattr(args, key, None)
        if value is not None:
            raw[key] = (value, _flag(key))
    if "accelerators" not in raw:
        raise UserError("plan: --accelerators N is required (or accelerators: in the --config plan section)")

    kwargs, where_of, preset = {}, {}, None
    for key, (value, where) in raw.items():
        where_of[_KEYS[key]] = where
        if key == "size":
            value, preset = resolve_size(value, where)
        elif key == "bandwidth":
            value = parse_bandwidth(value, where)
        elif isinstance(value, str):  # a flag; YAML numbers arrive typed and are checked by PlanInputs
            try:
                value = int(value, 10) if key == "accelerators" else float(value)
            except ValueError:
                kind = "a whole number" if key == "accelerators" else "a number"
                raise UserError(f"{where}: expected {kind}, got {value!r}") from None
        kwargs[_KEYS[key]] = value
    try:
        return planner.PlanInputs(**kwargs), preset
    except ConfigError as exc:  # say which flag or key, not the dataclass field
        name = getattr(exc, "field", None)
        if name in where_of:
            raise ConfigError(f"{where_of[name]}: {str(exc).split(': ', 1)[1]}") from None
        raise


_SOURCES = {
    "measured": "measured",
    "bandwidth": "size / bandwidth",
    "budget": "time budget",
    "assumed": f"assumed {planner.ASYNC_STALL_FRACTION:.0%} of sync stall",
    "sync-cost": "assumed equal to sync stall",
}


def render(p: planner.Plan, preset: str | None = None) -> str:
    i, c = p.inputs, p.costs
    size = ""
    if i.checkpoint_bytes is not None:
        size = f", checkpoint {fmt_bytes(i.checkpoint_bytes)}" + (f" ({preset})" if preset else "")
    out = [f"Plan for {i.accelerators:,} accelerators (MTTF {i.mttf_hours:,g} h each){size}", ""]
    rows = [
        ["Failures"],
        ["  cluster MTTF", fmt_duration(p.cluster_mttf_s)],
        ["  failures per day", f"{p.failures_per_day:.2f}"],
        [f"Rule of thumb ({i.checkpoints_per_failure:g} checkpoints per failure, "
         f"{i.overhead_budget * 100:g}% overhead budget)"],
        ["  interval", fmt_duration(p.rule_of_thumb_interval_s)],
        ["  checkpoints per day", f"{p.checkpoints_per_day:,.1f}"],
        ["  time budget per sync checkpoint", fmt_duration(p.sync_budget_s)],
        ["Checkpoint costs"],
        ["  sync stall C", fmt_duration(c.sync_stall_s), _SOURCES[c.sync_stall_source]],
        ["  async stall", fmt_duration(c.async_stall_s), _SOURCES[c.async_stall_source]],
        ["  drain", fmt_duration(c.drain_s), _SOURCES[c.drain_source]],
        ["  restart", fmt_duration(c.restart_s)],
    ]
    if p.bytes_per_day is not None:
        rows += [
            ["Bandwidth needed (at the rule-of-thumb interval)"],
            ["  sync: size / time budget", fmt_rate(p.sync_bandwidth_bytes_per_s)],
            [f"  async drain: size / ({i.overlap_target * 100:g}% x interval)",
             fmt_rate(p.async_drain_bandwidth_bytes_per_s)],
            ["  written per day", fmt_bytes(p.bytes_per_day)],
            ["  sustained average", fmt_rate(p.average_bytes_per_s)],
        ]
    else:
        rows += [["Bandwidth needed: give --size (bytes or a preset)"]]
    out += [table(rows, indent="", left=(0, 2)), ""]
    labels = {"rule_of_thumb": "rule of thumb", "young": "Young sqrt(2CM)", "daly": "Daly",
              "optimal_sync": "best for sync", "optimal_async": "best for async"}
    est_rows = [[labels[k], fmt_duration(e.interval_s), fmt_pct(e.sync_goodput), fmt_pct(e.async_goodput),
                 fmt_pct(e.sync_overhead), fmt_pct(e.async_overhead), fmt_pct(e.drain_overlap)]
                for k, e in p.intervals.items()]
    out.append("Expected goodput (useful fraction of time, after stalls, lost work and restarts)")
    out.append(table(est_rows, ["", "interval", "sync", "async", "sync overhead", "async overhead", "drain overlap"]))
    return "\n".join(out)


def render_sweep(sw: planner.Sweep) -> str:
    # the grid is log-spaced: the nearest point is the nearest in ratio
    best = {m: min(range(len(sw.intervals_s)), key=lambda k: abs(math.log(sw.intervals_s[k] / o["interval_s"])))
            for m, o in sw.optimum.items()}
    rows = []
    for k, t in enumerate(sw.intervals_s):
        mark = " ".join(f"<- {m}" for m in planner.MODES if best[m] == k)
        rows.append([fmt_duration(t), fmt_pct(sw.sync_goodput[k]), fmt_pct(sw.async_goodput[k]), mark])
    lines = ["Goodput vs interval", table(rows, ["interval", "sync", "async", ""], left=(0, 3))]
    for m, o in sw.optimum.items():
        lines.append(f"  best {m}: every {fmt_duration(o['interval_s'])}, goodput {fmt_pct(o['goodput'])}")
    return "\n".join(lines)


def plot_figure(p: planner.Plan):
    """Figure of goodput vs interval, both modes, optima and reference intervals marked."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    sw = planner.sweep(p.inputs, points=200)
    minutes = [t / 60 for t in sw.intervals_s]
    fig = Figure(figsize=(8, 5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for mode, ys, color in (("sync", sw.sync_goodput, "tab:blue"), ("async", sw.async_goodput, "tab:orange")):
        ax.plot(minutes, [y * 100 for y in ys], color=color, label=mode)
        o = sw.optimum[mode]
        ax.plot([o["interval_s"] / 60], [o["goodput"] * 100], marker="*", markersize=14, color=color,
                linestyle="none", label=f"best {mode}: {fmt_duration(o['interval_s'])}, {fmt_pct(o['goodput'])}")
    for name, t, style in (("rule of thumb", p.rule_of_thumb_interval_s, ":"),
                           ("Young", p.young_interval_s, "--"), ("Daly", p.daly_interval_s, "-.")):
        ax.axvline(t / 60, color="grey", linestyle=style, linewidth=1, label=f"{name}: {fmt_duration(t)}")
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))  # 1, 10, 100 rather than 10^0
    best = [o["goodput"] * 100 for o in sw.optimum.values()]
    ax.set_ylim(max(0.0, min(best) - 25), min(100.0, max(best) + 2))  # both optima always in view
    ax.set_xlabel("checkpoint interval (minutes)")
    ax.set_ylabel("expected goodput (%)")
    ax.set_title(f"{p.inputs.accelerators:,} accelerators, cluster MTTF {fmt_duration(p.cluster_mttf_s)}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower center")
    return fig


def write_plot(p: planner.Plan, path: str) -> Path:
    """PNG of :func:`plot_figure` at ``path`` (parent folders are created)."""
    fig = plot_figure(p)
    out = Path(path)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, format="png")
    except OSError as exc:
        raise UserError(f"--plot {path}: cannot write: {exc.strerror}") from None
    return out


_LEVEL_DEFAULTS = {"mttf_hours": "50000", "restart_seconds": str(planner.DEFAULT_RESTART_SECONDS),
                   "node_loss_fraction": "0.78", "group_loss_fraction": "0.01", "days": "30", "seed": "0",
                   "snapshot_gib_s": None, "interval": "config"}


def run_level_plan(args) -> int:
    """``plan CONFIG``: the config's levels at full size, planned (emulator/simulation/level_design.py)."""
    from emulator.cli.simulate import level_design_from_args
    from emulator.config import load_config
    from emulator.simulation import level_design as ld
    from emulator.simulation.design import DEFAULT_SNAPSHOT_GIB_S
    from emulator.simulation.level_report import render_levels
    for key, value in _LEVEL_DEFAULTS.items():
        if getattr(args, key, None) is None:
            setattr(args, key, str(DEFAULT_SNAPSHOT_GIB_S) if key == "snapshot_gib_s" else value)
    cfg = load_config(args.config, list(args.set or []))
    if not ld.has_levels(cfg):
        raise UserError(f"plan {args.config}: the config has no levels (a memory or peer tier, or a tier's "
                        f"interval_steps); plan it with --accelerators or `ckpt-emu simulate`")
    nodes = _level_nodes(args, cfg)
    design, failures, horizon, seed = level_design_from_args(args, cfg, nodes=nodes)
    p = ld.plan(design, horizon_s=horizon, seed=seed, failures=failures)
    print(json.dumps({"levels": p}, indent=1) if args.json else render_levels(p).lstrip("\n"), end="\n" if args.json else "")
    return 0


def _level_nodes(args, cfg) -> int:
    if args.nodes is not None:
        try:
            n = int(args.nodes)
        except ValueError:
            raise UserError(f"--nodes: expected a whole number, got {args.nodes!r}") from None
        if n < 1:
            raise UserError(f"--nodes: must be >= 1, got {args.nodes}")
        return n
    if cfg.design is None:
        raise UserError("--nodes: required (the config has no design.job.nodes)")
    return cfg.design.job_nodes(cfg.parallelism.world_size)


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
    if args.config is not None:
        return run_level_plan(args)
    inputs, preset = build_inputs(args)
    p = planner.plan(inputs)
    want_sweep = args.sweep or args.plot is not None
    if want_sweep:
        _check_plot_path(args.plot or DEFAULT_PLOT)
    sw = planner.sweep(inputs) if want_sweep else None
    plot = write_plot(p, args.plot or DEFAULT_PLOT) if want_sweep else None
    if args.json:
        d = p.to_dict()
        d["size_from"] = preset
        if sw is not None:
            d["sweep"] = sw.to_dict()
            d["plot"] = str(plot)
        print(json.dumps(d, indent=2))
        return 0
    print(render(p, preset))
    if sw is not None:
        print()
        print(render_sweep(sw))
        print(f"\nplot written to {plot}")
    return 0
