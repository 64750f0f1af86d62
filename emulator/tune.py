"""``ckpt-emu tune``: measure checkpoint costs by emulation, plan the interval, confirm it.

1. Measure: a short run of the config (its scale and tiers) in sync and async
   mode gives the stall per checkpoint (worst rank), local write and drain time.
2. Plan: those costs go into the planner (emulator/planner.py) for the target
   cluster; the recommendation is the mode and interval with the best goodput.
3. Confirm: one more run, async or sync as recommended, checkpointing every
   ``round(T / step_seconds)`` steps. A recommended interval longer than the
   confirmation budget allows is time-compressed by a factor c < 1 (the run uses
   c*T) and the prediction is recomputed for c*T with the same measured costs.
   Compression makes the check stricter: overhead and drain overlap scale with
   1/interval, so a drain that beats c*T beats T.
The report compares predicted and measured overhead and overlap, says whether
every drain finished before the next checkpoint, and gives the global
bandwidth headroom: the measured drain bandwidth over the bandwidth that keeps
drain overlap at the planner's target at the recommended interval.
"""
from __future__ import annotations

import copy
import json
import math
from pathlib import Path

from . import planner
from .errors import UserError


def _run(cfg, out: Path, *, modes: list[str], saves: int, interval_steps: int) -> dict:
    from .cli import execute_run
    c = copy.deepcopy(cfg)
    c.run.out = str(out)
    c.checkpoint.modes = modes
    c.checkpoint.saves = saves
    c.checkpoint.loads = 0
    c.checkpoint.interval_steps = interval_steps
    c.training.steps = None
    c.failures.lose_local_after = None
    execute_run(c)
    return json.loads((out / "results.json").read_text())


def tune(cfg, *, accelerators: int, mttf_hours: float = 50_000.0, confirm_seconds: float = 20.0,
         measure_checkpoints: int = 3, overlap_target: float = 0.10, nodes: int | None = None) -> dict:
    from .simulation import recommend as sim
    if accelerators < 1:
        raise UserError("--accelerators: must be >= 1")
    sim.check_nodes(accelerators, nodes)
    if confirm_seconds <= 0 or measure_checkpoints < 1:
        raise UserError("--confirm-seconds must be > 0 and --measure-checkpoints >= 1")
    step_s = cfg.training.step_seconds
    if step_s <= 0:
        raise UserError("training.step_seconds: tune needs emulated compute time (> 0) to express intervals")
    base = Path(cfg.run.out)

    measured = _run(cfg, base / "tune-measure", modes=["sync", "async"], saves=measure_checkpoints,
                    interval_steps=cfg.checkpoint.interval_steps)
    sync, asyn = measured["modes"]["sync"], measured["modes"]["async"]
    actual_bytes = measured["bytes"]["run_actual_state"]
    drain_s = sync["drain_mean_s"] if cfg.tiers.local is not None else 0.0
    inputs = planner.PlanInputs(
        accelerators=accelerators, mttf_hours=mttf_hours, overlap_target=overlap_target,
        stall_seconds=max(sync["stall_mean_s"], 1e-6),
        async_stall_seconds=max(asyn["stall_mean_s"], 1e-6) if cfg.tiers.local is not None else None,
        drain_seconds=drain_s, checkpoint_bytes=max(1, int(actual_bytes)))
    plan = planner.plan(inputs)
    best = {m: plan.intervals[f"optimal_{m}"] for m in ("sync", "async")}
    goodput = {"sync": best["sync"].sync_goodput, "async": best["async"].async_goodput}
    mode = "async" if cfg.tiers.local is not None and goodput["async"] >= goodput["sync"] else "sync"
    interval = best[mode].interval_s
    simulated = None
    if sim.needs_simulation(nodes):  # more nodes than one machine emulates: queueing on the global tier
        simulated = sim.recommend(cfg, str(base / "tune-measure" / "results.json"), accelerators=accelerators,
                                  nodes=nodes, mttf_hours=mttf_hours)
        mode, interval = simulated["mode"], simulated["interval_s"]
        goodput = {m: v["goodput"] for m, v in simulated["per_mode"].items()}

    checks = max(3, measure_checkpoints)
    compression = min(1.0, confirm_seconds / (interval * checks))
    run_interval_steps = max(1, round(interval * compression / step_s))
    run_interval = run_interval_steps * step_s
    predicted = planner.estimate(inputs, run_interval)
    confirm = _run(cfg, base / "tune-confirm", modes=[mode], saves=checks, interval_steps=run_interval_steps)
    got = confirm["modes"][mode]
    drain_bw = (actual_bytes / drain_s) if drain_s > 0 else math.inf
    needed_bw = actual_bytes / (overlap_target * interval)
    return {
        "accelerators": accelerators,
        "cluster_mttf_s": plan.cluster_mttf_s,
        "measured": {
            "bytes": actual_bytes,
            "sync_stall_s": sync["stall_mean_s"], "async_stall_s": asyn["stall_mean_s"],
            "local_write_s": sync["local_write_mean_s"], "drain_s": drain_s,
        },
        "recommended": {
            "mode": mode, "interval_s": interval, "goodput": goodput[mode],
            "goodput_other_mode": goodput.get("sync" if mode == "async" else "async", math.nan),
            "source": "simulator" if simulated else "planner", "simulation": simulated,
            "young_s": plan.young_interval_s, "daly_s": plan.daly_interval_s,
        },
        "confirmation": {
            "interval_s": run_interval, "interval_steps": run_interval_steps, "compression": compression,
            "checkpoints": got["checkpoints"],
            "predicted_overhead": predicted.sync_overhead if mode == "sync" else predicted.async_overhead,
            "measured_overhead": got["overhead_ratio"],
            "predicted_overlap": predicted.drain_overlap if cfg.tiers.local is not None else 0.0,
            "measured_overlap": got["drain_overlap_ratio"],
            "deadline_misses": got["deadline_misses"],
            "incomplete": got["incomplete"],
            "drains_beat_next_checkpoint": got["deadline_misses"] == 0 and got["incomplete"] == 0,
        },
        "global_bandwidth": {
            "measured_drain_bytes_per_s": drain_bw,
            "needed_bytes_per_s": needed_bw,
            "headroom": drain_bw / needed_bw if needed_bw else math.inf,
        },
        "runs": {"measure": str(base / "tune-measure"), "confirm": str(base / "tune-confirm")},
    }


