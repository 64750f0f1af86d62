"""What one simulation measured (:class:`Totals`, while it runs) and reports (:class:`Outcome`).

The words are the emulator's (README.md, "What the rows mean"): **stall** is
wall time the job is blocked at one checkpoint; **overhead** total stall over
wall time; **drain** a node's copy to the global tier until its size checks
pass (the job's drain: the slowest node's); **drain overlap** the fraction of
wall time during which a drain is in progress on some node; a **deadline
miss** a checkpoint that began before the previous one was complete; a
checkpoint is **complete** once its global manifest is written.
On top: **goodput** (surviving training time over wall time) and **failure
overhead** (lost work, restarts and restores over wall time), so that
goodput + checkpoint overhead + failure overhead = 1.
"""
from __future__ import annotations

import math
from array import array
from dataclasses import asdict, dataclass, field

DAY = 86400.0


def _mean(a) -> float:
    return sum(a) / len(a) if len(a) else 0.0


def _p99(a) -> float:
    if not len(a):
        return 0.0
    vals = sorted(a)
    return vals[max(0, math.ceil(0.99 * len(vals)) - 1)]


class Totals:
    """Running sums of one simulation; arrays of doubles keep 10^5 checkpoints small."""

    def __init__(self, groups: int):
        self.time: dict = {}
        self.progress = 0.0
        self.lost = 0.0
        self.failures: dict = {}
        self.restores: dict = {}
        self.stalls = array("d")
        self.local_writes = array("d")
        self.drains = array("d")
        self.drain_busy = 0.0  # wall time with a drain in progress on some node
        self.missed = 0
        self.started = 0
        self.local_complete = 0
        self.complete = 0
        self.lag_sum = 0.0
        self.lag_max = 0.0
        self.local_bytes = 0
        self.global_bytes = 0
        self.inflight_now = 0
        self.inflight_max = 0
        self.train_end = None

    def in_flight(self, delta: int) -> None:
        self.inflight_now += delta
        self.inflight_max = max(self.inflight_max, self.inflight_now)

    def global_complete(self, lag_s: float, nbytes: int) -> None:
        self.complete += 1
        self.lag_sum += lag_s
        self.lag_max = max(self.lag_max, lag_s)
        self.global_bytes += nbytes
        self.in_flight(-1)

    def drained(self, per_group: list, complete: bool = True) -> None:
        """A drain (per node group) ended; the job drains while any node does, i.e. the longest."""
        self.drain_busy += max(per_group)
        if complete:
            self.drains.append(max(per_group))


@dataclass
class Outcome:
    """One simulated mode; times in seconds, fractions of wall time, bytes."""

    mode: str
    interval_s: float
    wall_s: float
    goodput: float
    checkpoint_overhead: float
    failure_overhead: float
    useful_s: float
    stall_s: float
    lost_work_s: float
    restart_s: float
    recovery_s: float
    failures: dict
    restores: dict
    checkpoints: int
    complete: int
    stall_mean_s: float
    stall_p99_s: float
    stall_max_s: float
    local_write_mean_s: float
    drain_mean_s: float
    drain_overlap: float
    deadline_misses: int
    peak_backlog_bytes: int
    durability_lag_mean_s: float
    durability_lag_max_s: float
    global_bytes_per_s: float
    peak_global_bytes_per_s: float
    checkpoints_per_day: float
    global_pb_per_day: float
    local_pb_per_day: float
    training_wall_s: float | None = None  # as run: start to the end of training (before the final flush)
    overhead_ratio: float | None = None   # as run: stall / training wall, as the emulator reports it
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_totals(cls, t: Totals, design, spec, wall: float, *, peak_global_bps: float) -> "Outcome":
        wall = max(wall, 1e-12)
        time = t.time
        restart, recovery, stall = time.get("restart", 0.0), time.get("recovery", 0.0), time.get("stall", 0.0)
        days = wall / DAY
        train_wall = t.train_end if t.train_end is not None else None
        return cls(
            mode=spec.mode, interval_s=spec.interval_s, wall_s=wall,
            goodput=t.progress / wall, checkpoint_overhead=stall / wall,
            failure_overhead=(t.lost + restart + recovery) / wall,
            useful_s=t.progress, stall_s=stall, lost_work_s=t.lost, restart_s=restart, recovery_s=recovery,
            failures=dict(t.failures), restores=dict(t.restores),
            checkpoints=t.started, complete=t.complete,
            stall_mean_s=_mean(t.stalls), stall_p99_s=_p99(t.stalls), stall_max_s=max(t.stalls, default=0.0),
            local_write_mean_s=_mean(t.local_writes), drain_mean_s=_mean(t.drains),
            drain_overlap=t.drain_busy / wall,
            deadline_misses=t.missed,
            peak_backlog_bytes=t.inflight_max * design.checkpoint_bytes,
            durability_lag_mean_s=t.lag_sum / t.complete if t.complete else 0.0,
            durability_lag_max_s=t.lag_max,
            global_bytes_per_s=t.global_bytes / wall, peak_global_bytes_per_s=peak_global_bps,
            checkpoints_per_day=t.complete / days, global_pb_per_day=t.global_bytes / days / 1e15,
            local_pb_per_day=t.local_bytes / days / 1e15,
            training_wall_s=train_wall,
            overhead_ratio=(t.time.get("stall", 0.0) / train_wall) if train_wall else None,
        )

    def to_dict(self) -> dict:
        return asdict(self)
