"""What one simulation measured (:class:`Totals`, while it runs) and reports (:class:`Outcome`).

The words are the emulator's (README.md, "What the rows mean"): **stall** is wall time the job is
blocked at one checkpoint; **overhead** total stall over wall time; **drain** the copy of every
node's files to global storage from a nearer tier until their checks pass (the job's: the slowest
node's); **drain overlap** the fraction of wall time a drain is in progress on some node; a
**deadline miss** a checkpoint that began before the previous one was complete; a checkpoint is
**complete** once every tier that takes it holds it. Per tier: its copies (the ranks' write to the
nearest tier, or a copy from it), their **lag** (from the end of the snapshot until durable there)
and the share of wall time they were in flight. Per failure class: failures, the work they lost and
the time their recoveries took; async, the training time background copies took from it (a
calibrated **interference** share of their time, part of the checkpoint overhead). On top: **goodput** (surviving training time over wall time) and
**failure overhead** (lost work, restarts and restores over wall time), so that goodput +
checkpoint overhead + failure overhead = 1.
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


class TierTally:
    """One tier's copies: their durations and lags (arrays of doubles keep 10^5 checkpoints small)."""

    __slots__ = ("copies", "lag_sum", "lag_max", "busy", "bytes")

    def __init__(self):
        self.copies = array("d")
        self.lag_sum = self.lag_max = self.busy = 0.0
        self.bytes = 0

    def copied(self, seconds: float, lag_s: float, nbytes: int) -> None:
        self.copies.append(seconds)
        self.busy += seconds
        self.lag_sum += lag_s
        self.lag_max = max(self.lag_max, lag_s)
        self.bytes += nbytes


