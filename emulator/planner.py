"""Checkpoint interval planner: failure model, optimal intervals, goodput, bandwidth.

Pure math, no I/O, instant. ``ckpt-emu plan`` prints what :func:`plan` returns;
``ckpt-emu tune`` feeds measured costs (``stall_seconds``, ``drain_seconds``,
``async_stall_seconds``) into the same :class:`PlanInputs` and reads the
predicted overhead, overlap and optimum back from the :class:`Plan`.

Failure model (docs/choosing-an-interval.md): a synchronous job of N accelerators stops
when any one fails, so with a per-accelerator MTTF ``m`` the cluster MTTF is
``M = m / N``. 50,000 h per accelerator reproduces Meta's Llama 3 rate
(419 interruptions in 54 days on 16,384 GPUs, ~7.8 a day).

Intervals are wall-clock times from the start of one checkpoint to the start of
the next (what a user sets, and what "one every 9.3 minutes" means). Young's
and Daly's formulas strictly give the compute time between checkpoints; the two
differ by the checkpoint cost C, which is within the first-order accuracy of
the model when C is a few percent of the interval.

Goodput model (fraction of wall time that is useful, surviving training),
for interval T, per-checkpoint stall S, drain D (0 in sync mode, where the
drain is inside the stall), interference I (async: training time lost per
checkpoint to steps slowed by the background drain; 0 in sync mode), cluster
MTTF M and restart time R (the restart plus the restore)::

    W      = max(0, S + D - T)            wait for the previous drain (async)
    P      = T + W                        actual period between checkpoints
    lost   = R + P/2 + D                  per failure: restart, plus the work
                                          since the last *durable* checkpoint
    G      = (T - S - I)/P * max(0, 1 - lost/M)

Sync (D = 0): G = (1 - C/T)(1 - (R + T/2)/M), maximal at T = sqrt(2C(M - R)),
which is Young's interval when R = 0. Async: the stall S is only the staging
copy, but a checkpoint becomes durable D after its stall, so on average
T/2 + D of work is lost; the optimum is max(S + D, sqrt(2(S + I)(M - R - D))).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Optional

from emulator.errors import ConfigError

HOUR = 3600.0
DAY = 86400.0

#: Restart cost after a failure when none is given. Restarting a large job means
#: detecting the failure (often a collective timeout), rescheduling onto spare
#: nodes, re-initialising the communicators and reading the checkpoint back;
#: at tens of thousands of accelerators that is reported in minutes to tens of
#: minutes, so 10 minutes is a round middle figure. It lowers goodput but
#: barely moves the best interval (sqrt(2C(M - R)) instead of sqrt(2CM)).
DEFAULT_RESTART_SECONDS = 600.0

#: Without a measured async stall, assume it is this fraction of the sync cost:
#: the async stall is only the GPU-to-host staging copy, which runs at host
#: memory speed, roughly an order of magnitude faster than a write to storage.
ASYNC_STALL_FRACTION = 0.10

MODES = ("sync", "async")


def _fail(name: str, msg: str):
    exc = ConfigError(f"{name}: {msg}")
    exc.field = name  # lets the CLI say --flag or plan.key instead
    raise exc


def _number(name: str, value, *, positive: bool = True, optional: bool = False,
            at_least: float | None = None, at_most: float | None = None):
    if value is None:
        if optional:
            return None
        _fail(name, "is required")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _fail(name, f"expected a number, got {value!r}")
    if not math.isfinite(value):
        _fail(name, f"must be a finite number, got {value!r}")
    if positive and value <= 0:
        _fail(name, f"must be > 0, got {value!r}")
    if not positive and value < 0:
        _fail(name, f"must be >= 0, got {value!r}")
    if at_least is not None and value < at_least:
        _fail(name, f"must be >= {at_least:g}, got {value!r}")
    if at_most is not None and value > at_most:
        _fail(name, f"must be <= {at_most:g}, got {value!r}")
    return value


#: Sanity bounds on the inputs. They are far outside anything real and keep every
#: derived figure (intervals, goodput, bytes per day) finite and non-zero, so the
#: formulas never meet an overflow, an underflow or a division by zero.
MAX_ACCELERATORS = 10 ** 9
MAX_MTTF_HOURS = 1e9                   # ~114,000 years per accelerator
MIN_CLUSTER_MTTF_S = 1.0               # a job that fails every second cannot be planned
MAX_SECONDS = 1e9                      # ~32 years: stall, drain, restart
MIN_STALL_S = 1e-6                     # a microsecond (tune floors its measurements there too)
MIN_FRACTION = 1e-6                    # overhead budget, overlap target
CHECKPOINTS_PER_FAILURE = (1e-3, 1e6)
MAX_BYTES = 10 ** 18                   # an exabyte per checkpoint
BANDWIDTH = (1.0, 1e18)                # bytes/s


@dataclass
class PlanInputs:
    """What the planner needs; every value is checked here, so a bad plan cannot exist.

    Only ``accelerators`` is required. The checkpoint costs are optional so that
    ``tune`` can pass measurements and ``plan`` can run on a napkin:

    - ``stall_seconds`` (sync cost C): measured > ``checkpoint_bytes / bandwidth``
      > the rule-of-thumb time budget (``overhead_budget`` x interval);
    - ``drain_seconds``: measured > ``checkpoint_bytes / bandwidth`` > C (the same
      bytes to the same global storage as a sync checkpoint);
    - ``async_stall_seconds``: measured > ``ASYNC_STALL_FRACTION`` x C;
    - ``commit_seconds``: the async commit, from the end of the stall until the
      checkpoint is durable (local write + drain + manifest: the durability lag
      less the stall, so the snapshot is counted once): measured > the drain time;
    - ``interference_seconds``: async, training time lost per checkpoint to steps
      slowed by the background work (measured, else 0);
    - ``restore_seconds``: reading the checkpoint back after a failure, on top of
      ``restart_seconds`` (measured by ``tune``, else 0: the default restart
      time already stands for both).

    ``bandwidth`` is the global tier's sustained write bandwidth in bytes/s.
    """

    accelerators: int
    mttf_hours: float = 50_000.0
    checkpoints_per_failure: float = 20.0
    overhead_budget: float = 0.05
    checkpoint_bytes: Optional[int] = None
    restart_seconds: float = DEFAULT_RESTART_SECONDS
    stall_seconds: Optional[float] = None
    drain_seconds: Optional[float] = None
    async_stall_seconds: Optional[float] = None
    commit_seconds: Optional[float] = None
    interference_seconds: Optional[float] = None
    restore_seconds: float = 0.0
    overlap_target: float = 0.10
    bandwidth: Optional[float] = None

    def __post_init__(self):
        a = self.accelerators
        if isinstance(a, bool) or not isinstance(a, int):
            _fail("accelerators", f"expected a whole number, got {a!r}")
        if a < 1:
            _fail("accelerators", f"must be >= 1, got {a}")
        if a > MAX_ACCELERATORS:
            _fail("accelerators", f"must be <= {MAX_ACCELERATORS:,}, got {a:,}")
        _number("mttf_hours", self.mttf_hours, at_most=MAX_MTTF_HOURS)
        _number("checkpoints_per_failure", self.checkpoints_per_failure,
                at_least=CHECKPOINTS_PER_FAILURE[0], at_most=CHECKPOINTS_PER_FAILURE[1])
        _number("overhead_budget", self.overhead_budget, at_least=MIN_FRACTION, at_most=1)
        _number("overlap_target", self.overlap_target, at_least=MIN_FRACTION, at_most=1)
        _number("restart_seconds", self.restart_seconds, positive=False, at_most=MAX_SECONDS)
        _number("stall_seconds", self.stall_seconds, optional=True, at_least=MIN_STALL_S, at_most=MAX_SECONDS)
        _number("drain_seconds", self.drain_seconds, positive=False, optional=True, at_most=MAX_SECONDS)
        _number("async_stall_seconds", self.async_stall_seconds, optional=True,
                at_least=MIN_STALL_S, at_most=MAX_SECONDS)
        _number("commit_seconds", self.commit_seconds, positive=False, optional=True, at_most=MAX_SECONDS)
        _number("interference_seconds", self.interference_seconds, positive=False, optional=True,
                at_most=MAX_SECONDS)
        _number("restore_seconds", self.restore_seconds, positive=False, at_most=MAX_SECONDS)
        _number("bandwidth", self.bandwidth, optional=True, at_least=BANDWIDTH[0], at_most=BANDWIDTH[1])
        mttf = cluster_mttf_seconds(self.mttf_hours, a)
        if mttf < MIN_CLUSTER_MTTF_S:
            _fail("mttf_hours", f"{self.mttf_hours:g} h over {a:,} accelerators is a cluster MTTF of "
                                f"{mttf:.3g} s; it must be at least {MIN_CLUSTER_MTTF_S:g} s")
        b = self.checkpoint_bytes
        if b is not None:
            if isinstance(b, bool) or not isinstance(b, int):
                _fail("checkpoint_bytes", f"expected a whole number of bytes, got {b!r}")
            if b <= 0:
                _fail("checkpoint_bytes", f"must be > 0, got {b}")
            if b > MAX_BYTES:
                _fail("checkpoint_bytes", f"must be <= {MAX_BYTES:.0e} bytes, got {b}")
        if self.bandwidth is not None and b is None:
            _fail("bandwidth", "needs the checkpoint size to turn into a time")


# --------------------------------------------------------------------------- formulas

def cluster_mttf_seconds(mttf_hours: float, accelerators: int) -> float:
    """N independent accelerators fail N times as often as one."""
    return mttf_hours * HOUR / accelerators


def failures_per_day(mttf_s: float) -> float:
    return DAY / mttf_s


def rule_of_thumb_interval(mttf_s: float, checkpoints_per_failure: float) -> float:
    """MLPerf Storage rule: ~20 checkpoints per expected failure (lose <= ~5% of progress)."""
    return mttf_s / checkpoints_per_failure


def young_interval(cost_s: float, mttf_s: float) -> float:
    """Young (1974): T = sqrt(2 C M)."""
    if cost_s <= 0 or mttf_s <= 0:
        raise ValueError("young_interval: cost and MTTF must be > 0")
    return math.sqrt(2 * cost_s * mttf_s)


def daly_interval(cost_s: float, mttf_s: float) -> float:
    """Daly (2006): sqrt(2CM)[1 + sqrt(C/2M)/3 + (C/2M)/9] - C for C < 2M, else M."""
    if cost_s <= 0 or mttf_s <= 0:
        raise ValueError("daly_interval: cost and MTTF must be > 0")
    if cost_s >= 2 * mttf_s:
        return mttf_s
    x = cost_s / (2 * mttf_s)
    return math.sqrt(2 * cost_s * mttf_s) * (1 + math.sqrt(x) / 3 + x / 9) - cost_s


def goodput(interval_s: float, stall_s: float, mttf_s: float,
            restart_s: float = 0.0, drain_s: float = 0.0, interference_s: float = 0.0) -> float:
    """Expected useful fraction of wall time (module docstring has the model).

    Sync: ``drain_s = 0`` (the drain is part of the stall). Async: ``stall_s`` is
    the staging stall and ``drain_s`` the background drain; the next checkpoint
    waits for an unfinished drain, and the work lost on a failure reaches back
    to the last checkpoint that is durable, i.e. P/2 + D on average;
    ``interference_s`` is the training time the drain's steps lose per checkpoint.
    """
    if interval_s <= 0 or mttf_s <= 0:
        raise ValueError("goodput: interval and MTTF must be > 0")
    if stall_s < 0 or restart_s < 0 or drain_s < 0 or interference_s < 0:
        raise ValueError("goodput: stall, restart, drain and interference must be >= 0")
    wait = max(0.0, stall_s + drain_s - interval_s)
    period = interval_s + wait
    working = max(0.0, interval_s - stall_s - interference_s) / period
    lost = restart_s + period / 2 + drain_s
    return working * max(0.0, 1.0 - lost / mttf_s)


def optimal_interval(stall_s: float, mttf_s: float, restart_s: float = 0.0, drain_s: float = 0.0,
                     interference_s: float = 0.0) -> float:
    """Interval that maximises :func:`goodput`: max(S + D, sqrt(2 (S + I) (M - R - D))).

    For T >= S + D, G = (1 - (S + I)/T)(k - T/2M) with k = 1 - (R + D)/M, and
    dG/dT = 0 gives T^2 = 2 (S + I) k M. Below S + D the period is pinned at S + D by
    the drain wait and G grows with T, so the optimum is never below S + D.
    """
    if stall_s <= 0 or mttf_s <= 0:
        raise ValueError("optimal_interval: stall and MTTF must be > 0")
    cost = stall_s + interference_s
    return max(stall_s + drain_s, math.sqrt(2 * cost * max(0.0, mttf_s - restart_s - drain_s)))


# --------------------------------------------------------------------------- plan

@dataclass(frozen=True)
class Costs:
    """The checkpoint costs the plan uses, and where each came from."""

    sync_stall_s: float
    sync_stall_source: str   # measured | bandwidth | budget
    async_stall_s: float
    async_stall_source: str  # measured | assumed
    drain_s: float
    drain_source: str        # measured | bandwidth | sync-cost
    restart_s: float
    commit_s: float = 0.0    # async: stall end to durable (the drain alone when not measured)
    interference_s: float = 0.0  # async: training time lost per checkpoint to slowed steps
    restore_s: float = 0.0   # reading the checkpoint back, after the restart

    @property
    def failure_s(self) -> float:
        """What a failure costs before training resumes: the restart and the restore."""
        return self.restart_s + self.restore_s


def resolve_costs(inp: PlanInputs) -> Costs:
    """Measured values win; otherwise derive them (see :class:`PlanInputs`)."""
    mttf = cluster_mttf_seconds(inp.mttf_hours, inp.accelerators)
    budget = inp.overhead_budget * rule_of_thumb_interval(mttf, inp.checkpoints_per_failure)
    by_bw = inp.checkpoint_bytes / inp.bandwidth if inp.bandwidth else None
    if inp.stall_seconds is not None:
        c, c_src = inp.stall_seconds, "measured"
    elif by_bw is not None:
        c, c_src = by_bw, "bandwidth"
    else:
        c, c_src = budget, "budget"
    if inp.drain_seconds is not None:
        d, d_src = inp.drain_seconds, "measured"
    elif by_bw is not None:
        d, d_src = by_bw, "bandwidth"
    else:
        d, d_src = c, "sync-cost"
    if inp.async_stall_seconds is not None:
        s, s_src = inp.async_stall_seconds, "measured"
    else:
        s, s_src = ASYNC_STALL_FRACTION * c, "assumed"
    commit = inp.commit_seconds if inp.commit_seconds is not None else d
    return Costs(c, c_src, s, s_src, d, d_src, inp.restart_seconds, commit,
                 inp.interference_seconds or 0.0, inp.restore_seconds)


def mode_goodput(inp: PlanInputs, interval_s: float, mode: str, costs: Costs | None = None) -> float:
    """Goodput of ``mode`` ("sync" or "async") at ``interval_s`` for these inputs."""
    costs = costs or resolve_costs(inp)
    mttf = cluster_mttf_seconds(inp.mttf_hours, inp.accelerators)
    if mode == "sync":
        return goodput(interval_s, costs.sync_stall_s, mttf, costs.failure_s)
    if mode == "async":
        return goodput(interval_s, costs.async_stall_s, mttf, costs.failure_s, costs.commit_s, costs.interference_s)
    raise ValueError(f"unknown mode {mode!r} (use sync, async)")


def mode_optimum(inp: PlanInputs, mode: str, costs: Costs | None = None) -> float:
    costs = costs or resolve_costs(inp)
    mttf = cluster_mttf_seconds(inp.mttf_hours, inp.accelerators)
    if mode == "sync":
        return optimal_interval(costs.sync_stall_s, mttf, costs.failure_s)
    if mode == "async":
        return optimal_interval(costs.async_stall_s, mttf, costs.failure_s, costs.commit_s, costs.interference_s)
    raise ValueError(f"unknown mode {mode!r} (use sync, async)")


@dataclass(frozen=True)
class IntervalEstimate:
    """Predictions at one interval: what ``tune`` compares its measurements with."""

    interval_s: float
    sync_goodput: float
    async_goodput: float
    sync_overhead: float  # stall / interval
    async_overhead: float
    drain_overlap: float  # drain / interval (> 1: drains fall behind)


def estimate(inp: PlanInputs, interval_s: float, costs: Costs | None = None) -> IntervalEstimate:
    costs = costs or resolve_costs(inp)
    return IntervalEstimate(
        interval_s=interval_s,
        sync_goodput=mode_goodput(inp, interval_s, "sync", costs),
        async_goodput=mode_goodput(inp, interval_s, "async", costs),
        sync_overhead=costs.sync_stall_s / interval_s,
        async_overhead=costs.async_stall_s / interval_s,
        drain_overlap=costs.drain_s / interval_s,
    )


@dataclass(frozen=True)
class Plan:
    """Everything ``ckpt-emu plan`` reports; seconds and bytes throughout.

    Bandwidth fields are None when no checkpoint size was given. ``intervals``
    maps rule_of_thumb, young, daly, optimal_sync and optimal_async to the
    predictions at that interval.
    """

    inputs: PlanInputs
    costs: Costs
    cluster_mttf_s: float
    failures_per_day: float
    rule_of_thumb_interval_s: float
    checkpoints_per_day: float
    sync_budget_s: float
    young_interval_s: float
    daly_interval_s: float
    intervals: dict = field(default_factory=dict)
    sync_bandwidth_bytes_per_s: Optional[float] = None
    async_drain_bandwidth_bytes_per_s: Optional[float] = None
    bytes_per_day: Optional[float] = None
    average_bytes_per_s: Optional[float] = None

    def to_dict(self) -> dict:
        """JSON-ready: plain dicts, floats and strings."""
        d = asdict(self)
        d["intervals"] = {k: asdict(v) for k, v in self.intervals.items()}
        return d


def plan(inp: PlanInputs) -> Plan:
    """The whole plan for one set of inputs.

    Young and Daly use the sync cost C. Bandwidth is sized at the rule-of-thumb
    interval: sync must write the checkpoint within the time budget; async
    drains must keep drain overlap under ``overlap_target``.
    """
    costs = resolve_costs(inp)
    mttf = cluster_mttf_seconds(inp.mttf_hours, inp.accelerators)
    interval = rule_of_thumb_interval(mttf, inp.checkpoints_per_failure)
    budget = inp.overhead_budget * interval
    young = young_interval(costs.sync_stall_s, mttf)
    daly = daly_interval(costs.sync_stall_s, mttf)
    per_day = DAY / interval
    intervals = {
        "rule_of_thumb": estimate(inp, interval, costs),
        "young": estimate(inp, young, costs),
        "daly": estimate(inp, daly, costs),
        "optimal_sync": estimate(inp, mode_optimum(inp, "sync", costs), costs),
        "optimal_async": estimate(inp, mode_optimum(inp, "async", costs), costs),
    }
    size = inp.checkpoint_bytes
    bw = {}
    if size is not None:
        bw = dict(
            sync_bandwidth_bytes_per_s=size / budget,
            async_drain_bandwidth_bytes_per_s=size / (inp.overlap_target * interval),
            bytes_per_day=size * per_day,
            average_bytes_per_s=size * per_day / DAY,
        )
    return Plan(inp, costs, mttf, failures_per_day(mttf), interval, per_day, budget,
                young, daly, intervals, **bw)


# --------------------------------------------------------------------------- sweep

@dataclass(frozen=True)
class Sweep:
    """Goodput against interval for both modes, and each mode's optimum."""

    intervals_s: list
    sync_goodput: list
    async_goodput: list
    optimum: dict  # mode -> {"interval_s": float, "goodput": float}

    def to_dict(self) -> dict:
        return asdict(self)


