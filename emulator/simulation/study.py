"""One simulation study: a config, a design, a failure model, the modes to compare.

Turns the command's inputs into :class:`~.model.RunSpec`s and failure
arrivals, runs a mode, and asks the planner (emulator/planner.py) what it
would recommend for this design's own costs, which :func:`planner_costs`
measures by simulating two failure-free checkpoints far apart.

Intervals are *training time between checkpoints* (the emulator's
``interval_steps x step_seconds``, Daly's tau); the planner's intervals are
start to start, i.e. that plus the stall.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from emulator.planner import reference as planner
from emulator.simulation.arrivals import Arrivals
from emulator.simulation.design import Design
from emulator.simulation.model import RunSpec, simulate
from emulator.simulation.outcome import Outcome
from emulator.simulation.sharing import LinkLimits

DAY = 86400.0


@dataclass
class Study:
    """``designs``: one per mode (a calibration measures each mode's costs apart)."""

    cfg: object
    designs: dict
    modes: list
    days: float
    intervals: dict                 # mode -> training seconds between checkpoints
    interval_sources: dict = field(default_factory=dict)
    accelerators: int = 1
    mttf_hours: float | None = 50_000.0
    trace: list | None = None
    node_loss_fraction: float = 0.78
    restart_s: float = 600.0
    seed: int = 0
    as_run_saves: int | None = None  # as run: checkpoints per mode instead of days

    def arrivals(self) -> Arrivals | None:
        if self.as_run_saves is not None:
            return None
        return Arrivals(accelerators=self.accelerators, mttf_hours=self.mttf_hours, trace=self.trace,
                        node_loss_fraction=self.node_loss_fraction, seed=self.seed)

    def spec(self, mode: str, interval_s: float | None = None) -> RunSpec:
        t = interval_s if interval_s is not None else self.intervals[mode]
        if self.as_run_saves is not None:
            return RunSpec(mode, t, saves=self.as_run_saves, restart_s=self.restart_s)
        return RunSpec(mode, t, horizon_s=self.days * DAY, restart_s=self.restart_s)

    @property
    def design(self) -> Design:
        """The first mode's design: nodes, bytes and tiers are the same for every mode."""
        return self.designs[self.modes[0]]

    def run(self, mode: str, *, interval_s: float | None = None, design: Design | None = None) -> Outcome:
        return simulate(design or self.designs[mode], self.spec(mode, interval_s), self.arrivals())

    @property
    def cluster_mttf_s(self) -> float | None:
        if not self.mttf_hours:
            return None
        return planner.cluster_mttf_seconds(self.mttf_hours, self.accelerators)

    def mean_recovery_s(self, design: Design) -> float:
        """Expected restore time per failure (the planner's restart time leaves it out)."""
        d = design
        if not d.local:
            return d.recovery_global_all_s
        alone = sum(g.nodes * r for g, r in zip(d.groups, d.recovery_global)) / d.nodes
        f = self.node_loss_fraction
        return f * max(alone, d.recovery_local_s) + (1 - f) * d.recovery_local_s


def planner_costs(design: Design, mode: str) -> tuple[float, float]:
    """(stall, drain) of one checkpoint of this design, alone: the planner's S and D.

    D is what follows the stall until the checkpoint is durable on the global
    tier (0 in sync mode, where it is inside the stall).
    """
    o = simulate(design, RunSpec(mode, 1e9, saves=2))
    stall = o.stall_mean_s
    drain = 0.0 if mode == "sync" else max(0.0, o.durability_lag_mean_s - stall)
    return max(stall, 1e-6), drain


def planner_interval(study: Study, mode: str, design: Design | None = None) -> float:
    """The planner's best interval for this mode and design, as training time between checkpoints."""
    d = design or study.designs[mode]
    s, dr = planner_costs(d, mode)
    m = study.cluster_mttf_s
    if m is None:
        raise ValueError("the planner needs an MTTF")
    r = study.restart_s + study.mean_recovery_s(d)
    t = planner.optimal_interval(s, m, r, dr)
    return max(t - s, 1e-3)


def planner_goodput(study: Study, mode: str, interval_s: float, design: Design | None = None) -> float:
    """The planner's goodput formula at this training interval (start to start: interval + stall)."""
    d = design or study.designs[mode]
    s, dr = planner_costs(d, mode)
    r = study.restart_s + study.mean_recovery_s(d)
    return planner.goodput(interval_s + s, s, study.cluster_mttf_s, r, dr)


def with_global(design: Design, gib_s: float | None) -> Design:
    """The design with the global tier's aggregate write bandwidth set to ``gib_s`` GiB/s."""
    if gib_s is None:
        return design
    bps = gib_s * (1 << 30)
    return replace(design, drain=LinkLimits(bps, design.drain.node_bps),
                   global_write=LinkLimits(bps, design.global_write.node_bps))

