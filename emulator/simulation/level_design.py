"""A config's tiers as levels of the multi-level model (issue 24), at full size, and their plan.

:func:`level_inputs` turns a config's design into :class:`emulator.multilevel.LevelInputs` for the
job's heaviest node (its share of the checkpoint by emulator/sizing.py, as ``simulate`` groups the
nodes: a synchronous job's checkpoint is complete, and its restore over, when its slowest node is);
per level, every N-th base checkpoint (``tiers.X.interval_steps / checkpoint.interval_steps``) and

Rates are the design's (``design.node.memory``, ``.local``, ``.nic``, ``design.global``); a tier the
design does not describe is taken at its ``emulate`` rates, per node (a 400 Gb/s NIC without a design).

- memory: stall = the snapshot (each accelerator's share at ``snapshot_gib_s``, as ``simulate``
  assumes); lag = node bytes / the host memory's write rate;
- peer, local, global: copies of the nearest level's file, made one after another in that order
  (as the emulator's pipeline does), so a level's lag is the nearest level's lag plus the copies
  of the levels before it that also take its checkpoints, plus its own: peer node bytes x
  replicas / NIC, NVMe node bytes / its write rate, global node bytes / min(NIC, aggregate /
  nodes) (emulator/design/links.py, every node draining at once);
- async (the config has mode async): no stall beyond the snapshot, but each copy in the background
  costs training a calibrating run's measured interference per second of copy (0 without one);
  sync: each level stalls for its own part of the write path (the first level: snapshot + its
  write) and lags 0;
- restores: memory read; peer fetch over the NIC + memory read; NVMe read; global read by every
  node at once (a restore storm: a process crash or group loss restarts every node) or by the
  replaced node alone (a node loss). A level's restore is the mean over the classes recovering
  there, weighted by their rates: the model's expected recovery cost is exactly that.

Failure classes: ``process`` (host memory survives), ``node`` (its peers hold a copy; without
a peer tier its NVMe is gone with it: global), ``group`` (a replica group: global). A calibration
(a run's results.json with ``levels`` and ``restore_by_tier``) replaces the design's rates by the
run's (each tier's copy, a restore from each tier alone), the nearest tier's lag by the run's, and
the recovery of each class the run went through by the run's; the model predicts the rest.
``simulate --as-run`` against the same run predicts the recoveries too, and so checks the model.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from emulator.design.links import node_share
from emulator.errors import UserError
from emulator.planner.model import FailureClass, Grid, Level, LevelInputs, breakdown, optimize, recovery_levels
from emulator.simulation import levels as level_model
from emulator.simulation.arrivals import GROUP, HOUR, NODE, RESTART
from emulator.simulation.calibrate import interference_share, read_results
from emulator.config.design import DEFAULT_NIC
from emulator.simulation.design import DEFAULT_SNAPSHOT_GIB_S, full_size_groups
from emulator.simulation.sharing import with_design_rates
from emulator.units import GIB, parse_rate

CLASSES = ("process", "node", "group")
#: share of failures that lose a whole replica group (several nodes holding each other's copies:
#: a rack's power, a switch taking hosts' memory with it). An assumption, not a measurement: the
#: published interruption tables (Llama 3's 419 in 54 days) attribute almost all to single hosts.
DEFAULT_GROUP_LOSS_FRACTION = 0.01
#: the planner's candidates for a level's ``every`` (multiples of the base interval)
EVERY_CHOICES = (1, 2, 4, 8, 16, 32, 64)
_TRACE_KINDS = {RESTART: "process", NODE: "node", GROUP: "group"}


def has_levels(cfg) -> bool:
    """Whether the config checkpoints in levels: a memory or peer tier, or a tier interval set."""
    t = cfg.tiers
    return (t.memory is not None or t.peer is not None
            or any(t.entry(n).interval_steps is not None for n in t.configured()))


def check_fractions(node: float, group: float) -> None:
    if node + group > 1:
        raise UserError(f"--node-loss-fraction + --group-loss-fraction: {node + group:g} is above 1")


def class_rates(*, accelerators: int, mttf_hours: float, node_loss_fraction: float,
                group_loss_fraction: float = DEFAULT_GROUP_LOSS_FRACTION) -> dict:
    """Per class, failures per second: the cluster's rate (accelerators / MTTF) split by the fractions."""
    check_fractions(node_loss_fraction, group_loss_fraction)
    total = accelerators / (mttf_hours * HOUR)
    return {"process": (1 - node_loss_fraction - group_loss_fraction) * total,
            "node": node_loss_fraction * total, "group": group_loss_fraction * total}


