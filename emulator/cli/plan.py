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
from dataclasses import replace

from emulator import planner
from emulator.cli.common import check_output_path, config_completer
from emulator.cli.plan_report import as_config, render, render_napkin, render_sweep, write_plot
from emulator.design.wear import parse_endurance
from emulator.errors import ConfigError, UserError
from emulator.units import (
    DECIMAL,
    byte_family,
    parse_duration,
    parse_size,
    rate_and_family,
    size_and_family,
)

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
    a("--nvme-endurance", metavar="RATING", help="the NVMe's rated endurance: drive writes a day over 5 years "
      "(1DWPD, 3DWPD) or the bytes it may write (7PB); bounds the recommendation (default 1DWPD)")
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


def _rate_text(value, flag: str) -> str | None:
    """A rate flag checked (:func:`_rate`) and kept as written, for the design it restates."""
    return None if value is None or _rate(value, flag)[0] is None else str(value).strip()


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
    from emulator.design.capacity import fitted
    from emulator.design.overrides import Overrides
    if args.size is not None:
        raise UserError("--size: the config's model sizes its checkpoint (--size is for a napkin plan, "
                        "without CONFIG)")
    cfg = load_config(args.config, list(args.set or []))
    nodes, per_node = job_shape(cfg, _whole(args.accelerators, "--accelerators"), _whole(args.nodes, "--nodes"))
    rates = {key: _rate_text(getattr(args, flag), f"--{flag.replace('_', '-')}")
             for key, flag in (("global_write", "bandwidth"), ("nic", "nic"), ("snapshot", "snapshot_rate"))}
    flags = Overrides(nodes=nodes, accelerators_per_node=per_node, **_failure_flags(args), **rates)
    design = resolve(cfg, calibration=calibration, overrides=flags,
                     base_interval_s=_duration(args.interval, "--interval"))
    design = fitted(design, cfg.checkpoint.on_local_full)
    return cfg, design


def _trace_rates(design, path: str):
    """``design`` failing at the rates of the trace at ``path`` (each class's failures over its span)."""
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
    """(design or None, reference figures, size, preset, the family its sizes are said in) of a napkin
    plan: the family ``--size`` was written in; for a preset's size, ``--bandwidth``'s, else decimal
    (as storage is quoted). A size from a config keeps its layout (emulator/design/napkin.py ``layout_job``)."""
    from emulator.config import load_config
    from emulator.design.napkin import layout_job, napkin_design, unfilled_note
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
    sizes = (size_and_family(args.size, "--size")[1] if size is not None and preset is None
             else byte_family(family) if family is not None else DECIMAL)
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
        sized_by = load_config(preset) if preset is not None else None
        job = layout_job(sized_by, accelerators, per_node) if sized_by is not None else None
        design = napkin_design(accelerators, size, bandwidth, family=family, accelerators_per_node=per_node,
                               nic_bps=nic, snapshot_bps=snapshot, base_interval_s=interval, job=job, **failures)
        if sized_by is not None and job is None:
            design = replace(design, notes=design.notes + (unfilled_note(sized_by, accelerators),))
    mttf = failures["mttf_hours"] or 50_000.0
    figures = planner.reference_figures(accelerators, mttf, **{k: v for k, v in options.items()
                                                               if k != "overlap_target"})
    if figures.cluster_mttf_s < 1:
        raise UserError(f"--mttf-hours: {mttf:g} h over {accelerators:,} accelerators is a cluster MTTF under a second")
    return design, figures, size, preset, sizes


def s3_figures(cfg, p: planner.Plan) -> dict | None:
    """The S3 cost of the recommended global interval, where the config's global tier is S3."""
    if cfg is None or cfg.tiers.global_.backend != "s3" or "global" not in p.best.every:
        return None
    from emulator.simulation import s3cost
    part = cfg.tiers.global_.options.part_size_mib * (1 << 20)
    groups = [(g.nodes, g.files, g.file_bytes) for g in p.design.job.groups]
    verify = p.design.verify if p.design.tiers[0] != "global" else "none"
    ckpt, restore = s3cost.job_requests(groups, part, verify=verify, keep=p.design.tier("global").keep)
    interval = planner.DAY / p.volume.checkpoints_per_day  # as the volume counts them: while the job runs
    return s3cost.cost_figures(cfg.cost, checkpoint=ckpt, checkpoint_bytes=p.design.job.checkpoint_bytes,
                               keep=p.design.tier("global").keep, interval_s=interval, restore=restore,
                               restore_bytes=p.design.job.checkpoint_bytes)


def _label(cfg) -> str:
    return cfg.model.name if cfg is not None else "a napkin design"


def run_plan(args) -> int:
    if args.plan_config is not None:
        raise UserError("--config: a plan: section is no longer read; give the run config as `plan CONFIG`, or "
                        "describe the job with flags (--accelerators, --size, --bandwidth)")
    parse_endurance(args.nvme_endurance)  # checked before anything is written
    want_sweep = args.sweep or args.plot is not None
    if want_sweep:
        check_output_path(DEFAULT_PLOT if args.plot is None else args.plot, "--plot", folder=False)
    options = _plan_options(args)
    cfg, family = None, None
    if args.config is not None:
        calibration = None
        if args.calibrate is not None:
            from emulator.simulation.calibrate import read_calibration
            calibration = read_calibration(args.calibrate)
        cfg, design = config_design(args, calibration=calibration)
        if args.failures is not None:
            design = _trace_rates(design, args.failures)
    else:
        design, figures, size, preset, family = napkin(args)
        if design is None:
            if want_sweep:
                raise UserError("--sweep: needs the costs: give --size and --bandwidth (or a CONFIG)")
            overlap = options.get("overlap_target", planner.OVERLAP_TARGET)
            if args.json:
                needs = planner.rule_of_thumb_needs(figures, size, overlap) if size else None
                print(json.dumps({"reference": vars(figures), "checkpoint_bytes": size, "size_from": preset,
                                  "overlap_target": overlap, "rule_of_thumb_needs": needs}, indent=1))
            else:
                print(render_napkin(figures, size, preset, overlap, family))
            return 0
    p = planner.plan(design, **options, endurance=parse_endurance(args.nvme_endurance))
    plot = write_plot(p, DEFAULT_PLOT if args.plot is None else args.plot) if want_sweep else None
    s3 = s3_figures(cfg, p)
    if args.json:
        d = p.to_dict()
        d.update(label=_label(cfg), as_config=as_config(p, cfg), s3_cost=s3, plot=str(plot) if plot else None)
        print(json.dumps(d, indent=1))
        return 0
    print(render(p, _label(cfg), cfg=cfg, s3=s3, family=family))
    if want_sweep:
        print()
        print(render_sweep(p))
        print(f"\nplot written to {plot}")
    return 0