def default_intervals(inp: PlanInputs, points: int = 25) -> list:
    """Log-spaced from a tenth of the rule-of-thumb interval to the cluster MTTF,
    widened so both optima sit well inside."""
    if points < 2:
        raise ValueError("default_intervals: need at least 2 points")
    costs = resolve_costs(inp)
    mttf = cluster_mttf_seconds(inp.mttf_hours, inp.accelerators)
    optima = [mode_optimum(inp, m, costs) for m in MODES]
    lo = min(rule_of_thumb_interval(mttf, inp.checkpoints_per_failure) / 10, min(optima) / 3)
    hi = max(mttf, max(optima) * 3)
    ratio = (hi / lo) ** (1 / (points - 1))
    return [lo * ratio ** i for i in range(points)]


def sweep(inp: PlanInputs, intervals=None, points: int = 25) -> Sweep:
    """Goodput at each interval (default: :func:`default_intervals`), sync and async.

    The optimum is the model's exact maximum (:func:`optimal_interval`), not
    just the best grid point, so it does not depend on the grid's spacing.
    """
    costs = resolve_costs(inp)
    ts = list(intervals) if intervals is not None else default_intervals(inp, points)
    if not ts or any(isinstance(t, bool) or not isinstance(t, (int, float)) or not (0 < t < math.inf)
                     for t in ts):
        raise ValueError("sweep: intervals must be positive numbers")
    optimum = {}
    for m in MODES:
        t = mode_optimum(inp, m, costs)
        optimum[m] = {"interval_s": t, "goodput": mode_goodput(inp, t, m, costs)}
    return Sweep(ts, [mode_goodput(inp, t, "sync", costs) for t in ts],
                 [mode_goodput(inp, t, "async", costs) for t in ts], optimum)
