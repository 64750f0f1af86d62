"""``ckpt-emu tune``: measure checkpoint costs by emulation, plan the interval, confirm it.

1. Measure: a short run of the config (its scale and tiers): the no-checkpoint
   baseline, sync and async mode, and one load. ``simulate``'s calibration
   (emulator/simulation/calibrate.py) turns it into costs, and the simulation of
   the measured node at full size gives the stall per checkpoint, local write,
   drain, the async commit (from the end of the stall until durable: local
   write + drain + manifest), the restore after a failure, and the interference
   (async steps slowed by the background work). Byte-proportional costs grow
   to full size; request latency and per-checkpoint costs (barriers,
   manifests) do not. The run writes the config's started ranks (one node of a
   subset preset); the plan is for the job's whole checkpoint (emulator/sizing.py).
2. Plan: those costs go into the planner (emulator/planner.py) for the target
   cluster; the recommendation is the mode and interval with the best goodput.
   With ``--nodes`` above what one machine emulates, the simulator recommends
   instead (emulator/simulation/recommend.py): the job's checkpoint spread over
   its nodes as ``simulate`` sizes it, at the measured rates, and drains queue
   on the shared global tier.
3. Confirm: one more run, async or sync as recommended, checkpointing every
   ``round(T / step_seconds)`` steps (full-size step time). A recommended interval longer than the
   confirmation budget allows is time-compressed by a factor c < 1 (the run uses
   c*T) and the prediction is recomputed for c*T with the same measured costs.
   Compression makes the check stricter: overhead and drain overlap scale with
   1/interval, so a drain that beats c*T beats T.
The report compares predicted and measured overhead and overlap, says whether
every drain finished before the next checkpoint, and gives the global
bandwidth headroom: the job's drain bandwidth as measured over the bandwidth
that drains the job's checkpoint within the planner's overlap target at the
recommended interval (see :func:`_bandwidth`).
Where the config has levels (a memory or peer tier, or tier intervals), the recommendation also
gives the multi-level planner's interval per tier (:func:`level_recommendation`): the levels at
full size with the measured run's lags and recoveries.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

from emulator import planner
from emulator.simulation import s3cost
from emulator.cli.common import add_config_args, load, number
from emulator.errors import UserError
from emulator.job import outdir


def _run(cfg, out: Path, *, modes: list[str], saves: int, interval_steps: int, loads: int = 0) -> dict:
    from emulator.launch.runner import execute_run
    c = cfg.with_overrides(f"run.out={out}", f"checkpoint.modes=[{', '.join(modes)}]",
                           f"checkpoint.saves={saves}", f"checkpoint.loads={loads}", "checkpoint.baseline=true",
                           f"checkpoint.interval_steps={interval_steps}", "training.steps=null",
                           "failures.lose_local_after=null")
    execute_run(c)
    return json.loads((out / outdir.RESULTS).read_text())


def tune(cfg, *, accelerators: int, mttf_hours: float = 50_000.0, confirm_seconds: float = 20.0,
         measure_checkpoints: int = 3, overlap_target: float = 0.10, nodes: int | None = None) -> dict:
    """Measure, plan, confirm; every time in the result is at full size (measured / run.scale).
    With ``nodes`` above what one machine emulates, the simulator recommends (emulator/simulation)."""
    from emulator.simulation import recommend as sim
    if accelerators < 1:
        raise UserError("--accelerators: must be >= 1")
    if not 0 < mttf_hours <= planner.MAX_MTTF_HOURS:  # before a minute of measuring, not after it
        raise UserError(f"--mttf-hours {mttf_hours:g}: must be more than 0 and at most "
                        f"{planner.MAX_MTTF_HOURS:g} hours")
    sim.check_nodes(cfg, accelerators, nodes)
    if confirm_seconds <= 0 or measure_checkpoints < 1:
        raise UserError("--confirm-seconds must be > 0 and --measure-checkpoints >= 1")
    if cfg.training.step_seconds <= 0:
        raise UserError("training.step_seconds: tune needs emulated compute time (> 0) to express intervals")
    job_bytes = sim.job_checkpoint_bytes(cfg, accelerators, nodes)
    base = Path(cfg.run.out)
    measured = _measure(cfg, base / "tune-measure", measure_checkpoints, accelerators, mttf_hours)
    inputs = _plan_inputs(cfg, measured, job_bytes, accelerators, mttf_hours, overlap_target)
    plan = planner.plan(inputs)
    best = {m: plan.intervals[f"optimal_{m}"] for m in ("sync", "async")}
    goodput = plan_goodput = {"sync": best["sync"].sync_goodput, "async": best["async"].async_goodput}
    mode = "async" if cfg.tiers.local is not None and goodput["async"] >= goodput["sync"] else "sync"
    interval, simulated = best[mode].interval_s, None
    if sim.needs_simulation(nodes):  # more nodes than one machine emulates: queueing on the global tier
        simulated = sim.recommend(cfg, str(base / "tune-measure" / outdir.RESULTS), accelerators=accelerators,
                                  nodes=nodes, mttf_hours=mttf_hours)
        mode, interval = simulated["mode"], simulated["interval_s"]
        goodput = {m: v["goodput"] for m, v in simulated["per_mode"].items()}
    confirmation = _confirm(cfg, base / "tune-confirm", inputs, mode, interval,
                            max(3, measure_checkpoints), confirm_seconds)
    return {
        "accelerators": accelerators, "cluster_mttf_s": plan.cluster_mttf_s, "checkpoint_bytes": job_bytes,
        "measured": measured, "planned": asdict(plan.costs), "plan_goodput": plan_goodput,
        "recommended": {
            "mode": mode, "interval_s": interval, "goodput": goodput[mode],
            "goodput_other_mode": goodput.get("sync" if mode == "async" else "async", math.nan),
            "source": "simulator" if simulated else "planner", "simulation": simulated,
            "young_s": plan.young_interval_s, "daly_s": plan.daly_interval_s,
            **_levels(cfg, base / "tune-measure" / outdir.RESULTS, accelerators, nodes, mttf_hours, interval),
        },
        "confirmation": confirmation,
        "global_bandwidth": _bandwidth(cfg, measured, job_bytes, interval, overlap_target),
        "s3_cost": s3cost.plan_figures(cfg, job_bytes=job_bytes, files=accelerators, interval_s=interval),
        "runs": {"measure": str(base / "tune-measure"), "confirm": str(base / "tune-confirm")},
    }


def _levels(cfg, results: Path, accelerators: int, nodes: int | None, mttf_hours: float,
            interval_s: float) -> dict:
    """``{"levels": the planner's intervals per tier}`` where the config has levels, else nothing."""
    from emulator.simulation.level_design import has_levels
    if not has_levels(cfg):
        return {}
    n = nodes or (cfg.design.job_nodes(cfg.parallelism.world_size) if cfg.design else max(1, accelerators // 8))
    return {"levels": level_recommendation(cfg, str(results), accelerators=accelerators, nodes=n,
                                           mttf_hours=mttf_hours, base_interval_s=interval_s)}


def level_recommendation(cfg, results: str, *, accelerators: int, nodes: int, mttf_hours: float,
                         base_interval_s: float | None = None) -> dict:
    """The multi-level planner's ``every`` and interval per tier for ``accelerators`` on ``nodes``,
    with the measured run's lags and recoveries (emulator/simulation/level_design.py); the base
    interval: ``base_interval_s`` (tune's recommendation), else the config's."""
    from emulator.multilevel import optimize
    from emulator.simulation import level_design as ld
    from emulator.simulation.arrivals import DEFAULT_NODE_LOSS_FRACTION
    rates = ld.class_rates(accelerators=accelerators, mttf_hours=mttf_hours,
                           node_loss_fraction=DEFAULT_NODE_LOSS_FRACTION)
    inputs = ld.level_inputs(cfg, nodes=nodes, calibration=ld.read_calibration(results), class_rates=rates,
                             accelerators_per_node=max(1, accelerators // nodes), base_interval_s=base_interval_s)
    best = optimize(inputs, ld.planner_grid(inputs))
    return {"every": best.every, "interval_s": {k: v * inputs.base_interval_s for k, v in best.every.items()},
            "goodput": best.goodput, "calibrated_by": results}


def _measure(cfg, out: Path, checkpoints: int, accelerators: int, mttf_hours: float) -> dict:
    """A short run of the config (baseline, sync, async, one load) and its costs at full size: the
    measured node simulated at its full-size bytes with the run's calibration (simulate's model, so
    latency and per-checkpoint costs are counted once, not / scale)."""
    from emulator.simulation.calibrate import interference_share, load_calibration, read_results
    from emulator.simulation.design import Options, build_design
    from emulator.simulation.study import Study
    has_local = cfg.tiers.local is not None
    modes = ["sync", "async"] if has_local else ["sync"]
    res = _run(cfg, out, modes=["sync", "async"], saves=checkpoints, interval_steps=cfg.checkpoint.interval_steps,
               loads=1)
    path = str(out / outdir.RESULTS)
    cals = load_calibration(cfg, path, modes)
    opts = Options(nodes=res["nodes"], accelerators_per_node=max(1, res["ranks"] // res["nodes"]),
                   run_at_full_size=True)
    designs = {m: build_design(cfg, opts, cals[m]) for m in modes}
    sync = _alone(designs["sync"], "sync")
    asyn = _alone(designs["async"], "async") if has_local else None
    commit = max(0.0, asyn.durability_lag_mean_s - asyn.stall_mean_s) if has_local else 0.0
    study = Study(cfg, designs, modes, 1.0, {}, accelerators=accelerators, mttf_hours=mttf_hours)
    return {
        "bytes": res["bytes"]["run_actual_state"], "full_size_bytes": res["bytes"]["run_emulated"],
        "scale": cfg.run.scale,
        "sync_stall_s": sync.stall_mean_s, "async_stall_s": asyn.stall_mean_s if has_local else 0.0,
        "local_write_s": sync.local_write_mean_s if has_local else 0.0,
        "drain_s": sync.drain_mean_s if has_local else 0.0,
        # the async commit: from the end of the stall (the snapshot) until durable on the global tier
        "commit_s": commit,
        "interference_s": interference_share(read_results(path), "async") * commit if has_local else 0.0,
        "restore_s": study.mean_recovery_s(designs["sync"]),
    }


def _alone(design, mode: str):
    """One failure-free checkpoint of ``design`` after another, far apart: its costs alone."""
    from emulator.simulation.model import RunSpec, simulate
    return simulate(design, RunSpec(mode, 1e9, saves=2))


def _plan_inputs(cfg, m: dict, job_bytes: int, accelerators: int, mttf_hours: float, overlap_target: float):
    has_local = cfg.tiers.local is not None
    return planner.PlanInputs(
        accelerators=accelerators, mttf_hours=mttf_hours, overlap_target=overlap_target,
        stall_seconds=max(m["sync_stall_s"], 1e-6),
        async_stall_seconds=max(m["async_stall_s"], 1e-6) if has_local else None,
        drain_seconds=m["drain_s"], commit_seconds=m["commit_s"] if has_local else None,
        interference_seconds=m["interference_s"] if has_local else None, restore_seconds=m["restore_s"],
        checkpoint_bytes=job_bytes)


def _confirm(cfg, out: Path, inputs, mode: str, interval_s: float, checks: int, confirm_seconds: float) -> dict:
    """Run at the recommended (full-size) interval, time-compressed by c <= 1 when its wall time
    (checks x interval x scale) would exceed ``confirm_seconds``; compare with the prediction at c*T."""
    compression = min(1.0, confirm_seconds / (interval_s * cfg.run.scale * checks))
    steps = max(1, round(interval_s * compression / cfg.training.step_seconds))
    run_interval = steps * cfg.training.step_seconds  # full size
    predicted = planner.estimate(inputs, run_interval)
    got = _run(cfg, out, modes=[mode], saves=checks, interval_steps=steps)["modes"][mode]
    return {
        "interval_s": run_interval, "interval_steps": steps, "compression": compression,
        "checkpoints": got["checkpoints"],
        "predicted_overhead": predicted.sync_overhead if mode == "sync" else predicted.async_overhead,
        "measured_overhead": got["overhead_ratio"],
        "predicted_overlap": predicted.drain_overlap if cfg.tiers.local is not None else 0.0,
        "measured_overlap": got["drain_overlap_ratio"],
        "deadline_misses": got["deadline_misses"], "incomplete": got["incomplete"],
        "drains_beat_next_checkpoint": got["deadline_misses"] == 0 and got["incomplete"] == 0,
    }


def _each_node_own_link(tier_cfg) -> bool:
    """Whether the emulated tier paces every node at its own rate: a node's link, or its share of a
    job-wide rate (``shared_by: job``: rate / the job's nodes), so all nodes drain alongside it."""
    e = tier_cfg.emulate
    return e is not None and e.write_gib_s is not None


def _bandwidth(cfg, m: dict, job_bytes: int, interval_s: float, overlap_target: float) -> dict:
    """The job's global drain bandwidth as measured, over the one that drains the job's checkpoint
    within ``overlap_target`` of the interval. One node was measured: where the emulated global tier
    paces every node (its own link, or its share of the job's aggregate), all nodes drain alongside
    it (the job's bytes in the measured drain time); a real store seen from one node shows only the
    measured node's rate."""
    per_node = _each_node_own_link(cfg.tiers.global_)
    drained = job_bytes if per_node else m["full_size_bytes"]
    drain_bw = drained / m["drain_s"] if m["drain_s"] > 0 else math.inf
    needed = job_bytes / (overlap_target * interval_s)
    return {"measured_drain_bytes_per_s": drain_bw, "measured_as": "every node" if per_node else "one node",
            "needed_bytes_per_s": needed, "headroom": drain_bw / needed if needed else math.inf}


def _s(v: float) -> str:
    if v >= 120:
        return f"{v / 60:.1f} min"
    return f"{v:.2f} s" if v >= 1 else f"{v * 1000:.1f} ms"


def _x(ratio: float) -> str:
    return f"{ratio:.1f}" if ratio >= 1 else f"{ratio:.2g}"  # a shortfall keeps its digits (x0.0093)


def format_tune(r: dict) -> str:
    m, rec, c, bw = r["measured"], r["recommended"], r["confirmation"], r["global_bandwidth"]
    lines = [
        f"tune for {r['accelerators']} accelerators (cluster MTTF {_s(r['cluster_mttf_s'])})",
        f"  job's checkpoint {r['checkpoint_bytes'] / 2**30:,.1f} GiB; "
        f"measured at scale {m['scale']:g} ({m['bytes'] / 2**30:.3f} GiB), at full size "
        f"({m['full_size_bytes'] / 2**30:.1f} GiB): sync stall {_s(m['sync_stall_s'])}, async stall "
        f"{_s(m['async_stall_s'])}, local write {_s(m['local_write_s'])}, drain {_s(m['drain_s'])}, "
        f"async commit (stall end to durable) {_s(m['commit_s'])}, interference {_s(m['interference_s'])} "
        f"per checkpoint, restore {_s(m['restore_s'])} (after a {_s(r['planned']['restart_s'])} restart)",
        f"  recommended: {rec['mode']} every {_s(rec['interval_s'])} (goodput {rec['goodput'] * 100:.2f} %, "
        f"other mode at its best {rec['goodput_other_mode'] * 100:.2f} %; Young {_s(rec['young_s'])}, "
        f"Daly {_s(rec['daly_s'])})",
        *(["    levels (every N-th checkpoint, from the measured lags and recoveries): " + ", ".join(
            f"{k} {v} ({_s(rec['levels']['interval_s'][k])})" for k, v in rec["levels"]["every"].items())
           + f"; goodput {rec['levels']['goodput'] * 100:.2f} %"] if rec.get("levels") else []),
        *([f"    by simulation: {rec['simulation']['nodes']:,} nodes writing the job's checkpoint at the "
           f"measured rates, {rec['simulation']['days_simulated']:.0f} days per interval tried"]
          if rec.get("simulation") else []),
        f"  confirmation run: every {_s(c['interval_s'])} at full size ({c['interval_steps']} steps"
        + (f", time-compressed x{c['compression']:.3g}" if c["compression"] < 1 else "") + f"), "
        f"{c['checkpoints']} checkpoints",
        f"    overhead  predicted {c['predicted_overhead'] * 100:6.2f} %   measured {c['measured_overhead'] * 100:6.2f} %",
        f"    overlap   predicted {c['predicted_overlap'] * 100:6.2f} %   measured {c['measured_overlap'] * 100:6.2f} %",
        "    drains finished before the next checkpoint: "
        + ("yes" if c["drains_beat_next_checkpoint"] else
           f"NO ({c['deadline_misses']} deadline misses, {c['incomplete']} incomplete)"),
        f"  global bandwidth headroom: x{_x(bw['headroom'])} (measured drain "
        f"{bw['measured_drain_bytes_per_s'] / 2**30:.2f} GiB/s, {bw['measured_as']} draining; needed "
        f"{bw['needed_bytes_per_s'] / 2**30:.3f} GiB/s for the job's checkpoint at 10 % overlap)",
    ] + ([f"  S3 cost at the recommended interval: {s3cost.format_cost(r['s3_cost'])}"] if r.get("s3_cost") else [])
    return "\n".join(lines) + "\n"


def add_tune_parser(sub) -> None:
    tune = sub.add_parser("tune", help="measure costs by emulation, plan the interval, confirm it by emulation")
    add_config_args(tune)
    tune.add_argument("--accelerators", type=int, required=True, help="accelerators in the target cluster")
    tune.add_argument("--mttf-hours", type=number, default=50_000.0, help="per-accelerator MTTF (default 50000)")
    tune.add_argument("--out", help="results folder (measurement and confirmation runs go below it)")
    tune.add_argument("--confirm-seconds", type=number, default=20.0,
                      help="longest training time of the confirmation run; longer intervals are time-compressed")
    tune.add_argument("--measure-checkpoints", type=int, default=3, help="checkpoints per mode when measuring")
    tune.add_argument("--nodes", type=int, help="nodes of the target cluster; more than one: recommend by simulation")
    tune.add_argument("--json", action="store_true", help="one JSON object")
    tune.set_defaults(func=cmd_tune)


def cmd_tune(args) -> int:
    cfg = load(args)
    result = tune(cfg, accelerators=args.accelerators, mttf_hours=args.mttf_hours,
                  confirm_seconds=args.confirm_seconds, measure_checkpoints=args.measure_checkpoints,
                  nodes=args.nodes)
    print(json.dumps(result, indent=1) if args.json else format_tune(result), end="" if not args.json else "\n")
    return 0
