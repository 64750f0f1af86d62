"""A ladder's settled schedule under Poisson failures: what a run phase keeps, what its recoveries take.

For one failure class, the copies that survive it are the checkpoints durable on its surviving
levels; ``m_k``, the earliest time any checkpoint from the k-th on is durable there, says which copy
is the newest at any moment (emulator/planner/model.py has the formulas these terms enter). Per row
of intervals (numpy), over the settled schedule of emulator/planner/cycle.py:

- :func:`class_terms`: the progress a run phase keeps when a failure of the class ends it, and its
  recoveries' mix (which copy, read where, at what cost: a nearer tier holds a copy for the other
  nodes until its retention deletes it);
- :func:`behind_on_average`: how far the newest copy one set of levels holds is behind another's
  (emulator/planner/phases.py carries that deficit from run phase to run phase).
"""
from __future__ import annotations

import bisect

import numpy as np

from emulator.planner.cycle import Steady


def newest_times(cycle: tuple, s: Steady, alive: set, cycles: int = 3) -> np.ndarray:
    """m: per row, over ``cycles`` cycles of checkpoints, the earliest time any checkpoint from the k-th on
    is durable on a level of ``alive`` (inf where none is)."""
    after = np.array([min((d for lv, d in zip(ck.levels, ck.durable_s) if lv in alive), default=np.inf)
                      for ck in cycle])  # each position's earliest durable time there, after its pipeline's start
    tau = s.pipe + after[None, :]
    P = s.period[:, None]
    t = np.concatenate([tau + q * P for q in range(cycles)], axis=1)
    return np.minimum.accumulate(t[:, ::-1], axis=1)[:, ::-1]


def _kept(m: np.ndarray, origin: np.ndarray, lam: float) -> np.ndarray:
    """Per row and run phase starting at ``origin[:, phi]``: sum over the next cycle's k of
    exp(-lam (m_k - origin_phi)), from reverse cumulative sums (each term against the cycle's first
    origin; a term against its own is at most exp(lam P): capped where no checkpoint gets through)."""
    L = origin.shape[1]
    a0 = origin[:, :1]
    x = np.exp(-lam * (m[:, 1:2 * L + 1] - a0))
    after = np.concatenate([np.cumsum(x[:, ::-1], axis=1)[:, ::-1], np.zeros((x.shape[0], 1))], axis=1)
    phi = np.arange(L)
    return np.exp(np.minimum(lam * (origin - a0), 700.0)) * (after[:, phi] - after[:, phi + L])


def deletions(cycle: tuple, s: Steady) -> dict:
    """{level: (positions over three cycles that go to it, their durable times: rows x positions)}."""
    L = len(cycle)
    cols: dict = {}
    for q in range(3):
        for p, ck in enumerate(cycle):
            for level, durable in zip(ck.levels, ck.durable_s):
                cols.setdefault(level, []).append((q * L + p, p, q, durable))
    out = {}
    for level, rows in cols.items():
        js, ps, qs, ds = (np.array(v) for v in zip(*rows))
        out[level] = (list(js), s.pipe[:, ps] + s.period[:, None] * qs[None, :] + ds[None, :])
    return out


def _held_until(deletions: dict, level: int, keep: int, k: int, rows: int) -> np.ndarray:
    """When checkpoint ``k`` (of the three cycles) leaves ``level``: ``keep`` newer copies durable there."""
    js, ts = deletions[level]
    i = bisect.bisect_right(js, k) + keep - 1
    return ts[:, i] if i < len(js) else np.full(rows, np.inf)