def _s(v: float) -> str:
    if v >= 120:
        return f"{v / 60:.1f} min"
    return f"{v:.2f} s" if v >= 1 else f"{v * 1000:.1f} ms"


def format_tune(r: dict) -> str:
    m, rec, c, bw = r["measured"], r["recommended"], r["confirmation"], r["global_bandwidth"]
    lines = [
        f"tune for {r['accelerators']} accelerators (cluster MTTF {_s(r['cluster_mttf_s'])})",
        f"  measured at this config's scale ({m['bytes'] / 2**30:.3f} GiB): sync stall {_s(m['sync_stall_s'])}, "
        f"async stall {_s(m['async_stall_s'])}, local write {_s(m['local_write_s'])}, drain {_s(m['drain_s'])}",
        f"  recommended: {rec['mode']} every {_s(rec['interval_s'])} (goodput {rec['goodput'] * 100:.2f} %, "
        f"other mode at its best {rec['goodput_other_mode'] * 100:.2f} %; Young {_s(rec['young_s'])}, "
        f"Daly {_s(rec['daly_s'])})",
        *([f"    by simulation: {rec['simulation']['nodes']:,} nodes, each writing what the measured one did, "
           f"{rec['simulation']['days_simulated']:.0f} days per interval tried"] if rec.get("simulation") else []),
        f"  confirmation run: every {_s(c['interval_s'])} ({c['interval_steps']} steps"
        + (f", time-compressed x{c['compression']:.3g}" if c["compression"] < 1 else "") + f"), "
        f"{c['checkpoints']} checkpoints",
        f"    overhead  predicted {c['predicted_overhead'] * 100:6.2f} %   measured {c['measured_overhead'] * 100:6.2f} %",
        f"    overlap   predicted {c['predicted_overlap'] * 100:6.2f} %   measured {c['measured_overlap'] * 100:6.2f} %",
        f"    drains finished before the next checkpoint: "
        + ("yes" if c["drains_beat_next_checkpoint"] else
           f"NO ({c['deadline_misses']} deadline misses, {c['incomplete']} incomplete)"),
        f"  global bandwidth headroom: x{bw['headroom']:.1f} (measured drain {bw['measured_drain_bytes_per_s'] / 2**30:.2f}"
        f" GiB/s, needed {bw['needed_bytes_per_s'] / 2**30:.3f} GiB/s for 10 % overlap)",
    ]
    return "\n".join(lines) + "\n"
