"""Plan against simulate on one design: the helpers the agreement tests share.

The simulated goodput of a span with N failures varies with N (Poisson) far more than with anything
else; the planner is evaluated at the failure rates the simulation drew (its classes' counts over
its wall time), so the two differ by what the model leaves out, not by the draw.
"""
from __future__ import annotations

import math
from dataclasses import replace

from emulator.planner.inputs import DesignLevels
from emulator.planner.model import evaluate
from emulator.simulation.arrivals import Arrivals
from emulator.simulation.model import RunSpec, simulate
from emulator.simulation.planning import with_every, with_rates

DAY = 86400.0


def simulated(design, mode: str, interval_s: float, *, days: float, seed: int = 1):
    """The simulator on ``design`` for ``days`` of Poisson failures drawn with ``seed``."""
    return simulate(design, RunSpec(mode, interval_s, horizon_s=days * DAY), Arrivals(design.failures, seed=seed))


def planned(design, mode: str, interval_s: float, every: dict | None = None, rates: dict | None = None):
    """The planner's cell (``interval_s``, ``every``) of ``design`` failing at ``rates`` (per second)."""
    if rates is not None and not any(rates.values()):  # none drawn: none planned
        d = replace(design, failures=replace(design.failures, mttf_hours=math.inf))
    else:
        d = with_rates(design, rates)
    return evaluate(DesignLevels(d, mode).inputs(interval_s, every)).terms


def drawn_rates(outcome) -> dict:
    """The failures per second of each class the simulation drew."""
    return {c: n / outcome.wall_s for c, n in outcome.failures.items()}


def plan_and_simulate(design, mode: str, interval_s: float, every: dict | None = None, *, days: float,
                      seed: int = 1):
    """(the planner's breakdown at the simulation's drawn rates, the simulation's outcome) of one cell."""
    d = with_every(design, every) if every else design
    out = simulated(d, mode, interval_s, days=days, seed=seed)
    return planned(d, mode, interval_s, rates=drawn_rates(out)), out
