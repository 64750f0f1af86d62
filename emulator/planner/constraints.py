"""The bounds a recommendation must meet: what the planner would defend, not only what the model prices.

The model (emulator/planner/model.py) prices stall, waits and lost work; it does not price storage
traffic, request ceilings or drive wear. A cell is recommended only when it meets every bound below;
the unconstrained optimum is shown beside it as the comparison.

- global volume: no more than ``ABSURD_FACTOR`` x the rule of thumb's checkpoints per failure that
  restores from global storage, where that is more than one every 15 minutes (a whole checkpoint to
  global storage every minute or two buys little goodput for its traffic, wear and cost);
- request rate: an object store's checkpoint is at least its requests over the store's ceiling
  (emulator/design/requests.py); global storage's interval is no shorter, or its requests pile up;
- endurance: the node-local NVMe lasts its warranty (emulator/design/wear.py: the years to its rating);
- capacity: a tier that cannot hold its keep does not depend on the interval: flagged, never searched.
"""
from __future__ import annotations

from dataclasses import dataclass

from emulator.design import requests
from emulator.design.failures import CLASSES
from emulator.design.wear import WARRANTY_YEARS, Endurance, holding

DAY = 86400.0
#: checkpoints to global storage per failure restoring from it above this many times the rule of
#: thumb's, and more than MIN_FLAGGED_PER_DAY a day, are flagged
ABSURD_FACTOR = 4
MIN_FLAGGED_PER_DAY = 96


def checkpoints_per_day(cell) -> float:
    """Checkpoints a day the cell takes at its base interval: one a period while the job runs (not while
    it recovers). Every tier takes its every-th of them."""
    return DAY * cell.terms.running / cell.terms.period_s


def global_rate(design) -> float:
    """Failures per second that restore from global storage (every failure where none does)."""
    rate = sum(design.failures.rate(c) for c in CLASSES if design.recovery_tier(c) == "global")
    return rate or design.failures.rate_per_s


@dataclass(frozen=True)
class Constraints:
    """The bounds of one design's search."""

    per_failure_limit: float
    global_rate: float
    request_floor_s: float
    endurance: Endurance
    service_years: float = WARRANTY_YEARS

    def global_per_day(self, cell) -> float:
        return checkpoints_per_day(cell) / cell.every["global"] if "global" in cell.every else 0.0

    def per_failure(self, cell) -> float:
        return self.global_per_day(cell) / (self.global_rate * DAY)

    def volume_over(self, cell) -> bool:
        return "global" in cell.every and self.global_per_day(cell) > MIN_FLAGGED_PER_DAY and \
            self.per_failure(cell) > self.per_failure_limit

    def broken(self, design, cell) -> tuple:
        """What ``cell`` breaks, one phrase each (empty: it meets every bound)."""
        out = []
        if self.volume_over(cell):
            out.append(f"global volume: {self.per_failure(cell):,.0f} checkpoints per failure that restores from "
                       f"global storage, over {self.per_failure_limit:g}")
        if "global" in cell.every and self.request_floor_s:
            every = cell.every["global"] * cell.terms.period_s
            if every < self.request_floor_s:
                out.append(f"request rate: a checkpoint to global storage every {every:,.0f} s, its requests take "
                           f"at least {self.request_floor_s:,.0f} s at the store's ceiling")
        if "local" in cell.every:
            h = holding(design, "local", checkpoints_per_day(cell) / cell.every["local"], self.endurance)
            if h.years_to_endurance is not None and h.years_to_endurance < self.service_years:
                out.append(f"endurance: the NVMe reaches its rating ({self.endurance.text()}) in "
                           f"{h.years_to_endurance:,.1f} years, under {self.service_years:g}")
        return tuple(out)

    def meets(self, design, cell) -> bool:
        return not self.broken(design, cell)


def constraints(design, checkpoints_per_failure: float, endurance: Endurance) -> Constraints:
    verify = design.verify if design.tiers[0] != "global" else "none"
    return Constraints(ABSURD_FACTOR * checkpoints_per_failure, global_rate(design),
                       requests.transfer_floor_seconds(design, verify=verify), endurance)