def trace_classes(trace: list, *, node_loss_fraction: float, group_loss_fraction: float, seed: int) -> list:
    """A failure trace (arrivals.read_trace) as (time, class); a row without a kind is drawn by the fractions."""
    check_fractions(node_loss_fraction, group_loss_fraction)
    rng, out = random.Random(seed), []
    for f in trace:
        if f.kind is not None:
            out.append((f.time_s, _TRACE_KINDS[f.kind]))
            continue
        u = rng.random()
        out.append((f.time_s, "node" if u < node_loss_fraction else
                    "group" if u < node_loss_fraction + group_loss_fraction else "process"))
    return out


def trace_rates(failures: list) -> dict:
    """Per class, its count over the trace's span (its last failure's time): the model's rates."""
    span = max((t for t, _ in failures), default=0.0)
    return {c: (sum(1 for _, k in failures if k == c) / span if span > 0 else 0.0) for c in CLASSES}


# --------------------------------------------------------------------------- calibration

@dataclass(frozen=True)
class LevelCalibration:
    """What a run with levels measured: a node's rates (bytes/s) of each tier's own copy (a peer's:
    its NIC, every replica's bytes) and of a restore from each tier alone, the nearest tier's lag
    at full size (the snapshot, the write and the pipeline's own steps), and the recovery of each
    failure class the run went through, at full size. The model predicts every other lag from
    these rates and the bytes. A plan of the job takes the measured recoveries; ``--as-run``
    predicts them from the rates instead (taking them would make reproducing them no check)."""

    source: str
    copy_bps: dict = field(default_factory=dict)
    read_bps: dict = field(default_factory=dict)
    first_lag_s: float | None = None
    recovery_s: dict = field(default_factory=dict)
    #: training time lost per second of background copies (async; 0: not measured, no baseline)
    interference_share: float = 0.0


def read_calibration(path: str) -> LevelCalibration:
    """The levels' rates of a run's results.json (through calibrate.read_results, the one reader)."""
    fig = read_results(path)
    scale, run = fig.config.run.scale, fig.config
    if not fig.level_stages:
        raise UserError(f"--calibrate {path}: the run has no levels to plan levels from")
    replicas = run.tiers.peer.replicas if run.tiers.peer is not None else 1
    copy = {t: v["node_bytes"] * (replicas if t == "peer" else 1) / v["seconds_mean"]
            for t, v in fig.level_stages.items() if v["seconds_mean"] > 0}
    read = {t: v["node_bytes"] / v["seconds"] for t, v in fig.tier_restores.items() if v["seconds"] > 0}
    first = run.tiers.configured()[0]
    lag = fig.level_lags_s.get(first)
    recovered = {c: v["seconds_full_size"] for c, v in fig.recoveries.items() if v["seconds_full_size"] > 0}
    return LevelCalibration(path, copy, read, lag / scale if lag else None, recovered,
                            interference_share(fig, "async"))


# --------------------------------------------------------------------------- the design

@dataclass(frozen=True)
class LevelDesign:
    """The inputs, and what a report says of them."""

    inputs: LevelInputs
    nodes: int
    node_bytes: float
    replicas: int
    mode: str
    class_restore_s: dict
    sources: dict
    job_bytes: float = 0.0  # every node's bytes (the heaviest node's x nodes where nodes differ not)
    copy_s: dict = field(default_factory=dict)  # tier -> seconds of its own copy (the nearest: its write)


def _tier_rates(cfg, name: str, per_node: int) -> tuple:
    """(write, read) bytes/s of a tier and whether they are the job's aggregate: the design's, else the
    tier's ``emulate`` rates (per node; x the node's ranks where ``shared_by: rank``)."""
    d = cfg.design
    part = {"memory": d.memory, "local": d.local, "global": d.global_}[name] if d is not None else None
    if part is not None:
        return part.write_bps, part.read_bps, name == "global"
    e = cfg.tiers.entry(name).emulate
    if e is None or not e.write_gib_s:
        key = "design.global" if name == "global" else f"design.node.{name}"
        raise UserError(f"{key}: needed to plan the {name} tier (or tiers.{name}.emulate.write_gib_s)")
    k = GIB * (per_node if e.shared_by == "rank" else 1)
    return e.write_gib_s * k, (e.read_gib_s or e.write_gib_s) * k, e.shared_by == "job"