class Totals:
    """Running sums of one simulation."""

    def __init__(self, tiers, classes):
        self.time: dict = {}
        self.progress = 0.0
        self.stalls = array("d")
        self.writes = array("d")   # the ranks' writes to each checkpoint's first tier
        self.drains = array("d")   # copies to global storage from a nearer tier
        self.drain_busy = 0.0      # wall time with a drain in progress on some node
        self.tiers = {t: TierTally() for t in tiers}
        self.failures = {c: 0 for c in classes}
        self.lost = {c: 0.0 for c in classes}
        self.recovering = {c: 0.0 for c in classes}
        self.restores: dict = {}
        self.missed = 0
        self.started = 0
        self.complete = 0
        self.global_lag_sum = 0.0
        self.global_lag_max = 0.0
        self.inflight_now = 0
        self.inflight_max = 0
        self.train_end = None

    def in_flight(self, delta: int) -> None:
        self.inflight_now += delta
        self.inflight_max = max(self.inflight_max, self.inflight_now)

    def global_durable(self, since_start_s: float) -> None:
        self.global_lag_sum += since_start_s
        self.global_lag_max = max(self.global_lag_max, since_start_s)

    #: the counters :meth:`repeat` adds to as a cycle did
    _CYCLE_SUMS = ("drain_busy", "missed", "started", "complete", "global_lag_sum")

    def mark(self) -> tuple:
        """The running sums as of now, for :meth:`repeat`."""
        return (dict(self.time), self.progress, len(self.stalls), len(self.writes), len(self.drains),
                [getattr(self, k) for k in self._CYCLE_SUMS],
                {n: (len(x.copies), x.busy, x.lag_sum, x.bytes) for n, x in self.tiers.items()})

    def repeat(self, mark: tuple, times: int) -> None:
        """Add ``times`` more of everything since ``mark``: a cycle without failures that repeats
        exactly (maxima and failure counts stay as they are)."""
        time, progress, stalls, writes, drains, sums, tiers = mark
        for k, v in self.time.items():
            self.time[k] = v + times * (v - time.get(k, 0.0))
        self.progress += times * (self.progress - progress)
        for values, since in ((self.stalls, stalls), (self.writes, writes), (self.drains, drains)):
            values.extend(values[since:] * times)
        for key, was in zip(self._CYCLE_SUMS, sums):
            v = getattr(self, key)
            setattr(self, key, v + times * (v - was))
        for name, (copies, busy, lag_sum, nbytes) in tiers.items():
            x = self.tiers[name]
            x.copies.extend(x.copies[copies:] * times)
            x.busy += times * (x.busy - busy)
            x.lag_sum += times * (x.lag_sum - lag_sum)
            x.bytes += times * (x.bytes - nbytes)


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
    #: async: training time lost to background copies (the calibration's interference share of them)
    interference_s: float
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
    #: the ranks' write of their files to the checkpoint's first tier (the slowest node's)
    local_write_mean_s: float
    #: the copy to global storage from a nearer tier (0 where the ranks write straight to it)
    drain_mean_s: float
    drain_overlap: float
    deadline_misses: int
    peak_backlog_bytes: int
    #: from a checkpoint's start (its waits and snapshot included) until durable on global storage
    durability_lag_mean_s: float
    durability_lag_max_s: float
    global_bytes_per_s: float
    peak_global_bytes_per_s: float
    checkpoints_per_day: float
    global_bytes_per_day: float
    local_bytes_per_day: float
    #: per tier: copies, checkpoints_per_day, copy_mean_s, lag_mean_s (end of the snapshot to durable),
    #: lag_max_s, overlap, bytes_per_day
    tiers: dict = field(default_factory=dict)
    #: per failure class: failures, lost_work_s, recovery_s (detection, restart and restore, in all)
    classes: dict = field(default_factory=dict)
    training_wall_s: float | None = None  # as run: start to the end of training (before the final flush)
    overhead_ratio: float | None = None   # as run: stall / training wall, as the emulator reports it

    @classmethod
    def from_totals(cls, t: Totals, design, spec, wall: float, *, peak_global_bps: float) -> "Outcome":
        wall = max(wall, 1e-12)
        time = t.time
        restart, recovery, stall = time.get("restart", 0.0), time.get("recovery", 0.0), time.get("stall", 0.0)
        interference = time.get("interference", 0.0)
        days = wall / DAY
        glob, local = t.tiers.get("global"), t.tiers.get("local")
        lost = sum(t.lost.values())
        training = t.train_end or wall  # as run, a tier's copies over the training time, as results.json
        tiers = {n: {"copies": len(x.copies), "checkpoints_per_day": len(x.copies) / days,
                     "copy_mean_s": _mean(x.copies),
                     "lag_mean_s": x.lag_sum / len(x.copies) if len(x.copies) else 0.0, "lag_max_s": x.lag_max,
                     "overlap": x.busy / training, "bytes_per_day": x.bytes / days} for n, x in t.tiers.items()}
        classes = {c: {"failures": n, "lost_work_s": t.lost[c], "recovery_s": t.recovering[c]}
                   for c, n in t.failures.items()}
        done_global = len(glob.copies) if glob is not None else 0
        return cls(
            mode=spec.mode, interval_s=spec.interval_s, wall_s=wall,
            goodput=t.progress / wall, checkpoint_overhead=(stall + interference) / wall,
            failure_overhead=(lost + restart + recovery) / wall,
            useful_s=t.progress, stall_s=stall, interference_s=interference, lost_work_s=lost, restart_s=restart, recovery_s=recovery,
            failures=dict(t.failures), restores=dict(t.restores),
            checkpoints=t.started, complete=t.complete,
            stall_mean_s=_mean(t.stalls), stall_p99_s=_p99(t.stalls), stall_max_s=max(t.stalls, default=0.0),
            local_write_mean_s=_mean(t.writes), drain_mean_s=_mean(t.drains), drain_overlap=t.drain_busy / wall,
            deadline_misses=t.missed,
            peak_backlog_bytes=t.inflight_max * design.job.checkpoint_bytes,
            durability_lag_mean_s=t.global_lag_sum / done_global if done_global else 0.0,
            durability_lag_max_s=t.global_lag_max,
            global_bytes_per_s=(glob.bytes if glob else 0) / wall, peak_global_bytes_per_s=peak_global_bps,
            checkpoints_per_day=t.complete / days, global_bytes_per_day=(glob.bytes if glob else 0) / days,
            local_bytes_per_day=(local.bytes if local else 0) / days,
            tiers=tiers, classes=classes,
            training_wall_s=t.train_end,
            overhead_ratio=(stall / t.train_end) if t.train_end else None,
        )

    def to_dict(self) -> dict:
        return asdict(self)
