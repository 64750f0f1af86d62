"""``ckpt-emu simulate``: the whole job by discrete-event simulation, from the same config.

Every input is checked before anything runs or is written: a bad value ends
as one line ``ckpt-emu: error: ...`` with exit status 2 (UserError).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from emulator.errors import UserError
from emulator.simulation.arrivals import DEFAULT_NODE_LOSS_FRACTION, read_trace
from emulator.simulation.design import DEFAULT_SNAPSHOT_GIB_S, Options, build_design
from emulator.simulation.level_design import DEFAULT_GROUP_LOSS_FRACTION
from emulator.simulation.study import Study, planner_interval
from emulator.units import parse_duration

DEFAULT_OUT = "./ckpt-emu-data/simulate"


def add_simulate_parser(subparsers):
    """Register ``simulate`` on an argparse subparsers object; returns its parser."""
    p = subparsers.add_parser(
        "simulate", help="simulate the whole job at cluster scale (SimPy), calibrated by an emulation run",
        description="Discrete-event simulation of every node's checkpoint pipeline, the shared global tier "
                    "and failures, driven by the same config as `ckpt-emu run`.")
    a = p.add_argument
    a("config", nargs="?", default=None, help="preset name or YAML file (default: the embedded default)")
    a("--set", action="append", metavar="KEY=VALUE", help="override any config key")
    a("--nodes", metavar="N", help="nodes in the job (default: the config's design.job.nodes; required without one)")
    a("--accelerators-per-node", metavar="A", help="ranks (accelerators) per node (default: the design's, else 8)")
    a("--days", default="30", metavar="D", help="simulated wall time in days (default 30)")
    a("--interval", default="config", metavar="T",
      help="training time between checkpoints: a time (500, 9m, 1.5h), 'config' (interval_steps x "
           "step_seconds, at full size, the default) or 'planner' (the planner's best for each mode)")
    a("--calibrate", metavar="RESULTS_JSON", help="take costs from this emulation run's results.json")
    a("--mttf-hours", default="50000", metavar="H", help="MTTF of one accelerator (default 50000)")
    a("--failures", metavar="TRACE_CSV", help="failure trace (TIME[,KIND] rows) instead of Poisson arrivals")
    a("--node-loss-fraction", default=str(DEFAULT_NODE_LOSS_FRACTION), metavar="F",
      help="share of failures that replace a node (restore from global) when the kind is not given")
    a("--group-loss-fraction", default=str(DEFAULT_GROUP_LOSS_FRACTION), metavar="F",
      help=f"with levels: share of failures that lose a whole replica group (default "
           f"{DEFAULT_GROUP_LOSS_FRACTION:g}, an assumption)")
    a("--restart-seconds", default="600", metavar="S", help="restart time per failure, before the restore")
    a("--global-gib-s", metavar="B", help="aggregate write bandwidth of the global tier (GiB/s)")
    a("--nic-gib-s", metavar="B", help="per-node cap on the global tier, e.g. a node's NIC (GiB/s); other per-node limits still hold")
    a("--snapshot-gib-s", default=str(DEFAULT_SNAPSHOT_GIB_S), metavar="B",
      help="GPU-to-host snapshot rate per accelerator without --calibrate (default 48, one H100, pinned)")
    a("--sweep", action="append", metavar="SPEC", help="grid: interval=5m,10m,... global_gib_s=100..800:4; "
      "with levels, peer_every=1,2,4 local_every=... global_every=... (multiples of the base interval)")
    a("--as-run", action="store_true", help="simulate exactly what `ckpt-emu run CONFIG` emulates (to check)")
    a("--seed", default="0", metavar="N", help="random seed of the failures (default 0)")
    a("--out", default=DEFAULT_OUT, metavar="DIR", help=f"where pictures and sweep JSON go ({DEFAULT_OUT})")
    a("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_simulate)
    return p


def _num(args, name: str, *, kind=float, minimum: float | None = None, above: float | None = None,
         maximum: float | None = None, optional: bool = False):
    raw = getattr(args, name)
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


def parse_inputs(args) -> dict:
    """Every flag, checked and converted (nothing is run or written here)."""
    return {
        "nodes": _num(args, "nodes", kind=int, minimum=1, maximum=10 ** 7, optional=True),
        "per_node": _num(args, "accelerators_per_node", kind=int, minimum=1, maximum=4096, optional=True) or 8,
        "per_node_given": args.accelerators_per_node is not None,
        "days": _num(args, "days", above=0, maximum=36500),
        "mttf_hours": _num(args, "mttf_hours", above=0, maximum=1e9),
        "node_loss_fraction": _num(args, "node_loss_fraction", minimum=0, maximum=1),
        "group_loss_fraction": _num(args, "group_loss_fraction", minimum=0, maximum=1),
        "restart_s": _num(args, "restart_seconds", minimum=0, maximum=1e9),
        "global_gib_s": _num(args, "global_gib_s", above=0, optional=True),
        "nic_gib_s": _num(args, "nic_gib_s", above=0, optional=True),
        "snapshot_gib_s": _num(args, "snapshot_gib_s", above=0),
        "seed": _num(args, "seed", kind=int),
        "trace": read_trace(args.failures) if args.failures else None,
    }


def _intervals(args, cfg, study: Study, cals: dict) -> None:
    """Each mode's training time between checkpoints, and where it came from."""
    for mode in study.modes:
        cal = cals[mode]
        if args.as_run:
            step = (cal.step_s.get(mode) if cal is not None else None) or cfg.wall_step_seconds
            study.intervals[mode] = cfg.checkpoint.interval_steps * step
            study.interval_sources[mode] = (f"{cfg.checkpoint.interval_steps} steps of {step * 1000:.1f} ms"
                                            + (" (measured)" if cal is not None and mode in cal.step_s else ""))
        elif args.interval == "config":
            base = cfg.checkpoint.interval_steps * cfg.training.step_seconds
            if base <= 0:
                raise UserError("--interval config: training.step_seconds is 0; give --interval T")
            study.intervals[mode] = base
            study.interval_sources[mode] = (f"config: {cfg.checkpoint.interval_steps} x "
                                            f"{cfg.training.step_seconds:g} s (full size)")
            if study.intervals[mode] < 60:
                study.designs[mode].notes.append(
                    f"{mode}: the config's interval stands for only {study.intervals[mode]:g} s at full size; "
                    f"give --interval T or --interval planner to ask a full-scale question")
        elif args.interval == "planner":
            study.intervals[mode] = planner_interval(study, mode)
            study.interval_sources[mode] = "the planner's optimum for this design's costs"
        else:
            t = parse_duration(args.interval, "--interval", allow_zero=True)
            if t <= 0:
                raise UserError(f"--interval: must be > 0, got {args.interval!r}")
            study.intervals[mode] = t
            study.interval_sources[mode] = "--interval"


