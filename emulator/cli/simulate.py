"""``ckpt-emu simulate``: the whole job by discrete-event simulation, from the same design.

The design (emulator/design) is resolved once per mode from the config, a calibration and the
flags; the simulator (emulator/simulation) reads nothing else. Every input is checked before
anything runs or is written: a bad value ends as one line ``ckpt-emu: error: ...`` with exit
status 2 (UserError).
"""
from __future__ import annotations

import argparse
import json
import math
from dataclasses import replace
from pathlib import Path

from emulator.cli.common import check_output_path
from emulator.design.failures import CLASSES, class_of
from emulator.design.wear import parse_endurance
from emulator.errors import UserError
from emulator.launch.progress import Counted
from emulator.units import parse_duration, parse_rate

DEFAULT_OUT = "./ckpt-emu-data/simulate"
#: flags before the one unit grammar and per-class recoveries, and what replaced them
RETIRED = {
    "global_gib_s": "--global-gib-s: now --global-bandwidth, a rate with its unit (e.g. --global-bandwidth 400GB/s)",
    "nic_gib_s": "--nic-gib-s: now --nic, a rate with its unit (e.g. --nic 200Gb/s)",
    "snapshot_gib_s": "--snapshot-gib-s: now --snapshot-rate, a rate with its unit (e.g. --snapshot-rate 48GiB/s)",
    "restart_seconds": "--restart-seconds: each failure class has its own recovery (design.failures); "
                       "override a class's restart with --restart CLASS=TIME (e.g. --restart node=10m)",
}


def add_simulate_parser(subparsers):
    """Register ``simulate`` on an argparse subparsers object; returns its parser."""
    p = subparsers.add_parser(
        "simulate", help="simulate the whole job at cluster scale (SimPy), calibrated by an emulation run",
        description="Discrete-event simulation of every node's checkpoints on the design's tiers and links, "
                    "and of failures of each class, from the same design as `ckpt-emu run`.",
        examples=("ckpt-emu simulate design-llama405-2048-nvme-pfs --days 30",
                  "ckpt-emu simulate design.yaml --calibrate runs/one-node/results.json "
                  "--sweep interval=3m..60m:7 --sweep global_bandwidth=100GB/s,200GB/s,400GB/s"))
    a = p.add_argument
    a("config", nargs="?", default=None, help="preset name or YAML file (default: the embedded default)")
    a("--set", action="append", metavar="KEY=VALUE", help="override any config key")
    a("--nodes", metavar="N", help="nodes in the job (default: the design's design.job.nodes, else the preset's "
      "ranks over a node); with --as-run, the nodes the run was split over")
    a("--accelerators-per-node", metavar="A", help="ranks (accelerators) per node (default: the design's, else 8)")
    a("--days", default="30", metavar="D", help="simulated wall time in days (default 30)")
    a("--interval", default="config", metavar="T",
      help="training time between checkpoints: a time (500, 9m, 1.5h), 'config' (interval_steps x "
           "step_seconds, at full size, the default) or 'planner' (the planner's best for each mode)")
    a("--calibrate", metavar="RESULTS_JSON", help="calibrate the design by this emulation run's results.json")
    a("--mttf-hours", metavar="H", help="MTTF of one accelerator (default: design.failures.mttf_hours, else 50000)")
    a("--failures", metavar="TRACE_CSV", help="failure trace (TIME[,CLASS] rows) instead of Poisson arrivals")
    a("--node-loss-fraction", metavar="F",
      help="share of failures that lose a node (default: design.failures, else 0.78)")
    a("--group-loss-fraction", metavar="F",
      help="share of failures that lose a whole replica group (default: design.failures, else 0.01, an assumption)")
    a("--restart", action="append", metavar="CLASS=TIME",
      help="a failure class's restart or replacement time, over design.failures.<class>.restart (its detection "
           "stays); CLASS is process, node, group or all; repeatable")
    a("--global-bandwidth", metavar="RATE", help="the global storage's aggregate write rate, e.g. 400GB/s")
    a("--nic", metavar="RATE", help="each node's NIC, e.g. 200Gb/s (caps its global traffic and its peer copies)")
    a("--snapshot-rate", metavar="RATE",
      help="each accelerator's copy of its state to host memory, e.g. 48GiB/s (default: design.node.snapshot)")
    a("--sweep", action="append", metavar="SPEC", help="grid: interval=5m,10m,... global_bandwidth=100GB/s..800GB/s:4 "
      "peer_every=1,2,4 local_every=... global_every=... (multiples of the base interval)")
    a("--nvme-endurance", metavar="RATING", help="the NVMe's rated endurance: drive writes a day over 5 years "
      "(1DWPD, 3DWPD) or the bytes it may write (7PB); default 1DWPD")
    a("--as-run", action="store_true", help="simulate exactly what `ckpt-emu run CONFIG` emulates (to check)")
    a("--seed", default="0", metavar="N", help="random seed of the failures (default 0)")
    a("--out", default=DEFAULT_OUT, metavar="DIR", help=f"where pictures and sweep JSON go ({DEFAULT_OUT})")
    a("--json", action="store_true", help="print one JSON object")
    a("--quiet", action="store_true", help="no progress display for --sweep")
    for old in RETIRED:
        a("--" + old.replace("_", "-"), dest=old, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_simulate)
    return p


