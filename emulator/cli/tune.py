"""``ckpt-emu tune``: measure a design by emulation, plan it with the planner, confirm by emulation.

1. Measure: a short run of the config (its scale and tiers) on the job's layout: with
   ``--accelerators`` (and ``--nodes``) the design's job is that many nodes, so the emulated node is
   a node of that job (its share of the checkpoint, its share of shared links), the no-checkpoint
   baseline, sync and async mode, and one load.
2. Calibrate: the run's results.json as the design model's calibration
   (``emulator.simulation.calibrate.read_calibration``): each tier's copy and restore rate per node,
   the snapshot rate, the fixed costs per checkpoint, the interference of background copies; the
   design (emulator/design) takes a measured rate where the run could not reach the design's.
3. Plan: the planner (emulator/planner), the same one ``plan`` runs, on that calibrated design: the
   best mode, base interval and ``every`` per tier, and the global bandwidth it needs.
4. Confirm: one more run at the recommended interval (whole steps; time-compressed by c <= 1 when
   it would outlast ``--confirm-seconds``; the prediction is recomputed at the interval run),
   comparing predicted and measured overhead and overlap, and whether every drain beat the next
   checkpoint. Compression makes the check stricter: overhead and overlap grow as 1/interval. It
   never brings async checkpoints closer than the pipeline commits them (waits the schedule never has).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from emulator import planner
from emulator.cli.common import add_config_args, add_fail_on_miss, load, number, report_misses
from emulator.cli.plan import job_shape, s3_figures
from emulator.errors import EXIT_INTERRUPTED, Interrupted, UserError
from emulator.job import outdir
from emulator.job.clock import Clock
from emulator.results.verdict import tune_misses
from emulator.units import fmt_bytes, fmt_duration, fmt_pct, fmt_rate


def run_config(cfg, out: Path, *, modes: list[str], saves: int, interval_steps: int, loads: int = 0,
               extra: tuple = ()):
    """The config of one of tune's runs: ``modes``, ``saves`` checkpoints every ``interval_steps`` into
    ``out``, with the no-checkpoint baseline; ``extra``: more overrides (each tier's interval)."""
    return cfg.with_overrides(f"run.out={out}", f"checkpoint.modes=[{', '.join(modes)}]",
                              f"checkpoint.saves={saves}", f"checkpoint.loads={loads}", "checkpoint.baseline=true",
                              f"checkpoint.interval_steps={interval_steps}", "training.steps=null",
                              "failures.lose_local_after=null", *extra)


def _run(cfg, out: Path, *, force: bool = False, quiet: bool = True, stage: str = "", **run) -> dict:
    from emulator.launch.runner import execute_run
    execute_run(run_config(cfg, out, **run), force=force, quiet=quiet, progress_label=f"tune, {stage}: ")
    return json.loads((out / outdir.RESULTS).read_text())


def _check_folders(cfg, base: Path, force: bool) -> None:
    """Both runs' results folders, before the first run starts: a finished tune's are never
    replaced unasked (--force), and the confirmation must not find this out after the measurement."""
    from emulator.launch.runner import check_results_folder
    for name in ("tune-measure", "tune-confirm"):
        check_results_folder(cfg.with_overrides(f"run.out={base / name}"), force)


def job_config(cfg, accelerators: int, nodes: int | None):
    """The config with its design's job set to the one ``--accelerators``/``--nodes`` name, so the run's
    node is a node of that job (its layout, its bytes, its share of shared links)."""
    nodes, per_node = job_shape(cfg, accelerators, nodes)
    return cfg.with_overrides(f"design.job.nodes={nodes}", f"design.job.accelerators_per_node={per_node}")


def tune(cfg, *, accelerators: int, mttf_hours: float | None = None, confirm_seconds: float = 20.0,
         measure_checkpoints: int = 3, overlap_target: float = planner.OVERLAP_TARGET,
         nodes: int | None = None, force: bool = False, quiet: bool = True) -> dict:
    """Measure, plan, confirm (module docstring); every time in the result is at full size."""
    from emulator.design import resolve
    from emulator.simulation.calibrate import read_calibration
    if accelerators < 1:
        raise UserError("--accelerators: must be >= 1")
    if nodes is not None and nodes < 1:
        raise UserError(f"--nodes: must be >= 1, got {nodes}")
    if confirm_seconds <= 0 or measure_checkpoints < 1:
        raise UserError("--confirm-seconds must be > 0 and --measure-checkpoints >= 1")
    if mttf_hours is not None and not 0 < mttf_hours < math.inf:
        raise UserError(f"--mttf-hours: must be a number of hours > 0, got {mttf_hours:g}")
    if cfg.training.step_seconds <= 0:
        raise UserError("training.step_seconds: tune needs emulated compute time (> 0) to express intervals")
    cfg = job_config(cfg, accelerators, nodes)
    base = Path(cfg.run.out)
    measure = base / "tune-measure"
    _check_folders(cfg, base, force)
    res = _run(cfg, measure, modes=["sync", "async"], saves=measure_checkpoints,
               interval_steps=cfg.checkpoint.interval_steps, loads=1, force=force, quiet=quiet,
               stage="run 1 of 2, measuring")
    if res.get("stopped_early"):
        raise Interrupted(f"tune stopped during its measurement run: nothing planned (its results: {measure})")
    design = resolve(cfg, calibration=read_calibration(str(measure / outdir.RESULTS)), mttf_hours=mttf_hours)
    p = planner.plan(design, overlap_target=overlap_target)
    # the confirmation runs at the dilation the measurement's probe chose, and at the scale it chose it
    # for (run.wall_target may have lowered it): no second probe, and no second fit of the scale
    cfg = cfg.with_overrides(f"run.dilation={(res.get('dilation') or {}).get('factor', 1.0)}",
                             f"run.scale={res.get('scale', cfg.run.scale)}", "run.wall_target=null")
    confirmation = _confirm(cfg, base / "tune-confirm", p, max(3, measure_checkpoints), confirm_seconds,
                            measured=res, force=force, quiet=quiet)
    return {
        "accelerators": design.job.accelerators, "nodes": design.job.nodes,
        "cluster_mttf_s": design.failures.cluster_mttf_s, "checkpoint_bytes": design.job.checkpoint_bytes,
        "measured": _measured(p, res, cfg), "planned": _planned(p),
        "plan_goodput": {m: s.best.goodput for m, s in p.modes.items()},
        "recommended": _recommended(p),
        "confirmation": confirmation,
        "global_bandwidth": _bandwidth(p),
        "global_volume": vars(p.volume) if p.volume is not None else None,
        "s3_cost": s3_figures(cfg, p),
        "notes": list(p.notes),
        "runs": {"measure": str(measure), "confirm": str(base / "tune-confirm")},
    }


def _measured(p: planner.Plan, res: dict, cfg) -> dict:
    """What the run measured, as the calibrated design's closed forms at full size (the job's)."""
    c, tiers = p.costs, p.design.tiers
    first = tiers[0]
    return {"bytes": res["bytes"]["run_actual_state"], "full_size_bytes": res["bytes"]["run_emulated"],
            "scale": cfg.run.scale, "snapshot_s": c.snapshot_s,
            "sync_stall_s": c.sync_stall_s, "async_stall_s": c.async_stall_s, "copy_s": dict(c.copy_s),
            "local_write_s": c.copy_s.get("local", 0.0), "drain_s": c.copy_s["global"] if first != "global" else 0.0,
            # the async commit: from the end of the stall (the snapshot) until durable on global storage
            "commit_s": c.lag_s["global"], "interference_s": p.design.interference_share * c.lag_s["global"],
            "restore_s": {k.name: k.restore_s for k in p.classes}}


def _planned(p: planner.Plan) -> dict:
    return {"classes": {k.name: {"per_day": k.per_day, "tier": k.tier, "detect_s": k.detect_s,
                                 "restart_s": k.restart_s, "restore_s": k.restore_s, "recovery_s": k.recovery_s}
                        for k in p.classes},
            "sources": dict(p.design.sources)}


def _recommended(p: planner.Plan) -> dict:
    other = [s.best.goodput for m, s in p.modes.items() if m != p.recommended]
    b = p.best
    return {"mode": p.recommended, "interval_s": b.base_interval_s, "goodput": b.goodput,
            "goodput_other_mode": other[0] if other else math.nan, "source": "planner",
            "every": b.every, "tier_interval_s": {n: e * b.base_interval_s for n, e in b.every.items()},
            "on_grid_edge": list(p.modes[p.recommended].on_edge),
            "young_s": p.reference.young_s, "daly_s": p.reference.daly_s}


def _bandwidth(p: planner.Plan) -> dict:
    """The global tier at the recommended intervals: the rate the calibrated design drains the job's
    checkpoint at, the rate that keeps the drain within the overlap target, their ratio."""
    g = next(t for t in p.tiers if t.name == "global")
    unpaced = p.design.sources.get("global_write") == "measured" and \
        p.design.link("global").drain.aggregate_bps == p.design.link("global").drain.node_bps
    return {"measured_drain_bytes_per_s": g.rate_bps, "measured_as": "one node" if unpaced else "every node",
            "needed_bytes_per_s": g.needed_bps, "headroom": g.headroom, "interval_s": g.interval_s,
            "overlap_target": p.overlap_target, "family": g.family}


def _run_predictions(p: planner.Plan, interval_s: float) -> tuple[float, float]:
    """(overhead, drain overlap) the run's own node should show at ``interval_s``: the run starts part
    of a node of the job (its ranks' bytes: the ``share``), and each copy of its takes that share of
    the job's node's (its tiers are paced at that node's rates); the snapshot is each accelerator's."""
    d, c, every = p.design, p.costs, p.best.every
    share = d.job.emulated[0].node_bytes / max(1, d.job.heaviest.node_bytes)
    first = d.tiers[0]
    drain = share * c.copy_s["global"] / (every.get("global", 1) * interval_s) if first != "global" else 0.0
    stall = c.snapshot_s
    if p.recommended == "sync":
        latency = d.link("global").latency_s if d.link("global") else 0.0
        stall += d.fixed_pre_s + (d.fixed_post_s + latency) / every.get("global", 1) + share * sum(
            c.copy_s[n] / every[n] for n in d.tiers)
    return stall / interval_s, drain


def _confirm(cfg, out: Path, p: planner.Plan, checks: int, confirm_seconds: float, *, measured: dict,
             force: bool = False, quiet: bool = True) -> dict:
    """Run at the recommended (full-size) intervals, time-compressed by c <= 1 when its wall time
    (checks x interval x the time factor) would exceed ``confirm_seconds``; compare with the
    prediction at c*T; ``measured``: the measuring run's results, at the same scale and dilation."""
    mode, best = p.recommended, p.best
    wall_per_design_s = Clock.of(cfg.run).time_factor  # the run's clock, outside the design
    compression = min(1.0, confirm_seconds / (best.base_interval_s * wall_per_design_s * checks))
    step = cfg.training.step_seconds
    steps = max(1, round(best.base_interval_s * compression / step), _fewest_steps(p, step, measured))
    run_interval = steps * step  # full size
    compression = min(1.0, run_interval / best.base_interval_s)
    extra = tuple(f"tiers.{n}.interval_steps={steps * e if e > 1 else 'null'}"  # each tier its every-N-th
                  for n, e in list(best.every.items())[1:])
    overhead, overlap = _run_predictions(p, run_interval)
    run = _run(cfg, out, modes=[mode], saves=checks, interval_steps=steps, extra=extra, force=force, quiet=quiet,
               stage=f"run 2 of 2, confirming {mode}")
    got = run["modes"][mode]
    stopped = bool(run.get("stopped_early"))
    return {
        "interval_s": run_interval, "interval_steps": steps, "compression": compression, "every": best.every,
        "checkpoints": got["checkpoints"], "checks": checks, "stopped_early": stopped,
        "predicted_overhead": overhead, "measured_overhead": _design_clock(got, "overhead_ratio"),
        "predicted_overlap": overlap, "measured_overlap": _design_clock(got, "drain_overlap_ratio"),
        "deadline_misses": got["deadline_misses"], "incomplete": got["incomplete"],
        # None: stopped early (Ctrl-C), nothing confirmed either way
        "drains_beat_next_checkpoint": None if stopped else got["deadline_misses"] == 0 and got["incomplete"] == 0,
    }


#: the share the async commit may grow by between the measuring run and the confirmation (this host's
#: own time in it varies from run to run)
COMMIT_ROOM = 1.25


def _fewest_steps(p: planner.Plan, step_s: float, measured: dict) -> int:
    """The fewest steps between async checkpoints that the pipeline commits in, with room to spare:
    closer ones wait for the one before, a regime the recommended schedule never runs in. The commit
    is the design's, or the measuring run's own where longer: at a small scale this host's software
    (counted once at full size) fills a step here that the design's bytes leave free."""
    if p.recommended != "async":
        return 1
    design_steps = max(p.costs.lag_s.values()) / step_s
    here_step = (measured.get("step_seconds") or {}).get("here")
    here_lag = measured["modes"].get("async", {}).get("lag_max_s", 0.0)
    return max(1, math.ceil(COMMIT_ROOM * max(design_steps, here_lag / here_step if here_step else 0.0)))


def _design_clock(mode: dict, key: str) -> float:
    """A mode's ratio at full size (its stalls and drains as the design's), as the prediction is."""
    return (mode.get("full_size") or {}).get(key, mode[key])


def _beat(c: dict) -> str:
    if c["drains_beat_next_checkpoint"] is None:
        return (f"not confirmed: the confirmation run was stopped after {c['checkpoints']} of {c['checks']} "
                "checkpoints (Ctrl-C)")
    if c["drains_beat_next_checkpoint"]:
        return "yes"
    return f"NO ({c['deadline_misses']} deadline misses, {c['incomplete']} incomplete)"


def _x(ratio: float) -> str:
    return f"{ratio:.1f}" if ratio >= 1 else f"{ratio:.2g}"  # a shortfall keeps its digits (x0.0093)


def format_tune(r: dict) -> str:
    from emulator.simulation import s3cost
    m, rec, c, bw = r["measured"], r["recommended"], r["confirmation"], r["global_bandwidth"]
    restores = ", ".join(f"{k} {fmt_duration(v)}" for k, v in m["restore_s"].items())
    others = ", ".join(f"{n} every {e} ({fmt_duration(rec['tier_interval_s'][n])})"
                       for n, e in list(rec["every"].items())[1:])
    fam = bw["family"]
    lines = [
        f"tune for {r['accelerators']:,} accelerators on {r['nodes']:,} node{'s' if r['nodes'] != 1 else ''} "
        f"(cluster MTTF "
        f"{fmt_duration(r['cluster_mttf_s'])})",
        f"  job's checkpoint {fmt_bytes(r['checkpoint_bytes'])}; measured at scale {m['scale']:g} "
        f"({fmt_bytes(m['bytes'])}; {fmt_bytes(m['full_size_bytes'])} at full size), at full size: sync stall "
        f"{fmt_duration(m['sync_stall_s'])}, async stall {fmt_duration(m['async_stall_s'])}, local write "
        f"{fmt_duration(m['local_write_s'])}, drain {fmt_duration(m['drain_s'])}, async commit (stall end to "
        f"durable) {fmt_duration(m['commit_s'])}, interference {fmt_duration(m['interference_s'])} per "
        f"checkpoint; restore {restores}",
        f"  recommended: {rec['mode']} every {fmt_duration(rec['interval_s'])}"
        + (f", {others}" if others else "") + f" (goodput {fmt_pct(rec['goodput'])}"
        + ("" if math.isnan(rec["goodput_other_mode"]) else
           f", other mode at its best {fmt_pct(rec['goodput_other_mode'])}")
        + (f"; Young {fmt_duration(rec['young_s'])}, Daly {fmt_duration(rec['daly_s'])}" if rec["young_s"] else "")
        + ")" + (f"; on the grid's edge: {', '.join(rec['on_grid_edge'])}" if rec["on_grid_edge"] else ""),
        f"  confirmation run: every {fmt_duration(c['interval_s'])} at full size ({c['interval_steps']} steps"
        + (f", time-compressed x{c['compression']:.3g}" if c["compression"] < 1 else "") + f"), "
        f"{c['checkpoints']} checkpoints",
        f"    overhead  predicted {c['predicted_overhead'] * 100:6.2f} %   measured {c['measured_overhead'] * 100:6.2f} %",
        f"    overlap   predicted {c['predicted_overlap'] * 100:6.2f} %   measured {c['measured_overlap'] * 100:6.2f} %",
        "    drains finished before the next checkpoint: " + _beat(c),
        f"  global bandwidth headroom: x{_x(bw['headroom'])} (drain {fmt_rate(bw['measured_drain_bytes_per_s'], fam)}"
        f" for the job, {bw['measured_as']} draining; needed {fmt_rate(bw['needed_bytes_per_s'], fam)} for the job's "
        f"checkpoint every {fmt_duration(bw['interval_s'])} at {bw['overlap_target'] * 100:g} % overlap)",
    ]
    v = r.get("global_volume")
    if v is not None and v["flagged"]:
        lines.append(f"  FLAG: writes {fmt_bytes(v['bytes_per_day'])} a day to global storage, {v['per_failure']:,.0f} "
                     f"checkpoints per failure that restores from it (more than {v['limit_per_failure']:g}, and more than one every 15 minutes): "
                     f"`ckpt-emu plan` shows the best interval under that")
    if r.get("s3_cost"):
        lines.append(f"  S3 cost at the recommended interval: {s3cost.format_cost(r['s3_cost'])}")
    return "\n".join(lines) + "\n"


def add_tune_parser(sub) -> None:
    tune = sub.add_parser("tune", help="measure costs by emulation, plan the interval, confirm it by emulation",
                          examples=("ckpt-emu tune --accelerators 16384",
                                    "ckpt-emu tune design.yaml --accelerators 16384 --nodes 2048 --json"))
    add_config_args(tune)
    tune.add_argument("--accelerators", type=int, required=True, help="accelerators in the target job")
    tune.add_argument("--nodes", type=int, help="nodes of the target job (default: accelerators / the design's "
                      "accelerators per node)")
    tune.add_argument("--mttf-hours", type=number, help="per-accelerator MTTF (default: the design's, else 50000)")
    tune.add_argument("--out", help="results folder (measurement and confirmation runs go below it)")
    tune.add_argument("--force", action="store_true", help="replace the results a finished tune left in --out")
    tune.add_argument("--quiet", action="store_true", help="no progress display (the result is still printed)")
    tune.add_argument("--confirm-seconds", type=number, default=20.0,
                      help="longest training time of the confirmation run; longer intervals are time-compressed")
    tune.add_argument("--measure-checkpoints", type=int, default=3, help="checkpoints per mode when measuring")
    tune.add_argument("--json", action="store_true", help="one JSON object")
    add_fail_on_miss(tune)
    tune.set_defaults(func=cmd_tune)


def cmd_tune(args) -> int:
    cfg = load(args)
    result = tune(cfg, accelerators=args.accelerators, mttf_hours=args.mttf_hours,
                  confirm_seconds=args.confirm_seconds, measure_checkpoints=args.measure_checkpoints,
                  nodes=args.nodes, force=args.force, quiet=args.quiet)
    print(json.dumps(result, indent=1) if args.json else format_tune(result), end="" if not args.json else "\n")
    missed = report_misses(tune_misses(result), cfg.run.fail_on_miss)
    return EXIT_INTERRUPTED if result["confirmation"]["stopped_early"] else missed