def _job_shape(cfg, v: dict) -> tuple[int, int]:
    """(nodes, accelerators per node): the flags, else the config's design, else --nodes is required."""
    d = cfg.design
    per_node = v["per_node"] if v["per_node_given"] or d is None else d.accelerators_per_node
    if v["nodes"] is not None:
        return v["nodes"], per_node
    if d is None:
        raise UserError("--nodes: required (the config has no design.job.nodes)")
    return d.job_nodes(cfg.parallelism.world_size), per_node


def build_study(args):
    """Config, calibration, design and study from the command line; raises UserError on bad input."""
    from emulator.config import load_config
    from emulator.simulation.calibrate import load_calibration
    cfg = load_config(args.config, list(args.set or []))
    v = parse_inputs(args)
    modes = list(cfg.checkpoint.modes)
    cals = load_calibration(cfg, args.calibrate, modes) if args.calibrate else {m: None for m in modes}
    nodes, per_node = _job_shape(cfg, v)
    opts = Options(nodes=nodes, accelerators_per_node=per_node, as_run=args.as_run,
                   snapshot_gib_s=v["snapshot_gib_s"], global_gib_s=v["global_gib_s"], nic_gib_s=v["nic_gib_s"])
    if args.as_run and (args.failures or args.sweep):
        raise UserError("--as-run reproduces an emulation run: no --failures or --sweep with it")
    one = build_design(cfg, opts, None) if not args.calibrate else None
    designs = {m: one or build_design(cfg, opts, cals[m]) for m in modes}
    d = designs[modes[0]]
    study = Study(cfg, designs, modes, v["days"], {}, accelerators=d.nodes * d.ranks_per_node,
                  mttf_hours=v["mttf_hours"], trace=v["trace"], node_loss_fraction=v["node_loss_fraction"],
                  restart_s=v["restart_s"], seed=v["seed"],
                  as_run_saves=cfg.checkpoint.saves if args.as_run else None)
    _intervals(args, cfg, study, cals)
    return cfg, study


