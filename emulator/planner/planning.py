"""A design's plan: per mode the best base interval and ``every`` per tier, its goodput, what each tier
needs at it, and what it writes to global storage a day.

The optimum and goodput come from the one model (emulator/planner/model.py) searched over a grid
(emulator/planner/search.py); the rule of thumb, Young and Daly are quoted beside it as reference
figures (emulator/planner/reference.py). Per tier at the recommended cell: its own copy's time
(emulator/design/costs.py), the share of its interval that copy takes (its overlap) and the
bandwidth that would keep that share at the overlap target, beside the rate the design moves it at.
Global storage also gets its volume: the job's checkpoint times the checkpoints it takes a day, and
how many of them there are per failure that restores from it; every tier what it holds and is
written a day (emulator/design/wear.py). The recommended cell is the best that meets the bounds the
model does not price (global volume, request rate, the NVMe's endurance:
emulator/planner/constraints.py); the unconstrained optimum is kept beside it as the comparison.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from emulator.design import Design, costs, wear
from emulator.design.wear import Endurance
from emulator.design.failures import CLASSES
from emulator.design.snapshot import figures as snapshot_figures
from emulator.planner import reference as ref
from emulator.planner.constraints import Constraints, checkpoints_per_day, constraints
from emulator.planner.inputs import DesignLevels
from emulator.planner.model import Grid, evaluate
from emulator.planner.search import Cell, Search, default_grid, search

DAY = ref.DAY
OVERLAP_TARGET = 0.10
CHECKPOINTS_PER_FAILURE = 20.0
OVERHEAD_BUDGET = 0.05


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
    above the bound of emulator/planner/constraints.py."""

    bytes_per_day: float
    checkpoints_per_day: float
    per_failure: float
    flagged: bool
    limit_per_failure: float

    @property
    def sustained_bytes_per_s(self) -> float:
        """The write rate global storage sustains, a day's bytes over the day."""
        return self.bytes_per_day / DAY


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
    #: what each tier holds and is written a day at the recommended cell (emulator/design/wear.py)
    holdings: tuple = ()
    #: the bounds the recommended cell breaks (none where one meets them all), and those the
    #: unconstrained optimum breaks
    broken: tuple = ()
    optimum_broken: tuple = ()

    @property
    def best(self) -> Cell:
        """The recommended cell: the best of the recommended mode that meets the bounds."""
        return self.modes[self.recommended].recommended

    @property
    def optimum(self) -> Cell:
        """The recommended mode's best cell, bounds aside: the comparison."""
        return self.modes[self.recommended].best

    def to_dict(self) -> dict:
        return plan_dict(self)


def class_costs(design: Design, cell: Cell) -> tuple:
    """Each class at ``cell``: the tier it restores from most often (the newest copy a surviving tier
    holds) and its mean restore there (emulator/planner/model.py)."""
    out = []
    at = {c.name: c for c in cell.terms.classes}
    for c in CLASSES:
        fc = design.failures.of(c)
        restore = costs.restore_within(design, c, at[c].recovery_s) if c in at else \
            costs.class_restore_seconds(design, c)
        out.append(ClassCost(c, design.failures.rate(c) * DAY, at[c].level if c in at else design.recovery_tier(c),
                             fc.detect_s, fc.restart_s, max(0.0, restore)))
    return tuple(out)


def global_volume(design: Design, cell: Cell, bounds: Constraints) -> GlobalVolume | None:
    if "global" not in cell.every:
        return None
    per_day = bounds.global_per_day(cell)
    return GlobalVolume(design.job.checkpoint_bytes * per_day, per_day, bounds.per_failure(cell),
                        bounds.volume_over(cell), bounds.per_failure_limit)


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
        rate = moved / copy if copy > 0 else float("inf")
        out.append(TierNeed(name, every, interval, scope, moved, copy, rate,
                            moved / (overlap_target * interval), design.link(name).family))
    return tuple(out)


def _recommended(found: dict) -> str:
    """The mode whose best cell within the bounds is best (its unconstrained best where none is)."""
    return max(found, key=lambda m: (found[m].kept is not None, found[m].recommended.goodput))


