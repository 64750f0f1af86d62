"""What the analytic planner recommends for a design: the one place ``simulate`` asks it.

Until the planner package (emulator/planner/) lands, this feeds today's planner the design's closed
forms (emulator/design/costs.py): the base interval by Daly's optimum (emulator/planner.py) on the
mean stall, the mean recovery and the background lag, each tier's ``every`` by the multi-level
model's search (emulator/multilevel.py). ``simulate --interval planner``, a sweep's planner column
and ``plan CONFIG`` call :func:`planned` and :func:`level_plan` only: switching planners changes
this module alone. It also says what the plan writes to global storage a day, and flags a large
volume, absurd where a tenth of it would cost almost no goodput (:func:`volume_notes`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from emulator import multilevel, planner
from emulator.design.costs import (checkpoint_costs, class_restore_seconds, copy_seconds, first_tier, lag_seconds,
                                   recovery_seconds)
from emulator.units import fmt_bytes, fmt_duration

DAY = 86400.0
#: the planner's candidates for a tier's ``every`` (multiples of the base interval)
EVERY_CHOICES = (1, 2, 4, 8, 16, 32, 64)
#: more than a petabyte a day to global storage is flagged, with what a tenth of it would cost in goodput
LARGE_GLOBAL_BYTES_PER_DAY = 1e15
#: ... and called absurd where that tenth costs less than this many points of goodput: the interval
#: answers goodput alone, buying almost nothing with the volume (issue 32's 70B case: every 80.6 s,
#: 1.05 PB a day to S3, where every 806 s costs 0.2 points)
ABSURD_GOODPUT_POINTS = 1.0


@dataclass(frozen=True)
class Planned:
    """The planner's answer: ``interval_s`` of training between checkpoints, each tier's ``every``,
    its analytic goodput, the bytes a day it sends to global storage, and what to say of them."""

    interval_s: float
    every: dict
    goodput: float
    global_bytes_per_day: float
    notes: tuple = field(default_factory=tuple)


def has_levels(cfg) -> bool:
    """Whether the config checkpoints in levels: a memory or peer tier, or a tier interval set."""
    t = cfg.tiers
    return (t.memory is not None or t.peer is not None
            or any(t.entry(n).interval_steps is not None for n in t.configured()))


def level_inputs(design, mode: str, rates: dict | None = None) -> multilevel.LevelInputs:
    """The design's ladder as the multi-level model's inputs: per tier its stall, its lag (async) and
    the rate-weighted recovery of the classes restoring from it (detection and restart included, as
    they differ by class), every figure a closed form of emulator/design/costs.py."""
    names, rates = design.tiers, rates or design.failures.rates()
    snap, first = checkpoint_costs(design).snapshot_s, first_tier(design.tiers)
    own = {n: copy_seconds(design, n) for n in names}
    lag = {n: lag_seconds(design, n) for n in names}
    if mode == "sync":  # each tier stalls for its own part of the write path (global: and its commit)
        commit = design.fixed_post_s + design.link("global").latency_s if "global" in names else 0.0
        stall = {n: snap + lag[n] if n == first else own[n] + (commit if n == "global" else 0.0) for n in names}
        lag = {n: 0.0 for n in names}
    else:  # a background copy costs training what a run measured per second of such copies
        share = design.interference_share
        stall = {n: (snap if n == first else 0.0) + share * own[n] for n in names}
    recovering = {}
    for c in design.failures.classes:
        recovering.setdefault(design.recovery_tier(c.name), []).append(c.name)
    levels = []
    for t in design.ladder:
        mine = recovering.get(t.name, [])
        total = sum(rates[c] for c in mine)
        restore = (sum(rates[c] * recovery_seconds(design, c) for c in mine) / total if total
                   else recovery_seconds(design, mine[0]) if mine else 0.0)
        levels.append(multilevel.Level(t.name, t.every, stall[t.name], lag[t.name], restore))
    classes = tuple(multilevel.FailureClass(c.name, rates[c.name], design.recovery_tier(c.name))
                    for c in design.failures.classes)
    return multilevel.LevelInputs(design.base_interval_s, tuple(levels), classes, 0.0)


def planned(design, mode: str, rates: dict | None = None, grid: dict | None = None) -> Planned:
    """Today's planner on the design: the base interval (Daly's optimum on the mean stall, the mean
    recovery and the background lag), then each tier's ``every`` over ``grid`` (tier -> candidates;
    default every tier but the nearest over :data:`EVERY_CHOICES`)."""
    rates = rates or design.failures.rates()
    inp = level_inputs(design, mode, rates)
    total = sum(rates.values())
    mean_stall = _mean_stall(inp)
    if total > 0:
        recovery = sum(rates[c] * recovery_seconds(design, c) for c in rates) / total
        lag = max((lv.lag_s for lv in inp.levels if lv.every == 1), default=0.0)
        period = planner.optimal_interval(max(mean_stall, 1e-6), 1 / total, recovery, lag)
    else:
        period = design.base_interval_s + mean_stall
    interval = max(period - mean_stall, 1e-3)
    every, goodput = choose_every(design, mode, rates, grid, interval)
    return Planned(interval, every, goodput, _global_per_day(design, period, every),
                   tuple(volume_notes(design, mode, rates, every, period, goodput)))


def _mean_stall(inp) -> float:
    return sum(lv.stall_s / lv.every for lv in inp.levels)


def choose_every(design, mode: str, rates: dict, grid: dict | None, interval_s: float) -> tuple[dict, float]:
    """The multi-level model's best ``every`` per tier over ``grid`` at ``interval_s`` of training
    between checkpoints, and its analytic goodput there."""
    inp = level_inputs(design, mode, rates)
    inp = replace(inp, base_interval_s=interval_s + _mean_stall(inp))
    if grid is None:
        grid = {lv.name: EVERY_CHOICES for lv in inp.levels[1:]}
    best = multilevel.optimize(inp, multilevel.Grid(every=grid))
    return best.every, best.goodput


def _global_per_day(design, period_s: float, every: dict) -> float:
    if "global" not in design.tiers:
        return 0.0
    return design.job.checkpoint_bytes * DAY / (period_s * every.get("global", 1))


def volume_notes(design, mode: str, rates: dict, every: dict, period_s: float, goodput: float) -> list:
    """What the plan sends to global storage a day, flagged past :data:`LARGE_GLOBAL_BYTES_PER_DAY`,
    with what a tenth of that volume would cost in goodput (global storage every 10x as many
    checkpoints, the nearer tiers taking the rest; with no nearer tier, a 10x longer interval):
    an ABSURD VOLUME where that costs under :data:`ABSURD_GOODPUT_POINTS` of goodput."""
    per_day = _global_per_day(design, period_s, every)
    if per_day <= LARGE_GLOBAL_BYTES_PER_DAY:
        return []
    inp = replace(level_inputs(design, mode, rates), base_interval_s=period_s)
    if len(inp.levels) > 1:
        tenth = {**every, "global": every["global"] * 10}
        alt = replace(inp, levels=tuple(replace(lv, every=tenth[lv.name]) for lv in inp.levels))
        how = f"global storage every {tenth['global']} checkpoints (the nearer tiers taking the rest)"
    else:
        alt = replace(inp, base_interval_s=period_s * 10)
        how = f"a checkpoint every {fmt_duration(period_s * 10)}"
    cost = goodput - multilevel.goodput(alt)
    kind = "ABSURD VOLUME" if cost < ABSURD_GOODPUT_POINTS / 100 else "LARGE VOLUME"
    every_s = period_s * every.get("global", 1)
    return [f"{kind}: a checkpoint to global storage every {fmt_duration(every_s)} writes {per_day / 1e15:,.2f} PB "
            f"a day ({fmt_bytes(design.job.checkpoint_bytes)} each); {how} would write a tenth of it for "
            f"{cost * 100:.2f} points of goodput (the planner's model)"]


# --------------------------------------------------------------------------- `plan CONFIG`

def level_plan(design, mode: str, *, rates: dict, simulated, horizon_s: float) -> dict:
    """``plan CONFIG``'s plan of a design's levels: per tier its interval, bandwidth, stall, lag and
    restore; per class its recovery and the work it loses; goodput at the config's intervals and at
    the planner's, by the analytic model and by ``simulated(design) -> goodput``."""
    inp = level_inputs(design, mode, rates)
    T = inp.base_interval_s
    br = multilevel.breakdown(inp)
    b = design.job.heaviest.node_bytes
    tiers = {}
    for lv in inp.levels:
        per_node = b * (design.replicas if lv.name == "peer" else 1) / (lv.every * T)
        tiers[lv.name] = {"every": lv.every, "interval_s": lv.every * T, "bytes_per_s": per_node,
                          "job_bytes_per_s": design.job.checkpoint_bytes / (lv.every * T) if lv.name == "global"
                          else None, "stall_s": lv.stall_s, "lag_s": lv.lag_s, "restore_s": lv.restore_s,
                          "overlap": copy_seconds(design, lv.name) / (lv.every * br.period_s),
                          "recovers": [c.name for c in design.failures.classes
                                       if design.recovery_tier(c.name) == lv.name]}
    best = multilevel.optimize(inp, multilevel.Grid(every={lv.name: EVERY_CHOICES for lv in inp.levels[1:]}))
    classes = [{"class": c.name, "failures_per_day": rates[c.name] * DAY, "level": cost.level,
                "recovery_s": recovery_seconds(design, c.name),
                "restore_s": class_restore_seconds(design, c.name),
                "lost_work_s": _lost(inp, br.period_s, cost.level), "share_of_time": cost.recovery + cost.lost}
               for c, cost in zip(design.failures.classes, br.classes)]
    ladder = tuple(replace(t, every=best.every[t.name]) for t in design.ladder)
    return {
        "mode": mode, "nodes": design.job.nodes, "node_bytes": b, "base_interval_s": T, "restart_s": 0.0,
        "tiers": tiers, "classes": classes,
        "sources": {"rates": "measured" if any(v == "measured" for v in design.sources.values()) else "design",
                    "recoveries_measured": sorted(design.measured_recovery_s),
                    "interference_share": design.interference_share},
        "goodput": {"analytic": br.goodput, "simulated": simulated(design)},
        "recommended": {"every": best.every, "interval_s": {k: v * T for k, v in best.every.items()},
                        "goodput": {"analytic": best.goodput, "simulated": simulated(replace(design, ladder=ladder))}},
        "horizon_s": horizon_s,
    }


def _lost(inp, period_s: float, level: str) -> float:
    """Expected work lost per failure recovering at ``level``: half its period plus its lag."""
    lv = next(x for x in inp.levels if x.name == level)
    return lv.every * period_s / 2 + lv.lag_s