def _rates(cfg, nodes: int, per_node: int) -> dict:
    """Bytes/s of every link the levels use: what one node gets when every node copies at once (a
    global restore also alone); the NIC: the design's, else a 400 Gb/s one."""
    nic = cfg.design.nic_bps if cfg.design is not None else parse_rate(DEFAULT_NIC, "design.node.nic")
    r = {"nic": nic}
    for name in ("memory", "local", "global"):
        if cfg.tiers.entry(name) is None:
            continue
        write, read, job = _tier_rates(cfg, name, per_node)
        cap = nic if name == "global" else math.inf
        share = (lambda rate, k: node_share(rate, cap, k)) if job else (lambda rate, k: min(rate, cap))
        r.update({f"{name}_write": share(write, nodes), f"{name}_read": share(read, nodes),
                  f"{name}_read_alone": share(read, 1)})
    return r


def _transfers(cfg, b: float, r: dict) -> dict:
    """Seconds of each level's own copy of ``b`` node bytes (write) and of its restore (read)."""
    replicas = cfg.tiers.peer.replicas if cfg.tiers.peer is not None else 1
    copy = {"memory": lambda: b / r["memory_write"], "peer": lambda: b * replicas / r.get("peer", r["nic"]),
            "local": lambda: b / r["local_write"], "global": lambda: b / r["global_write"]}
    read = {"memory": lambda: b / r["memory_read"], "peer": lambda: b / r.get("peer", r["nic"]) + b / r["memory_read"],
            "local": lambda: b / r["local_read"], "global": lambda: b / r["global_read"]}
    names = cfg.tiers.configured()
    return {n: copy[n]() for n in names}, {n: read[n]() for n in names}


def _classes(cfg, rates: dict) -> tuple:
    node_to = "peer" if cfg.tiers.peer is not None else "global"  # a lost node's NVMe is lost with it
    nearest = {"process": "memory", "node": node_to, "group": "global"}
    return tuple(FailureClass(c, rates.get(c, 0.0), nearest[c]) for c in CLASSES)


def describe_design(cfg, *, nodes: int, class_rates: dict, calibration: LevelCalibration | None = None,
                    accelerators_per_node: int | None = None, node_bytes: float | None = None,
                    job_bytes: float | None = None, time_scale: float = 1.0,
                    snapshot_gib_s: float = DEFAULT_SNAPSHOT_GIB_S, restart_s: float = 600.0,
                    base_interval_s: float | None = None, measured_recoveries: bool = True) -> LevelDesign:
    """The config's levels at full size on ``nodes`` nodes (the module docstring has the model); with
    ``time_scale`` = run.scale and the run's node bytes, the run as it ran (``simulate --as-run``):
    its step times and the calibrating lag shrink by the scale, as its bytes did. A calibration's
    measured recoveries replace the model's unless ``measured_recoveries`` is false."""
    per_node = accelerators_per_node or (cfg.design.accelerators_per_node if cfg.design else 8)
    cfg = with_design_rates(cfg)
    if node_bytes is None:  # the heaviest node: a checkpoint is complete, a restore over, when its slowest node is
        groups = full_size_groups(cfg, nodes, per_node)
        node_bytes, job_bytes = max(g.node_bytes for g in groups), sum(g.nodes * g.node_bytes for g in groups)
    b = node_bytes
    job_bytes = job_bytes if job_bytes is not None else b * nodes
    cal = calibration or LevelCalibration("")
    r = _calibrated(_rates(cfg, nodes, per_node), cal)
    own, restore = _transfers(cfg, b, r)
    names = cfg.tiers.configured()
    first = names[0]
    base, every = cfg.checkpoint.interval_steps, cfg.tier_every
    lag = {first: cal.first_lag_s * time_scale if cal.first_lag_s is not None else own[first]}
    for i, n in enumerate(names[1:], 1):  # the copies run one after another, nearest first
        lag[n] = lag[first] + sum(own[k] for k in names[1:i] if every[n] % every[k] == 0) + own[n]
    snapshot = b / per_node / (snapshot_gib_s * GIB)
    sync = "async" not in cfg.checkpoint.modes
    if sync:
        stall = {n: (snapshot + lag[n] if n == first else own[n]) for n in names}  # each its own copy
        lag = {n: 0.0 for n in names}
    else:  # a background copy costs training what the run measured per second of such copies
        stall = {n: (snapshot if n == first else 0.0) + cal.interference_share * own[n] for n in names}
    T = base_interval_s if base_interval_s is not None else base * cfg.training.step_seconds * time_scale
    if not T > 0:
        raise UserError("levels: the base interval is 0 (training.step_seconds is 0); give --interval T")
    classes = _classes(cfg, class_rates)
    draft = LevelInputs(T, tuple(Level(n, every[n], stall[n], lag[n], restore[n]) for n in names), classes,
                        restart_s)
    class_restore = _class_restores(draft, r, b, cal)
    measured = {c: s * time_scale for c, s in cal.recovery_s.items() if c in class_restore} \
        if measured_recoveries else {}
    class_restore.update(measured)
    levels = tuple(Level(n, every[n], stall[n], lag[n], _level_restore(draft, i, class_restore))
                   for i, n in enumerate(names))
    sources = {"rates": "measured" if cal.copy_bps else "design", "calibrated_by": cal.source or None,
               "recoveries_measured": sorted(measured), "interference_share": cal.interference_share}
    replicas = cfg.tiers.peer.replicas if cfg.tiers.peer is not None else 0
    return LevelDesign(LevelInputs(T, levels, classes, restart_s), nodes, b, replicas,
                       "sync" if sync else "async", class_restore, sources, job_bytes, own)


