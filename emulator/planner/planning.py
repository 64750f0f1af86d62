"""A design's plan: per mode the best base interval and ``every`` per tier, its goodput, what each tier
needs at it, and what it writes to global storage a day.

The optimum and goodput come from the one model (emulator/planner/model.py) searched over a grid
(emulator/planner/search.py); the rule of thumb, Young and Daly are quoted beside it as reference
figures (emulator/planner/reference.py). Per tier at the recommended cell: its own copy's time
(emulator/design/costs.py), the share of its interval that copy takes (its overlap) and the
bandwidth that would keep that share at the overlap target, beside the rate the design moves it at.
Global storage also gets its volume: the job's checkpoint times the checkpoints it takes a day, and
how many of them there are per failure that restores from it. More than four times the rule of
thumb's 20, and more than one every 15 minutes, is flagged (writing a whole checkpoint to global storage every
minute or two buys little goodput and costs storage traffic, wear and, on S3, money: the model prices
none of it), with the best cell that stays under it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from emulator.design import Design, costs
from emulator.design.failures import CLASSES
from emulator.planner import reference as ref
from emulator.planner.inputs import DesignLevels
from emulator.planner.model import Grid
from emulator.planner.search import Cell, Search, default_grid, search

DAY = ref.DAY
OVERLAP_TARGET = 0.10
CHECKPOINTS_PER_FAILURE = 20.0
OVERHEAD_BUDGET = 0.05
#: checkpoints to global storage per failure restoring from it above this many times the rule of
#: thumb's, and more than MIN_FLAGGED_PER_DAY a day, are flagged
ABSURD_FACTOR = 4
MIN_FLAGGED_PER_DAY = 96


@dataclass(frozen=True)
class Reference:
    """The reference figures: the failure model's, the rule of thumb's, Young's and Daly's (for the
    synchronous checkpoint's stall C, where a design gives one)."""

    accelerators: int
    mttf_hours: float
    cluster_mttf_s: float
    failures_per_day: float
    checkpoints_per_failure: float
    overhead_budget: float
    rule_of_thumb_s: float
    checkpoints_per_day: float
    sync_budget_s: float
    sync_stall_s: float | None = None
    young_s: float | None = None
    daly_s: float | None = None


def reference_figures(accelerators: int, mttf_hours: float, *, sync_stall_s: float | None = None,
              checkpoints_per_failure: float = CHECKPOINTS_PER_FAILURE,
              overhead_budget: float = OVERHEAD_BUDGET) -> Reference:
    m = ref.cluster_mttf_seconds(mttf_hours, accelerators)
    rule = ref.rule_of_thumb_interval(m, checkpoints_per_failure)
    young = daly = None
    if sync_stall_s:
        young, daly = ref.young_interval(sync_stall_s, m), ref.daly_interval(sync_stall_s, m)
    return Reference(accelerators, mttf_hours, m, ref.failures_per_day(m), checkpoints_per_failure,
                     overhead_budget, rule, DAY / rule, overhead_budget * rule, sync_stall_s, young, daly)


@dataclass(frozen=True)
class ClassCost:
    """One failure class: how often, from which tier it restores, and what one costs until training resumes."""

    name: str
    per_day: float
    tier: str
    detect_s: float
    restart_s: float
    restore_s: float

    @property
    def recovery_s(self) -> float:
        return self.detect_s + self.restart_s + self.restore_s


@dataclass(frozen=True)
class TierNeed:
    """A tier at the recommended cell: it takes every ``every``-th checkpoint (``interval_s``); its
    own copy of ``bytes`` (a node's, or the job's for global storage: ``scope``) takes ``copy_s``,
    ``rate_bps`` as the design moves it; ``needed_bps`` keeps the copy within the overlap target."""

    name: str
    every: int
    interval_s: float
    scope: str
    bytes: float
    copy_s: float
    rate_bps: float
    needed_bps: float
    family: str

    @property
    def overlap(self) -> float:
        return self.copy_s / self.interval_s

    @property
    def headroom(self) -> float:
        return self.rate_bps / self.needed_bps if self.needed_bps else float("inf")


@dataclass(frozen=True)
class GlobalVolume:
    """What the recommended cell writes to global storage: bytes and checkpoints a day, checkpoints
    per failure that restores from global storage (every failure where none does); ``flagged``
    above :data:`ABSURD_FACTOR` times the rule of thumb."""

    bytes_per_day: float
    checkpoints_per_day: float
    per_failure: float
    flagged: bool
    limit_per_failure: float


@dataclass(frozen=True)
class Plan:
    design: Design
    reference: Reference
    costs: costs.CheckpointCosts
    classes: tuple
    modes: dict
    recommended: str
    tiers: tuple
    volume: GlobalVolume | None
    grid: Grid
    overlap_target: float
    notes: tuple = field(default=())

    @property
    def best(self) -> Cell:
        return self.modes[self.recommended].best

    def to_dict(self) -> dict:
        return plan_dict(self)


def class_costs(design: Design) -> tuple:
    out = []
    for c in CLASSES:
        fc = design.failures.of(c)
        out.append(ClassCost(c, design.failures.rate(c) * DAY, design.recovery_tier(c), fc.detect_s, fc.restart_s,
                             costs.class_restore_seconds(design, c)))
    return tuple(out)


def _global_rate(design: Design) -> float:
    """Failures per second that restore from global storage (every failure where none does)."""
    rate = sum(design.failures.rate(c) for c in CLASSES if design.recovery_tier(c) == "global")
    return rate or design.failures.rate_per_s


def _global_per_failure(design: Design, cell: Cell) -> float:
    every = cell.every.get("global")
    if every is None:
        return 0.0
    return 1.0 / (_global_rate(design) * every * cell.terms.period_s)


def _absurd(design: Design, cell: Cell, limit: float) -> bool:
    every = cell.every.get("global")
    return every is not None and DAY / (every * cell.terms.period_s) > MIN_FLAGGED_PER_DAY and \
        _global_per_failure(design, cell) > limit


def global_volume(design: Design, cell: Cell, checkpoints_per_failure: float) -> GlobalVolume | None:
    every = cell.every.get("global")
    if every is None:
        return None
    per_day = DAY / (every * cell.terms.period_s)
    limit = ABSURD_FACTOR * checkpoints_per_failure
    per_failure = _global_per_failure(design, cell)
    return GlobalVolume(design.job.checkpoint_bytes * per_day, per_day, per_failure, _absurd(design, cell, limit), limit)


def tier_needs(design: Design, cell: Cell, overlap_target: float) -> tuple:
    out = []
    heaviest = design.job.heaviest.node_bytes
    for name in design.tiers:
        every = cell.every[name]
        interval = every * cell.base_interval_s
        copy = costs.copy_seconds(design, name)
        if name == "global":
            scope, moved = "job", design.job.checkpoint_bytes
        else:
            scope, moved = "node", heaviest * (design.replicas if name == "peer" else 1)
        link = design.link(name)
        rate = moved / copy if copy > 0 else float("inf")
        out.append(TierNeed(name, every, interval, scope, moved, copy, rate,
                            moved / (overlap_target * interval), link.family))
    return tuple(out)


def plan(design: Design, *, grid: Grid | None = None, overlap_target: float = OVERLAP_TARGET,
         checkpoints_per_failure: float = CHECKPOINTS_PER_FAILURE,
         overhead_budget: float = OVERHEAD_BUDGET, modes=None) -> Plan:
    """The plan of ``design`` for each of its modes (or ``modes``), over ``grid`` (default: search.default_grid)."""
    grid = grid or default_grid(design)
    limit = ABSURD_FACTOR * checkpoints_per_failure

    def sane(cell: Cell) -> bool:
        return not _absurd(design, cell, limit)
    found = {m: search(DesignLevels(design, m), grid, keep=sane) for m in (modes or design.modes)}
    best_mode = max(found, key=lambda m: found[m].best.goodput)
    c = costs.checkpoint_costs(design)
    fm = design.failures
    figures = reference_figures(fm.accelerators, fm.mttf_hours, sync_stall_s=c.sync_stall_s,
                                  checkpoints_per_failure=checkpoints_per_failure, overhead_budget=overhead_budget)
    best = found[best_mode].best
    notes = design.notes
    if "async" in found and not design.interference_share:
        notes += ("async: background copies are charged no training time (no interference measured), so the "
                  "best async interval is as short as the copies allow: calibrate with a run that has its "
                  "baseline (checkpoint.baseline) to charge it",)
    return Plan(design, figures, c, class_costs(design), found, best_mode,
                tier_needs(design, best, overlap_target), global_volume(design, best, checkpoints_per_failure),
                grid, overlap_target, notes)


# --------------------------------------------------------------------------- JSON

def cell_dict(cell: Cell) -> dict:
    t = cell.terms
    return {"base_interval_s": cell.base_interval_s, "every": cell.every,
            "interval_s": {n: e * cell.base_interval_s for n, e in cell.every.items()},
            "goodput": t.goodput, "stall": t.stall, "wait": t.wait, "period_s": t.period_s,
            "classes": {c.name: {"tier": c.level, "recovery": c.recovery, "lost": c.lost} for c in t.classes}}


def _search_dict(s: Search) -> dict:
    return {"configured": cell_dict(s.configured), "best": cell_dict(s.best), "grid_best": cell_dict(s.grid_best),
            "on_grid_edge": list(s.on_edge), "kept": cell_dict(s.kept) if s.kept is not None else None,
            "curve": [{"base_interval_s": t, "goodput": g, "every": e} for t, g, e in s.curve]}


def plan_dict(p: Plan) -> dict:
    d = p.design
    return {
        "job": {"nodes": d.job.nodes, "accelerators": d.job.accelerators, "checkpoint_bytes": d.job.checkpoint_bytes,
                "heaviest_node_bytes": d.job.heaviest.node_bytes},
        "reference": vars(p.reference),
        "costs": {"snapshot_s": p.costs.snapshot_s, "copy_s": p.costs.copy_s, "lag_s": p.costs.lag_s,
                  "sync_stall_s": p.costs.sync_stall_s, "async_stall_s": p.costs.async_stall_s},
        "classes": {c.name: {"per_day": c.per_day, "tier": c.tier, "detect_s": c.detect_s, "restart_s": c.restart_s,
                             "restore_s": c.restore_s, "recovery_s": c.recovery_s} for c in p.classes},
        "modes": {m: _search_dict(s) for m, s in p.modes.items()},
        "recommended": {"mode": p.recommended, **cell_dict(p.best)},
        "tiers": {t.name: {"every": t.every, "interval_s": t.interval_s, "scope": t.scope, "bytes": t.bytes,
                           "copy_s": t.copy_s, "overlap": t.overlap, "rate_bytes_per_s": t.rate_bps,
                           "needed_bytes_per_s": t.needed_bps, "headroom": t.headroom} for t in p.tiers},
        "global_volume": vars(p.volume) if p.volume is not None else None,
        "overlap_target": p.overlap_target,
        "grid": {"base_interval_s": list(p.grid.base_interval_s), "every": {k: list(v) for k, v in p.grid.every.items()}},
        "sources": dict(d.sources), "notes": list(p.notes),
    }