def plan(design: Design, *, grid: Grid | None = None, overlap_target: float = OVERLAP_TARGET,
         checkpoints_per_failure: float = CHECKPOINTS_PER_FAILURE,
         overhead_budget: float = OVERHEAD_BUDGET, modes=None, endurance: Endurance = Endurance()) -> Plan:
    """The plan of ``design`` for each of its modes (or ``modes``), over ``grid`` (default: search.default_grid):
    the recommended cell is the best that meets the bounds (emulator/planner/constraints.py)."""
    grid = grid or default_grid(design)
    bounds = constraints(design, checkpoints_per_failure, endurance)
    found = {m: search(DesignLevels(design, m), grid, keep=lambda cell: bounds.meets(design, cell))
             for m in (modes or design.modes)}
    best_mode = _recommended(found)
    c = costs.checkpoint_costs(design)
    fm = design.failures
    figures = reference_figures(fm.accelerators, fm.mttf_hours, sync_stall_s=c.sync_stall_s,
                                  checkpoints_per_failure=checkpoints_per_failure, overhead_budget=overhead_budget)
    best = found[best_mode].recommended
    notes = design.notes
    if "async" in found and not design.interference_share:
        notes += ("async: background copies are charged no training time (no interference measured), so the "
                  "best async interval is as short as the copies allow: calibrate with a run that has its "
                  "baseline (checkpoint.baseline) to charge it",)
    held = wear.holdings(design, checkpoints_per_day(best), best.every, endurance)
    notes += wear.over_capacity_notes(held, wear.answer_family(design)) + wear.endurance_notes(held, endurance)
    needs = tier_needs(design, best, overlap_target)
    return Plan(design, figures, c, class_costs(design, best), found, best_mode, needs,
                global_volume(design, best, bounds), grid, overlap_target, notes, held,
                bounds.broken(design, best), bounds.broken(design, found[best_mode].best))


def design_holdings(design: Design, endurance: Endurance = Endurance()) -> tuple[str, Cell, tuple]:
    """(mode, cell, holdings) at the design's own intervals (its async mode where it has one): what
    ``sizes`` says each tier holds and is written a day, counted as ``plan`` counts them."""
    mode = "async" if "async" in design.modes else design.modes[0]
    cell = evaluate(DesignLevels(design, mode).inputs())
    return mode, cell, wear.holdings(design, checkpoints_per_day(cell), cell.every, endurance)


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


def rule_of_thumb_needs(r: Reference, size: float, overlap_target: float = OVERLAP_TARGET) -> dict:
    """What a checkpoint of ``size`` bytes needs at the rule of thumb's interval: the write rate that
    fits a sync checkpoint in its budget, the rate an async copy needs to take no more than
    ``overlap_target`` of the interval, and what it writes a day (and that as a sustained rate)."""
    per_day = size * r.checkpoints_per_day
    return {"sync_bytes_per_s": size / r.sync_budget_s,
            "async_bytes_per_s": size / (overlap_target * r.rule_of_thumb_s),
            "bytes_per_day": per_day, "sustained_bytes_per_s": per_day / DAY}


def plan_dict(p: Plan) -> dict:
    d = p.design
    return {
        "job": {"nodes": d.job.nodes, "accelerators": d.job.accelerators, "checkpoint_bytes": d.job.checkpoint_bytes,
                "mean_node_bytes": d.job.checkpoint_bytes / d.job.nodes, "heaviest_node_bytes": d.job.heaviest.node_bytes},
        "reference": vars(p.reference),
        "costs": {"snapshot_s": p.costs.snapshot_s, "snapshot": snapshot_figures(d),
                  "copy_s": p.costs.copy_s, "lag_s": p.costs.lag_s,
                  "sync_stall_s": p.costs.sync_stall_s, "async_stall_s": p.costs.async_stall_s},
        "classes": {c.name: {"per_day": c.per_day, "tier": c.tier, "detect_s": c.detect_s, "restart_s": c.restart_s,
                             "restore_s": c.restore_s, "recovery_s": c.recovery_s} for c in p.classes},
        "modes": {m: _search_dict(s) for m, s in p.modes.items()},
        "recommended": {"mode": p.recommended, **cell_dict(p.best), "broken": list(p.broken)},
        "optimum": {"mode": p.recommended, **cell_dict(p.optimum), "broken": list(p.optimum_broken)},
        "capacity": {h.name: h.to_dict() for h in p.holdings},
        "tiers": {t.name: {"every": t.every, "interval_s": t.interval_s, "scope": t.scope, "bytes": t.bytes,
                           "copy_s": t.copy_s, "overlap": t.overlap, "rate_bytes_per_s": t.rate_bps,
                           "needed_bytes_per_s": t.needed_bps, "headroom": t.headroom} for t in p.tiers},
        "global_volume": {**vars(p.volume), "sustained_bytes_per_s": p.volume.sustained_bytes_per_s}
        if p.volume is not None else None,
        "overlap_target": p.overlap_target,
        "grid": {"base_interval_s": list(p.grid.base_interval_s), "every": {k: list(v) for k, v in p.grid.every.items()}},
        "sources": dict(d.sources), "notes": list(p.notes),
    }