def _class_restores(inputs: LevelInputs, r: dict, b: float, cal: LevelCalibration) -> dict:
    """Per class, its level's restore; from global a lost node reads alone."""
    out = {}
    for c, i in zip(inputs.classes, recovery_levels(inputs)):
        lv = inputs.levels[i]
        alone = lv.name == "global" and c.name == "node"
        out[c.name] = b / r["global_read_alone"] if alone else lv.restore_s
    return out


def _calibrated(r: dict, cal: LevelCalibration) -> dict:
    """The design's rates with a run's measured ones in their place (a peer's copy and fetch run
    at its measured NIC rate; a global restore as the run read it, all its nodes at once). A lone
    node's global restore, which the run did not time, keeps the design's ratio to the storm's."""
    r = dict(r, peer=cal.copy_bps.get("peer", r["nic"]))
    for name in ("memory", "local", "global"):
        if name in cal.copy_bps:
            r[f"{name}_write"] = cal.copy_bps[name]
        if name in cal.read_bps:
            alone = r[f"{name}_read_alone"] / r[f"{name}_read"]
            r[f"{name}_read"], r[f"{name}_read_alone"] = cal.read_bps[name], cal.read_bps[name] * alone
    return r


def _level_restore(inputs: LevelInputs, i: int, class_restore: dict) -> float:
    """The rate-weighted mean restore of the classes recovering at level ``i`` (its own without any)."""
    mine = [c for c, k in zip(inputs.classes, recovery_levels(inputs)) if k == i]
    total = sum(c.rate_per_s for c in mine)
    if not mine:
        return inputs.levels[i].restore_s
    if total == 0:
        return class_restore[mine[0].name]
    return sum(c.rate_per_s * class_restore[c.name] for c in mine) / total


def level_inputs(cfg, *, nodes: int, calibration: LevelCalibration | None = None, class_rates: dict,
                 **options) -> LevelInputs:
    """The config's design as levels at full size (:func:`describe_design` has the options)."""
    return describe_design(cfg, nodes=nodes, calibration=calibration, class_rates=class_rates, **options).inputs


# --------------------------------------------------------------------------- the plan

def planner_grid(inputs: LevelInputs) -> Grid:
    """Every level but the nearest (which takes every checkpoint) over :data:`EVERY_CHOICES`."""
    return Grid(every={lv.name: EVERY_CHOICES for lv in inputs.levels[1:]})


def _simulated(inputs: LevelInputs, seed: int, horizon_s: float, failures) -> float:
    return level_model.LevelJob(inputs, seed, horizon_s, failures).run().goodput


