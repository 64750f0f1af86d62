"""One simulation study: a design per mode, the failures, the intervals, run and summed up.

Intervals are *training time between checkpoints* (the emulator's ``interval_steps x
step_seconds``, Daly's tau), as the planner's are.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from emulator.design import resolve
from emulator.simulation.arrivals import Arrivals
from emulator.simulation.model import RunSpec, simulate
from emulator.simulation.outcome import Outcome
from emulator.simulation.planning import Planned, planned

DAY = 86400.0


@dataclass
class Study:
    """``designs``: one per mode (a calibration measures each mode's host costs apart)."""

    cfg: object
    designs: dict
    modes: list
    days: float
    intervals: dict = field(default_factory=dict)  # mode -> training seconds between checkpoints
    interval_sources: dict = field(default_factory=dict)
    trace: list | None = None
    seed: int = 0
    as_run_saves: int | None = None  # as run: checkpoints per mode instead of days
    #: (mode, Overrides) -> that mode's design with more of the flags' figures (a sweep's row), as the
    #: command resolved its own; None: the config resolved with them alone
    redesigner: Callable | None = None

    @property
    def design(self):
        """The first mode's design: the job, the tiers and the failures are the same for every mode."""
        return self.designs[self.modes[0]]

    def arrivals(self) -> Arrivals | None:
        if self.as_run_saves is not None:
            return None
        return Arrivals(self.design.failures, trace=self.trace, seed=self.seed)

    def rates(self) -> dict:
        """Failures per second of each class: the design's, or the trace's."""
        return self.arrivals().rates(self.days * DAY) if self.trace is not None else self.design.failures.rates()

    def spec(self, mode: str, interval_s: float | None = None) -> RunSpec:
        t = interval_s if interval_s is not None else self.intervals[mode]
        if self.as_run_saves is not None:
            return RunSpec(mode, t, saves=self.as_run_saves)
        return RunSpec(mode, t, horizon_s=self.days * DAY)

    def run(self, mode: str, *, interval_s: float | None = None, design=None) -> Outcome:
        return simulate(design or self.designs[mode], self.spec(mode, interval_s), self.arrivals())

    def redesign(self, mode: str, more):
        """This mode's design with more figures restated (``more``: emulator/design/overrides.py's
        ``Overrides``): the config resolved again, as a command's flags are."""
        if self.redesigner is not None:
            return self.redesigner(mode, more)
        return resolve(self.cfg, overrides=more, base_interval_s=self.designs[mode].base_interval_s)

    def planned(self, mode: str, design=None, grid: dict | None = None) -> Planned:
        """The analytic planner's answer for this mode's design (emulator/simulation/planning.py)."""
        return planned(design or self.designs[mode], mode, self.rates(), grid)
