"""The analytic planner: a design's best checkpoint intervals, its goodput and what its tiers need.

- ``model``      the first-order multi-level model (Moody et al., SC10): goodput of a ladder of levels
- ``inputs``     a design (emulator/design) as the model's inputs, per mode and per cell
- ``search``     the best base interval and ``every`` per tier over a grid
- ``planning``   the whole plan: per mode the best cell, per tier its bandwidth, global volume
- ``reference``  failures, the rule of thumb, Young, Daly: the figures a plan quotes beside its optimum

One level is the model's special case; ``plan``, ``simulate --interval planner`` and ``tune`` all
recommend from :func:`plan`.
"""
from emulator.planner.model import Grid
from emulator.planner.planning import (DAY, OVERLAP_TARGET, Plan, design_holdings, plan, reference_figures,
                                       rule_of_thumb_needs)
from emulator.planner.search import default_grid

__all__ = ["DAY", "OVERLAP_TARGET", "Grid", "Plan", "default_grid", "design_holdings", "plan", "reference_figures",
           "rule_of_thumb_needs"]
