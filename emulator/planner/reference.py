"""The reference formulas a plan quotes beside its optimum: failures, the rule of thumb, Young, Daly.

A synchronous job of N accelerators stops when any one fails, so with a per-accelerator MTTF m
the cluster MTTF is M = m / N (50,000 h reproduces Llama 3's 419 interruptions in 54 days on
16,384 GPUs). MLPerf Storage's rule of thumb takes about 20 checkpoints per expected failure and
gives a synchronous checkpoint 5 % of that interval. Young (1974) and Daly (2006) give the best
interval for a checkpoint cost C.

:func:`goodput` and :func:`optimal_interval` are the planner's model (emulator/planner/model.py) for
one level and one failure class, as Daly (2006) wrote it: interval T of training between
checkpoints, stall S, lag D (async: from the end of the stall until durable; sync: 0), interference I
(async: training time lost per checkpoint to steps slowed by the background copy), recovery R,
failures Poisson at rate 1/M::

    P = T + S + I + max(0, D - T - I)       the period (a checkpoint waits for the previous copy)
    G = (T / M) exp(-(P + D + R) / M) / (1 - exp(-P / M))

which is (T / P)(1 - (R + P/2 + D) / M) to first order. Its maximum over T does not depend on R or D
(while T >= D - I): at x = (T + S + I) / M solving x = c + 1 - exp(-x), c = (S + I) / M, whose
small-c answer is Young's sqrt(2 C M) less C and Daly's higher-order formula.
"""
from __future__ import annotations

import math

HOUR = 3600.0
DAY = 86400.0


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
    """One level's expected useful, surviving fraction of wall time (the module docstring): ``restart_s``
    is the recovery R, ``drain_s`` the lag D."""
    if interval_s <= 0 or mttf_s <= 0:
        raise ValueError("goodput: interval and MTTF must be > 0")
    if stall_s < 0 or restart_s < 0 or drain_s < 0 or interference_s < 0:
        raise ValueError("goodput: stall, restart, drain and interference must be >= 0")
    lam = 1 / mttf_s
    period = interval_s + stall_s + interference_s + max(0.0, drain_s - interval_s - interference_s)
    return lam * interval_s * math.exp(-lam * (period + drain_s + restart_s)) / -math.expm1(-lam * period)


def optimal_interval(stall_s: float, mttf_s: float, restart_s: float = 0.0, drain_s: float = 0.0,
                     interference_s: float = 0.0) -> float:
    """The interval that maximises :func:`goodput`: max(D - I, x M - C), C = S + I, x the root of
    x = C/M + 1 - exp(-x) (bisection: g(x) = x - C/M + expm1(-x) rises from -C/M at 0 to exp(-1 - C/M)
    at 1 + C/M). Below D - I the period is pinned at S + D by the wait and G grows with T.
    ``restart_s`` is accepted for symmetry with :func:`goodput`: the recovery scales goodput, not its
    best interval."""
    if stall_s <= 0 or mttf_s <= 0:
        raise ValueError("optimal_interval: stall and MTTF must be > 0")
    cost = stall_s + interference_s
    c = cost / mttf_s
    lo, hi = 0.0, 1.0 + c
    for _ in range(300):
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        if mid - c + math.expm1(-mid) < 0:
            lo = mid
        else:
            hi = mid
    return max(drain_s - interference_s, hi * mttf_s - cost)