def class_terms(cycle: tuple, s: Steady, restores: tuple, m: np.ndarray, lam: float, gone_at: dict,
                starts: np.ndarray) -> list:
    """[E[W] (the progress a run phase keeps, from where it started), the mean recovery's
    (1 - e^-lam R) / lam, its e^-lam R, {level: share of restores from it}, the mean recovery's
    seconds, m] of one class per row; ``restores`` per position as emulator/planner/model.py's
    ``restores_of`` gives them, ``m`` the :func:`newest_times` of the levels that survive it, ``gone_at``
    the schedule's :func:`deletions`, ``starts`` where run phases start (emulator/planner/phases.py)."""
    n, L = s.start.shape
    kept = _kept(m, s.stall_end, lam) / -np.expm1(-lam * s.period)[:, None]
    progress = s.intervals * (starts * kept).sum(axis=1)
    g, q, mean_s, mix = (np.zeros(n) for _ in range(4))
    levels = {}
    with np.errstate(invalid="ignore"):  # no copy ever survives the class: inf - inf
        spans = _restore_spans(restores, m, L)
        if spans is not None:
            at, hi, gone = spans  # the positions whose copy is at times the newest surviving one, and when
            period = s.period[:, None]
            by_level: dict = {}  # level -> the positions of ``at`` restored from it, in order of first use
            for i, p in enumerate(at):
                by_level.setdefault(restores[p][0], []).append(i)
            for j in range(max(len(restores[p][1]) for p in at)):  # each position's pieces, nearest first
                has = np.array([len(restores[p][1]) > j for p in at])
                seconds = np.array([restores[p][1][j][2] if len(restores[p][1]) > j else 0.0 for p in at])
                end = _piece_ends(restores, at, j, hi, gone_at, L)
                share = np.where(has & np.isfinite(gone), np.maximum(0.0, end - gone), 0.0) / period
                gone = np.where(has, np.maximum(gone, end), gone)
                g += (share * (-np.expm1(-lam * seconds) / lam)).sum(axis=1)
                q += (share * np.exp(-lam * seconds)).sum(axis=1)
                mean_s += (share * seconds).sum(axis=1)
                mix += share.sum(axis=1)
                for level, mine in by_level.items():
                    levels[level] = levels.get(level, 0.0) + share[:, mine].sum(axis=1)
    total = np.where(mix > 0, mix, 1.0)
    return [progress, g / total, np.where(mix > 0, q / total, 1.0), levels, mean_s / total, m]


def _restore_spans(restores: tuple, m: np.ndarray, L: int) -> tuple | None:
    """(the positions whose copy is restored from a level and is ever the newest surviving one, the end
    of each one's span (rows x positions), its start), or None where no position's is."""
    at = [p for p, (level, _) in enumerate(restores) if level is not None]
    if not at:
        return None
    cols = np.array(at) + L
    lo = m[:, cols]  # while position p's copy is the newest surviving one: from m[L + p] to m[L + p + 1]
    alive = np.isfinite(lo).any(axis=0)
    if not alive.any():
        return None
    return [p for p, a in zip(at, alive) if a], m[:, cols[alive] + 1], lo[:, alive]


def _piece_ends(restores: tuple, at: list, j: int, hi: np.ndarray, gone_at: dict, L: int) -> np.ndarray:
    """Per row and position of ``at``, when its ``j``-th piece ends: the end of its span, or sooner where
    the piece's nearer level deletes the copy first (:func:`_held_until`)."""
    end = hi.copy()
    for i, p in enumerate(at):
        pieces = restores[p][1]
        if len(pieces) > j and pieces[j][0] is not None:
            nearer, keep, _ = pieces[j]
            end[:, i] = np.minimum(hi[:, i], _held_until(gone_at, nearer, keep, L + p, hi.shape[0]))
    return end


def _area(m: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per row, the integral from 0 to each ``y`` (rows x points) of the count of m_k <= x: sum_k (y - m_k)+,
    that is c y - (m_1 + ... + m_c) with c the count of m_k <= y (``m`` rises along k; every row is
    searched at once, each shifted past the one before)."""
    n, K = m.shape
    finite = np.isfinite(m)
    top = float(np.max(np.where(finite, m, 0.0)).max(initial=0.0)) + float(np.max(y)) + 1.0
    shift = np.arange(n)[:, None] * 2 * top
    flat = (np.where(finite, m, top) + shift).ravel()
    c = np.searchsorted(flat, (y + shift).ravel(), side="right").reshape(y.shape) - np.arange(n)[:, None] * K
    prefix = np.concatenate([np.zeros((n, 1)), np.cumsum(np.where(finite, m, 0.0), axis=1)], axis=1)
    return c * y - np.take_along_axis(prefix, c, axis=1)


class Areas:
    """:func:`_area` of each set of levels' newest times (``times``: a set -> its m) at the cycle's
    ``edges`` (the middle cycle's checkpoint starts) or ``span`` (its start and end), once per set:
    the classes and each pair of them share their sets."""

    def __init__(self, s: Steady, times):
        P = s.period[:, None]
        self.times, self._cache = times, {}
        self.points = {"edges": np.concatenate([s.start, P], axis=1) + P, "span": np.concatenate([P, 2 * P], axis=1)}

    def __call__(self, levels: frozenset, which: str) -> np.ndarray:
        if (levels, which) not in self._cache:
            self._cache[(levels, which)] = _area(self.times(levels), self.points[which])
        return self._cache[(levels, which)]


def behind_on_average(s: Steady, areas: Areas, newer: frozenset, older: frozenset) -> np.ndarray:
    """Per row, the checkpoints between the newest copy the levels ``newer`` hold and the newest the
    levels ``older`` hold, at a uniform time of the cycle: what falling back from one to the other loses."""
    return np.diff(areas(newer, "span") - areas(older, "span"), axis=1)[:, 0] / s.period

