"""What ``ckpt-emu tune`` recommends when the cluster has more nodes than this machine can emulate.

The planner assumes every checkpoint costs what the measured one did; at many nodes the shared
global storage makes every node's copies queue behind each other, which only the simulation sees.
Here the job is the design's (emulator/design: ``accelerators`` ranks on ``nodes`` nodes, the
config's TP x PP with DP what they give, each node its share of the job's full-size checkpoint);
the measured node calibrates its rates (its results.json: rates hold at any size), not its bytes.
Intervals are full-size seconds, and the interval is chosen by simulating a grid around the
planner's optimum and fitting the best of it (sweep.fit_optimum), for each mode.
"""
from __future__ import annotations

import math

from emulator.design import resolve
from emulator.errors import UserError
from emulator.simulation.calibrate import mode_calibrations, read_results
from emulator.simulation.study import Study
from emulator.simulation.sweep import fit_optimum
from emulator.sizing import checkpoint_size

#: one machine emulates one node (``ckpt-emu run`` starts one torchrun agent per node)
MAX_EMULATED_NODES = 1
#: failures to simulate per grid point (enough to place the optimum within a few percent), unless
#: that takes more than MAX_CHECKPOINTS_PER_POINT checkpoints (tiny async intervals): tune stays quick
FAILURES_PER_POINT = 400
MAX_CHECKPOINTS_PER_POINT = 10_000
GRID = [0.35 * (8.0 ** (i / 6)) for i in range(7)]  # 0.35x .. 2.8x the planner's interval


def check_nodes(cfg, accelerators: int, nodes: int | None) -> None:
    """``--nodes`` must split ``--accelerators`` evenly, and a simulated job must hold the config's
    TP x PP; raises UserError otherwise (before anything is measured)."""
    if nodes is None:
        return
    if nodes < 1:
        raise UserError(f"--nodes: must be >= 1, got {nodes}")
    if accelerators % nodes:
        raise UserError(f"--nodes: {accelerators:,} accelerators do not split evenly over {nodes:,} nodes")
    tp_pp = cfg.parallelism.tp * cfg.parallelism.pp
    if needs_simulation(nodes) and accelerators % tp_pp:
        raise UserError(f"--accelerators: {accelerators:,} is not a multiple of tp x pp = {tp_pp} "
                        f"(parallelism.tp, parallelism.pp): no layout of the job fills them")


def needs_simulation(nodes: int | None) -> bool:
    return nodes is not None and nodes > MAX_EMULATED_NODES


def job_checkpoint_bytes(cfg, accelerators: int, nodes: int | None) -> int:
    """The job's full-size checkpoint, whatever share of it the measurement run wrote. Simulated
    (``nodes`` past one machine): the design's job of ``accelerators`` ranks on ``nodes`` nodes; else
    the config's own layout (emulator/sizing.py, MLPerf's table)."""
    if needs_simulation(nodes):
        return resolve(cfg, nodes=nodes, accelerators_per_node=accelerators // nodes).job.checkpoint_bytes
    return checkpoint_size(cfg.model, cfg.parallelism).total_bytes


def _best_interval(study: Study, mode: str) -> tuple[float, float]:
    centre = study.planned(mode).interval_s
    mttf = study.design.failures.cluster_mttf_s
    failures_days = FAILURES_PER_POINT * mttf / 86400
    study.days = min(3650.0, failures_days, max(1.0, MAX_CHECKPOINTS_PER_POINT * centre / 86400))
    xs = [centre * f for f in GRID]
    ys = [study.run(mode, interval_s=x).goodput for x in xs]
    fitted = fit_optimum(xs, ys)
    if fitted is None:
        k = max(range(len(ys)), key=ys.__getitem__)
        return xs[k], ys[k]
    return fitted, study.run(mode, interval_s=fitted).goodput


def designs(cfg, results_path: str, *, accelerators: int, nodes: int, mttf_hours: float, modes) -> dict:
    """{mode: the design of the job, calibrated by the measured run's checkpoints of that mode}."""
    cals = mode_calibrations(read_results(results_path), modes)
    return {m: resolve(cfg, nodes=nodes, accelerators_per_node=accelerators // nodes, calibration=cals[m],
                       mttf_hours=mttf_hours) for m in modes}


def recommend(cfg, results_path: str, *, accelerators: int, nodes: int, mttf_hours: float,
              seed: int = 0) -> dict:
    """The best mode and interval (training time between checkpoints) by simulation."""
    modes = ["sync"] + (["async"] if cfg.tiers.local is not None or cfg.tiers.memory is not None else [])
    ds = designs(cfg, results_path, accelerators=accelerators, nodes=nodes, mttf_hours=mttf_hours, modes=modes)
    best, days = {}, {}
    for m in modes:  # one study per mode: each simulates its own span
        study = Study(cfg, ds, modes, 1.0, seed=seed)
        best[m] = _best_interval(study, m)
        days[m] = study.days
    mode = max(modes, key=lambda m: best[m][1])
    other = [m for m in modes if m != mode]
    return {
        "source": "simulator", "nodes": nodes, "checkpoint_bytes": ds[mode].job.checkpoint_bytes,
        "days_simulated": days[mode], "mode": mode,
        "interval_s": best[mode][0], "goodput": best[mode][1],
        "goodput_other_mode": best[other[0]][1] if other else math.nan,
        "per_mode": {m: {"interval_s": t, "goodput": g} for m, (t, g) in best.items()},
    }