def plan(design: LevelDesign, *, horizon_s: float, seed: int = 0, failures: list | None = None) -> dict:
    """Per tier its interval and the bandwidth it needs, goodput by both models, the planner's
    intervals, and per class its recovery and expected work lost per failure."""
    inp, b = design.inputs, design.node_bytes
    T = inp.base_interval_s
    tiers = {}  # per tier also the classes recovering from it (none: it only costs, the planner thins it)
    for lv in inp.levels:
        node_bps = b * (design.replicas if lv.name == "peer" else 1) / (lv.every * T)
        tiers[lv.name] = {"every": lv.every, "interval_s": lv.every * T, "bytes_per_s": node_bps,
                          "job_bytes_per_s": design.job_bytes / (lv.every * T) if lv.name == "global" else None,
                          "stall_s": lv.stall_s, "lag_s": lv.lag_s, "restore_s": lv.restore_s}
    br = breakdown(inp)
    for lv in inp.levels:  # the share of wall time the tier's own copy is in flight
        tiers[lv.name]["overlap"] = design.copy_s.get(lv.name, 0.0) / (lv.every * br.period_s)
    best = optimize(inp, planner_grid(inp))
    names = {c.name: inp.levels[i].name for c, i in zip(inp.classes, recovery_levels(inp))}
    for name, t in tiers.items():
        t["recovers"] = [c for c, lv in names.items() if lv == name]
    classes = [{"class": c.name, "failures_per_day": c.rate_per_s * 86400, "level": names[c.name],
                "recovery_s": inp.restart_s + design.class_restore_s[c.name],
                "lost_work_s": _lost(inp, br.period_s, names[c.name]), "share_of_time": cost.recovery + cost.lost}
               for c, cost in zip(inp.classes, br.classes)]
    return {
        "mode": design.mode, "nodes": design.nodes, "node_bytes": b, "base_interval_s": T,
        "restart_s": inp.restart_s, "tiers": tiers, "classes": classes, "sources": design.sources,
        "goodput": {"analytic": br.goodput, "simulated": _simulated(inp, seed, horizon_s, failures)},
        "recommended": {"every": best.every, "interval_s": {k: v * T for k, v in best.every.items()},
                        "goodput": {"analytic": best.goodput,
                                    "simulated": _simulated(best.inputs, seed, horizon_s, failures)}},
        "horizon_s": horizon_s,
    }


def _lost(inp: LevelInputs, period_s: float, level: str) -> float:
    """Expected work lost per failure recovering at ``level``: half its period plus its lag."""
    lv = next(x for x in inp.levels if x.name == level)
    return lv.every * period_s / 2 + lv.lag_s


# --------------------------------------------------------------------------- sweep

SWEEP_KEYS = tuple(f"{n}_every" for n in ("memory", "peer", "local", "global"))


def parse_every(key: str, text: str) -> int:
    try:
        v = int(text.strip())
    except ValueError:
        v = 0
    if v < 1:
        raise UserError(f"--sweep {key}: {text.strip()!r} is not a whole number >= 1 (a multiple of the base interval)")
    return v


def check_sweep(cfg, spec: dict) -> dict:
    """``{"peer_every": [1, 2]}`` -> ``{"peer": (1, 2)}``, refusing tiers the config lacks and the nearest one."""
    names = cfg.tiers.configured()
    out = {}
    for key, values in spec.items():
        name = key[: -len("_every")]
        if name not in names:
            raise UserError(f"--sweep {key}: the config has no {name} tier")
        if name == names[0]:
            raise UserError(f"--sweep {key}: the {name} tier takes every checkpoint (it is the nearest)")
        out[name] = tuple(values)
    return out


def run_sweep(design: LevelDesign, every: dict, *, horizon_s: float, seed: int = 0, failures=None,
              progress=None) -> dict:
    """The SimPy level model over the grid (same failures in every cell) beside the planner's choice
    over the same grid; whether they agree within one grid step per level. ``progress()`` is called
    after each cell."""
    grid = Grid(every=every)
    sims = []
    for c in grid.cells(design.inputs):
        sims.append((c, _simulated(c, seed, horizon_s, failures)))
        if progress:
            progress()
    best_cell, best_g = max(sims, key=lambda s: s[1])
    choice = optimize(design.inputs, grid)
    best = {lv.name: lv.every for lv in best_cell.levels}
    agree = all(abs(v.index(best[n]) - v.index(choice.every[n])) <= 1 for n, v in every.items())
    return {
        "every": {n: list(v) for n, v in every.items()},
        "cells": [{"every": {lv.name: lv.every for lv in c.levels}, "goodput": g,
                   "goodput_analytic": breakdown(c).goodput} for c, g in sims],
        "best": {"every": best, "goodput": best_g, "goodput_analytic": breakdown(best_cell).goodput},
        "planner": {"every": choice.every, "goodput_analytic": choice.goodput,
                    "goodput_simulated": _simulated(choice.inputs, seed, horizon_s, failures)},
        "agree_within_one_step": agree,
    }