def _num(args, name: str, *, kind=float, minimum: float | None = None, above: float | None = None,
         maximum: float | None = None, optional: bool = False):
    raw = getattr(args, name, None)
    flag = "--" + name.replace("_", "-")
    if raw is None:
        if optional:
            return None
        raise UserError(f"{flag}: required")
    try:
        v = kind(str(raw).strip())
    except ValueError:
        raise UserError(f"{flag}: expected {'a whole number' if kind is int else 'a number'}, got {raw!r}") from None
    if kind is float and not math.isfinite(v):
        raise UserError(f"{flag}: must be finite, got {raw!r}")
    if above is not None and not v > above:
        raise UserError(f"{flag}: must be > {above:g}, got {raw}")
    if minimum is not None and v < minimum:
        raise UserError(f"{flag}: must be >= {minimum:g}, got {raw}")
    if maximum is not None and v > maximum:
        raise UserError(f"{flag}: must be <= {maximum:g}, got {raw}")
    return v


def _rate(args, name: str) -> str | None:
    """A rate flag checked in the unit grammar and kept as written, for the design it restates."""
    raw = getattr(args, name, None)
    if raw is None:
        return None
    parse_rate(str(raw).strip(), "--" + name.replace("_", "-"))
    return str(raw).strip()


def parse_restarts(specs) -> dict | None:
    """``["node=10m", "all=60s"]`` -> {class: seconds} (all first, then each class over it)."""
    if not specs:
        return None
    out, every = {}, None
    for spec in specs:
        name, sep, text = str(spec).partition("=")
        cls = "all" if name.strip().lower() == "all" else class_of(name.strip())
        if not sep or cls is None:
            raise UserError(f"--restart: {spec!r} is not CLASS=TIME (CLASS: {', '.join(CLASSES)} or all; "
                            f"e.g. --restart node=10m)")
        seconds = parse_duration(text, f"--restart {name.strip()}", allow_zero=True)
        if cls == "all":
            every = seconds
        else:
            out[cls] = seconds
    return {**({c: every for c in CLASSES} if every is not None else {}), **out}


