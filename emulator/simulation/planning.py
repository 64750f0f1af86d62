"""What the analytic planner (emulator/planner/) recommends for a design, in ``simulate``'s terms.

``simulate --interval planner``, ``recommend`` and a sweep's planner column ask here: the planner's
recommended cell for one mode, the best within its bounds (its base interval: the training time
between checkpoints, as ``simulate`` takes it), each tier's ``every`` at a given interval, and what
the plan sends to global storage a day, with why its unconstrained optimum was not recommended.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from emulator import planner
from emulator.design.failures import CLASSES
from emulator.planner.inputs import DesignLevels
from emulator.planner.model import Grid
from emulator.planner.search import search
from emulator.units import fmt_duration

DAY = 86400.0


@dataclass(frozen=True)
class Planned:
    """The planner's answer: ``interval_s`` of training between checkpoints, each tier's ``every``,
    its analytic goodput, the bytes a day it sends to global storage, and what to say of them."""

    interval_s: float
    every: dict
    goodput: float
    global_bytes_per_day: float
    global_per_day: float = 0.0
    notes: tuple = field(default_factory=tuple)


def has_levels(cfg) -> bool:
    """Whether the config checkpoints in levels: a memory or peer tier, or a tier interval set."""
    t = cfg.tiers
    return (t.memory is not None or t.peer is not None
            or any(t.entry(n).interval_steps is not None for n in t.configured()))


def with_rates(design, rates: dict | None):
    """``design`` whose failure classes fail at ``rates`` (per second; a trace's), their costs kept."""
    return replace(design, failures=design.failures.at_rates(rates)) if rates else design


def with_every(design, every: dict):
    """``design`` whose tiers take every ``every[tier]``-th checkpoint (tiers not named keep theirs)."""
    return replace(design, ladder=tuple(replace(t, every=every.get(t.name, t.every)) for t in design.ladder))


def planned(design, mode: str, rates: dict | None = None, grid: dict | None = None) -> Planned:
    """The planner's best cell of ``design`` in ``mode`` (over its default grid, or every tier's
    ``every`` over ``grid``): the interval of training between checkpoints it means, its ``every``."""
    design = with_rates(design, rates)
    g = planner.default_grid(design)
    if grid:
        g = Grid(every={**g.every, **grid}, base_interval_s=g.base_interval_s)
    p = planner.plan(design, grid=g, modes=(mode,))
    best = p.best  # the recommendation: the best cell within the planner's bounds
    volume = p.volume
    notes = [f"the planner's unconstrained optimum, every {fmt_duration(p.optimum.base_interval_s)}, is not "
             f"recommended: {'; '.join(p.optimum_broken)}"] if p.optimum is not best else []
    if p.broken:
        notes.append(f"no cell meets the planner's bounds: {'; '.join(p.broken)}")
    return Planned(best.base_interval_s, best.every, best.goodput, volume.bytes_per_day if volume is not None else 0.0,
                   volume.checkpoints_per_day if volume is not None else 0.0, tuple(notes))


def choose_every(design, mode: str, rates: dict, grid: dict | None, interval_s: float) -> tuple[dict, float]:
    """The planner's best ``every`` per tier over ``grid`` at ``interval_s`` of training between
    checkpoints, and its analytic goodput there."""
    design = with_rates(design, rates)
    every_grid = {**planner.default_grid(design).every, **(grid or {})}
    best = search(DesignLevels(design, mode), Grid(every=every_grid,
                                                   base_interval_s=(interval_s,))).best
    return best.every, best.goodput


__all__ = ["CLASSES", "Planned", "choose_every", "has_levels", "planned", "with_every", "with_rates"]