def level_design_from_args(args, cfg, *, nodes: int, per_node: int | None = None, **sizes):
    """(LevelDesign, failures or None, horizon_s) of a config with levels from the flags ``simulate``
    and ``plan`` share; every bad value is a UserError before anything runs."""
    from emulator.simulation import level_design as ld
    v = {"mttf_hours": _num(args, "mttf_hours", above=0, maximum=1e9),
         "node": _num(args, "node_loss_fraction", minimum=0, maximum=1),
         "group": _num(args, "group_loss_fraction", minimum=0, maximum=1),
         "restart_s": _num(args, "restart_seconds", minimum=0, maximum=1e9),
         "snapshot_gib_s": _num(args, "snapshot_gib_s", above=0),
         "days": _num(args, "days", above=0, maximum=36500), "seed": _num(args, "seed", kind=int)}
    ld.check_fractions(v["node"], v["group"])
    per_node = per_node or (cfg.design.accelerators_per_node if cfg.design else 8)
    failures = None
    if args.failures:
        failures = ld.trace_classes(read_trace(args.failures), node_loss_fraction=v["node"],
                                    group_loss_fraction=v["group"], seed=v["seed"])
        rates = ld.trace_rates(failures)
    else:
        rates = ld.class_rates(accelerators=nodes * per_node, mttf_hours=v["mttf_hours"],
                               node_loss_fraction=v["node"], group_loss_fraction=v["group"])
    cal = ld.read_calibration(args.calibrate) if args.calibrate else None
    interval = getattr(args, "interval", "config")
    base = None if interval in (None, "config", "planner") else parse_duration(interval, "--interval")
    design = ld.describe_design(cfg, nodes=nodes, class_rates=rates, calibration=cal,
                                accelerators_per_node=per_node, snapshot_gib_s=v["snapshot_gib_s"],
                                restart_s=v["restart_s"], base_interval_s=base, **sizes)
    return design, failures, v["days"] * 86400, v["seed"]


def _levels(args, cfg, study: Study, spec: dict | None):
    """The level plan and the level sweep (or Nones) of a config with levels or level sweep keys."""
    from emulator.simulation import level_design as ld
    every = {k: v for k, v in (spec or {}).items() if k in ld.SWEEP_KEYS}
    if not every and not ld.has_levels(cfg):
        return None, None
    every = ld.check_sweep(cfg, every)
    d = study.design  # its node groups: the job's at full size, or with --as-run the run's own nodes
    design, failures, horizon, seed = level_design_from_args(
        args, cfg, nodes=d.nodes, per_node=d.ranks_per_node,
        node_bytes=max(g.node_bytes for g in d.groups), job_bytes=d.checkpoint_bytes,
        time_scale=cfg.run.scale if args.as_run else 1.0, measured_recoveries=not args.as_run)
    plan = ld.plan(design, horizon_s=horizon, seed=seed, failures=failures)
    sweep = ld.run_sweep(design, every, horizon_s=horizon, seed=seed, failures=failures) if every else None
    return plan, sweep


def cmd_simulate(args) -> int:
    from emulator.simulation.level_report import render_levels, render_level_sweep
    from emulator.simulation.output import describe, write_outputs
    from emulator.simulation.sweep import KEYS, parse_spec, run_sweep
    cfg, study = build_study(args)
    spec = parse_spec(args.sweep, cfg.limits.sweep_points) if args.sweep else None
    levels, level_sweep = _levels(args, cfg, study, spec)
    two_tier = {k: v for k, v in (spec or {}).items() if k in KEYS[:2]}
    outcomes = {m: study.run(m) for m in study.modes}
    sweep = run_sweep(study, two_tier) if two_tier else None
    info = describe(cfg, study, args)
    files = write_outputs(Path(args.out), info, outcomes, sweep)
    from emulator.simulation.report import render, render_sweep
    if args.json:
        print(json.dumps({**info, "modes": {m: o.to_dict() for m, o in outcomes.items()}, "sweep": sweep,
                          **({"levels": levels} if levels else {}),
                          **({"levels_sweep": level_sweep} if level_sweep else {}), "files": files}, indent=1))
        return 0
    print(render(info, outcomes), end="")
    if sweep:
        print(render_sweep(sweep), end="")
    if levels:
        print(render_levels(levels), end="")
    if level_sweep:
        print(render_level_sweep(level_sweep), end="")
    for name, path in files.items():
        print(f"{name}: {path}")
    return 0