def parse_inputs(args) -> dict:
    """Every flag, checked and converted (nothing is run or written here)."""
    for old, message in RETIRED.items():
        if getattr(args, old, None) is not None:
            raise UserError(message)
    v = {
        "nodes": _num(args, "nodes", kind=int, minimum=1, maximum=10 ** 7, optional=True),
        "per_node": _num(args, "accelerators_per_node", kind=int, minimum=1, maximum=4096, optional=True),
        "days": _num(args, "days", above=0, maximum=36500),
        "mttf_hours": _num(args, "mttf_hours", above=0, maximum=1e9, optional=True),
        "node_loss_fraction": _num(args, "node_loss_fraction", minimum=0, maximum=1, optional=True),
        "group_loss_fraction": _num(args, "group_loss_fraction", minimum=0, maximum=1, optional=True),
        "restart_s": parse_restarts(getattr(args, "restart", None)),
        "global_write": _rate(args, "global_bandwidth"),
        "nic": _rate(args, "nic"),
        "snapshot": _rate(args, "snapshot_rate"),
        "seed": _num(args, "seed", kind=int) if getattr(args, "seed", None) is not None else 0,
    }
    parse_endurance(getattr(args, "nvme_endurance", None))  # checked here, read where capacity is said
    if (v["node_loss_fraction"] or 0) + (v["group_loss_fraction"] or 0) > 1:
        raise UserError(f"--node-loss-fraction + --group-loss-fraction: "
                        f"{v['node_loss_fraction'] + v['group_loss_fraction']:g} is above 1")
    return v


def overrides(v: dict, *, as_run: bool = False):
    """The flags that restate the design (emulator/design/overrides.py), from :func:`parse_inputs`
    (``--nodes`` is the run's own nodes with ``--as-run``, not the job's)."""
    from emulator.design.overrides import Overrides
    job = {} if as_run else {"nodes": v["nodes"], "accelerators_per_node": v["per_node"]}
    return Overrides(**job, **{k: v[k] for k in ("global_write", "nic", "snapshot", "mttf_hours",
                                                 "node_loss_fraction", "group_loss_fraction", "restart_s")})


def resolve_designs(cfg, args, v: dict, modes) -> tuple[dict, object, object]:
    """({mode: the design}, the calibrating run's figures or None, the function that resolves a
    mode's design with more figures restated: a sweep's rows) from the config, the flags and
    ``--calibrate`` (one calibration per mode: each mode's own host costs)."""
    from emulator.design import resolve
    from emulator.design.capacity import fitted
    from emulator.simulation.calibrate import check_same_preset, mode_calibrations, read_results, run_groups
    fig = read_results(args.calibrate) if getattr(args, "calibrate", None) else None
    if fig is not None:
        check_same_preset(cfg, fig)
    cals = mode_calibrations(fig, modes) if fig is not None else {m: None for m in modes}
    as_run = bool(getattr(args, "as_run", False))
    flags = overrides(v, as_run=as_run)
    emulated = v["nodes"] or 1 if as_run else 1

    def design_of(mode: str, more=None):
        return fitted(resolve(cfg, calibration=cals[mode], as_run=as_run, emulated_nodes=emulated,
                              overrides=more.over(flags) if more else flags), cfg.checkpoint.on_local_full)
    designs, shared = {}, None
    for m in modes:
        if cals[m] is None:  # one design serves every mode
            shared = shared or design_of(m)
            designs[m] = shared
        else:
            designs[m] = design_of(m)
    groups = run_groups(fig) if as_run and fig is not None else None
    if groups is not None and sum(g.nodes for g in groups) == designs[modes[0]].job.nodes:
        designs = {m: replace(d, job=replace(d.job, groups=groups)) for m, d in designs.items()}
    return designs, fig, design_of


