"""What the analytic planner (emulator/planner/) recommends for a design, in ``simulate``'s terms.

``simulate --interval planner``, ``recommend`` and a sweep's planner column ask here: the planner's
best cell for one mode (its base interval, start to start, less the mode's mean stall is the
training time between checkpoints that ``simulate`` takes), each tier's ``every`` at a given
interval, and what the plan sends to global storage a day, flagged where the planner finds it absurd.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from emulator import planner
from emulator.design.failures import CLASSES
from emulator.planner.inputs import DesignLevels
from emulator.planner.model import Grid
from emulator.planner.search import search
from emulator.units import fmt_bytes, fmt_duration

DAY = 86400.0


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


def with_rates(design, rates: dict | None):
    """``design`` whose failure classes fail at ``rates`` (per second; a trace's), their costs kept."""
    return replace(design, failures=design.failures.at_rates(rates)) if rates else design


def _mean_stall(design, mode: str, every: dict | None = None) -> float:
    return sum(lv.stall_s / lv.every for lv in DesignLevels(design, mode).levels(every))


def training_interval(design, mode: str, base_interval_s: float, every: dict | None = None) -> float:
    """The training time between checkpoints that ``simulate`` takes for the planner's base interval
    (start to start): the base interval less the mode's mean stall per checkpoint (async: the
    interference share of the copies too) at ``every``."""
    return max(base_interval_s - _mean_stall(design, mode, every), 1e-3)


def planned(design, mode: str, rates: dict | None = None, grid: dict | None = None) -> Planned:
    """The planner's best cell of ``design`` in ``mode`` (over its default grid, or every tier's
    ``every`` over ``grid``): the interval of training between checkpoints it means, its ``every``."""
    design = with_rates(design, rates)
    g = planner.default_grid(design)
    if grid:
        g = Grid(every={**g.every, **grid}, base_interval_s=g.base_interval_s)
    p = planner.plan(design, grid=g, modes=(mode,))
    best = p.modes[mode].best
    interval = training_interval(design, mode, best.base_interval_s, best.every)
    volume = p.volume
    notes = []
    if volume is not None and volume.flagged:
        notes.append(f"ABSURD VOLUME: a checkpoint to global storage every "
                     f"{fmt_duration(best.every['global'] * best.base_interval_s)} writes "
                     f"{fmt_bytes(volume.bytes_per_day)} a day ({volume.per_failure:,.0f} checkpoints per failure "
                     f"that restores from it, over {volume.limit_per_failure:,.0f}): the planner's model")
    return Planned(interval, best.every, best.goodput, volume.bytes_per_day if volume is not None else 0.0,
                   tuple(notes))


def choose_every(design, mode: str, rates: dict, grid: dict | None, interval_s: float) -> tuple[dict, float]:
    """The planner's best ``every`` per tier over ``grid`` at ``interval_s`` of training between
    checkpoints, and its analytic goodput there."""
    design = with_rates(design, rates)
    every_grid = {**planner.default_grid(design).every, **(grid or {})}
    best = search(DesignLevels(design, mode), Grid(every=every_grid,
                                                   base_interval_s=(interval_s + _mean_stall(design, mode),))).best
    return best.every, best.goodput


__all__ = ["CLASSES", "Planned", "choose_every", "has_levels", "planned", "training_interval", "with_rates"]