def _intervals(args, cfg, study, fig) -> dict:
    """Each mode's training time between checkpoints and where it came from; the planner's answer
    per mode where it set them."""
    from emulator.simulation.calibrate import step_seconds
    from emulator.simulation.planning import with_every
    planned = {}
    for mode in study.modes:
        d = study.designs[mode]
        if args.as_run:
            step = (step_seconds(fig, mode) if fig is not None else None) or cfg.wall_step_seconds
            study.intervals[mode] = cfg.checkpoint.interval_steps * step
            study.interval_sources[mode] = (f"{cfg.checkpoint.interval_steps} steps of {step * 1000:.1f} ms"
                                            + (" (measured)" if fig is not None and mode in fig.mode_steps else ""))
        elif args.interval == "config":
            study.intervals[mode] = d.base_interval_s
            study.interval_sources[mode] = (f"config: {cfg.checkpoint.interval_steps} x "
                                            f"{cfg.training.step_seconds:g} s (full size)")
            if d.base_interval_s < 60:
                study.interval_sources[mode] += (f"; only {d.base_interval_s:g} s at full size: give --interval T "
                                                 f"or --interval planner to ask a full-scale question")
        elif args.interval == "planner":  # the planner's whole cell: its interval and each tier's every
            p = study.planned(mode)
            study.intervals[mode] = p.interval_s
            study.designs[mode] = with_every(d, p.every)
            study.interval_sources[mode] = ("the planner's recommendation for this design's costs (the best within "
                                            "its bounds), each tier at its every (emulator/simulation/planning.py)")
            planned[mode] = {"interval_s": p.interval_s, "every": p.every, "goodput": p.goodput,
                             "global_bytes_per_day": p.global_bytes_per_day,
                             "global_checkpoints_per_day": p.global_per_day, "notes": list(p.notes),
                             **_s3_per_day(cfg, d, p)}
        else:
            study.intervals[mode] = parse_duration(args.interval, "--interval")
            study.interval_sources[mode] = "--interval"
    return planned


def _s3_per_day(cfg, d, p) -> dict:
    """What the planner's interval costs a day in S3 requests and storage, where global storage is S3."""
    if cfg.tiers.global_.backend != "s3" or "global" not in p.every:
        return {}
    from emulator.simulation import s3cost
    fig = s3cost.job_figures(cfg, d.job.groups, interval_s=86400.0 / p.global_per_day, drain_s=1.0, restore_s=1.0)
    return {"s3_per_day_usd": fig["cost"]["per_day_usd"], "s3_price_list": fig["cost"]["price_list"]}


def build_study(args):
    """(config, study, the planner's answers) from the command line; raises UserError on bad input."""
    from emulator.config import load_config
    from emulator.simulation.arrivals import read_trace
    from emulator.simulation.study import Study
    cfg = load_config(args.config, list(args.set or []))
    v = parse_inputs(args)
    trace = read_trace(args.failures) if args.failures else None
    if args.as_run and (args.failures or args.sweep):
        raise UserError("--as-run reproduces an emulation run: no --failures or --sweep with it")
    modes = list(cfg.checkpoint.modes)
    designs, fig, redesigner = resolve_designs(cfg, args, v, modes)
    study = Study(cfg, designs, modes, v["days"], trace=trace, seed=v["seed"], redesigner=redesigner,
                  as_run_saves=cfg.checkpoint.saves if args.as_run else None)
    planned = _intervals(args, cfg, study, fig)
    return cfg, study, planned


def _sweep(args, study, spec: dict):
    """``run_sweep`` over the grid, with its progress (cells done, ETA) unless ``--quiet``."""
    from emulator.simulation.sweep import grid_cells, run_sweep
    progress = None if args.quiet else Counted(grid_cells(study, spec), "cells", label="simulate --sweep: ")
    try:
        return run_sweep(study, spec, progress=progress.advance if progress else None)
    finally:
        if progress:
            progress.close()


def cmd_simulate(args) -> int:
    from emulator.simulation.output import describe, write_outputs
    from emulator.simulation.report import render, render_sweep
    from emulator.simulation.sweep import check_spec, parse_spec
    check_output_path(args.out, "--out", folder=True)
    cfg, study, planned = build_study(args)
    spec = parse_spec(args.sweep, cfg.limits.sweep_points) if args.sweep else None
    if spec is not None:
        check_spec(study.design, spec)
    outcomes = {m: study.run(m) for m in study.modes}
    sweep = _sweep(args, study, spec) if spec else None
    info = describe(cfg, study, args, planned, outcomes)
    files = write_outputs(Path(args.out), info, outcomes, sweep)
    if args.json:
        print(json.dumps({**info, "modes": {m: o.to_dict() for m, o in outcomes.items()}, "sweep": sweep,
                          "files": files}, indent=1))
        return 0
    print(render(info, outcomes), end="")
    if sweep:
        print(render_sweep(sweep), end="")
    for name, path in files.items():
        print(f"{name}: {path}")
    return 0
