"""Run phases as a Markov chain over where in the cycle they start, and the deficit they carry.

A failure ends a run phase; the next starts where the checkpoint count stood, so where phases start
is not where a uniform moment of the cycle falls (failures land in long stalls, and the next phase
starts after one). Per row of intervals (numpy), over the settled schedule (emulator/planner/cycle.py
``Steady``), failures Poisson at rate ``lam``, :class:`Phases` gives

- ``starts``: the stationary distribution of a phase's starting position;
- :meth:`Phases.made`: the progress a phase makes until its failure;
- :meth:`Phases.deficit`: how many checkpoints the copy a job restored is ahead of the newest a
  more severe class would spare (a crash restores host memory; until a new copy reaches global
  storage, a node loss falls back to the old one), carried over phases that make no such copy and
  reset where a more severe class strikes, in a phase or during a recovery.

Each is a closed form over a phase's spans, cycle after cycle (geometric beyond ``WRAPS``);
tests/unit/planner/test_phases.py holds them to a Monte Carlo of the same chain.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from emulator.planner.renewal import newest_times

#: whole cycles after a phase's start summed span by span; the rest as a geometric tail
WRAPS = 3


@dataclass(frozen=True)
class Deficit:
    """For one set of levels (what a class spares): ``lost`` per row, the checkpoints a phase ended by
    such a class falls back beyond its own start (the deficit it began with, where it made no copy on
    those levels); ``after[j]``, the mean deficit right after a phase ended by class ``j``, which carries
    one (what a failure that resets it during j's recovery throws away); ``fallbacks[j]``, the chance a
    phase ended by such a class restores from a level both spare, not its own nearest: after a lighter
    j an older copy, after a heavier j (which wiped the nearer levels) its own start from further."""

    lost: np.ndarray
    after: dict
    fallbacks: dict


def carries(spared: frozenset, target: frozenset) -> bool:
    """Whether a class sparing the levels ``spared`` carries a deficit against ``target``: it spares levels
    outside it (its restore may be newer than the newest copy there), and some in it."""
    return not spared <= target and bool(spared & target)


def time_shares(s) -> np.ndarray:
    """Per row, each position's share of the cycle's time (rows x L): where a uniform moment falls."""
    return np.diff(np.concatenate([s.start, s.period[:, None]], axis=1), axis=1) / s.period[:, None]


class Phases:
    """The run phases of one schedule ``s`` (``cycle``: its positions) under failures at rate ``lam`` > 0."""

    def __init__(self, cycle: tuple, s, lam: float):
        self.cycle, self.s, self.lam = cycle, s, lam
        n, self.L = s.start.shape
        P = s.period[:, None]
        starts = np.concatenate([s.start, P], axis=1)
        #: span edges over WRAPS cycles (rows x WRAPS*L + 1): the span of position p in wrap q is
        #: [edges[q L + p], edges[q L + p + 1])
        self.edges = np.concatenate([starts[:, :-1] + q * P for q in range(WRAPS)] + [WRAPS * P], axis=1)
        self.origin = s.stall_end  # a phase after a failure in position phi's span starts at its stall end
        self.tail = np.exp(-lam * s.period) / -np.expm1(-lam * s.period)  # r / (1 - r), r = e^-lam P: every
        # wrap after the last
        #: e^-lam t and e^lam o neither under- nor overflow: G(t) = e^-lam t e^lam o past the start
        self.fast = lam * float(np.max(self.edges)) < 600
        self.G = self.survival(self.edges)
        self._kept: dict = {}
        self._newest: dict = {}
        self.starts = self._stationary() if self.L > 1 else time_shares(s)

    def survival(self, t: np.ndarray) -> np.ndarray:
        """P(a phase from each origin lasts past ``t``): rows x L(origin) x points (``t``: rows x points)."""
        o = self.origin[:, :, None]
        if self.fast:
            return np.where(t[:, None, :] > o, np.exp(-self.lam * t)[:, None, :] * np.exp(self.lam * o), 1.0)
        return np.exp(-self.lam * np.maximum(0.0, t[:, None, :] - o))

    def by_position(self, per_span: np.ndarray) -> np.ndarray:
        """(rows x L x) WRAPS*L span terms -> (rows x L x) L positions, the last wrap continued geometrically."""
        w = per_span.reshape(*per_span.shape[:-1], WRAPS, self.L)
        tail = self.tail.reshape(-1, *([1] * (w.ndim - 2)))
        return w.sum(axis=-2) + w[..., -1, :] * tail

    def _stationary(self) -> np.ndarray:
        """pi = pi T, T[phi, p] the chance a phase from ``phi`` ends in ``p``'s span (where the next starts)."""
        n, L = self.origin.shape
        T = self.by_position(self.G[:, :, :-1] - self.G[:, :, 1:])
        A = np.swapaxes(T, 1, 2) - np.eye(L)
        A[:, -1, :] = 1.0
        b = np.zeros((n, L, 1))
        b[:, -1] = 1.0
        pi = np.clip(np.linalg.solve(A, b)[:, :, 0], 0.0, None)
        return pi / pi.sum(axis=1, keepdims=True)

    def made(self) -> np.ndarray:
        """Per row, the training progress a run phase makes until its failure."""
        s = self.s
        P = s.period[:, None]
        ends = np.concatenate([s.start[:, 1:], P], axis=1)
        rate = s.intervals[:, None] / np.maximum(ends - s.stall_end, 1e-300)
        resumes = np.concatenate([s.stall_end + q * P for q in range(WRAPS)], axis=1)  # training until the next start
        training = np.einsum("rp,rpe->re", self.starts, self.survival(resumes) - self.G[:, :, 1:])
        return self.by_position(training * np.tile(rate, WRAPS) / self.lam).sum(axis=1)

    def newest(self, levels: frozenset, cycles: int = WRAPS + 2) -> np.ndarray:
        """m over ``cycles`` cycles (renewal.newest_times): non-decreasing along k."""
        if (levels, cycles) not in self._newest:
            self._newest[(levels, cycles)] = newest_times(self.cycle, self.s, levels, cycles)
        return self._newest[(levels, cycles)]

    def kept(self, levels: frozenset) -> np.ndarray:
        """E[copies on ``levels`` a phase made by its failure; the failure in a span], the phase's start
        drawn from ``starts``: rows x spans.

        Per start phi and span [a, b): the sum over k > phi of G(max(a, m_k)) - G(max(b, m_k)) = h(a) - h(b),
        with h(t) = cnt(t) G(t) - S(t): cnt(t) the k > phi with m_k <= t, S(t) the sum of their G(m_k).
        Every such m_k is past the phase's start; with c(t) the k with m_k <= t, R(j) the sum of e^-lam m_k
        over k >= j and f = phi + 1: h(t) = e^lam o [(c(t) - f) e^-lam t - R(f) + R(c(t))] where c(t) > f,
        so the sum over starts is one of prefix sums over phi (no term much larger than the result)."""
        if levels in self._kept:
            return self._kept[levels]
        m = self.newest(levels)
        n, L = self.origin.shape
        c = np.stack([np.searchsorted(m[i], self.edges[i], side="right") for i in range(n)])  # rows x edges
        f = np.arange(1, L + 1)  # a phase from phi counts checkpoints phi + 1 on
        if self.fast:
            v = np.exp(-self.lam * self.edges)
            R = np.concatenate([np.cumsum(np.exp(-self.lam * m)[:, ::-1], axis=1)[:, ::-1], np.zeros((n, 1))],
                               axis=1)  # the sum over k >= j: each start's terms are summed from its own
            a = self.starts * np.exp(self.lam * self.origin)
            sums = [np.concatenate([np.zeros((n, 1)), np.cumsum(x, axis=1)], axis=1)
                    for x in (a, a * f, a * R[:, 1:L + 1])]
            j = np.clip(c - 1, 0, L)  # the starts phi with phi + 1 < c
            A, D, B = (np.take_along_axis(x, j, axis=1) for x in sums)
            h = (c * v + np.take_along_axis(R, c, axis=1)) * A - v * D - B
        else:  # each start's own sums, then weighted
            g = np.exp(-self.lam * np.maximum(0.0, m[:, None, :] - self.origin[:, :, None]))
            cum = np.concatenate([np.zeros((n, L, 1)), np.cumsum(g, axis=2)], axis=2)  # the sum over k < j
            ff = f[None, :, None]
            top = np.maximum(c[:, None, :], ff)
            each = (top - ff) * self.G - (np.take_along_axis(cum, top, axis=2)
                                          - np.take_along_axis(cum, np.broadcast_to(ff, top.shape), axis=2))
            h = np.einsum("rp,rpe->re", self.starts, each)
        self._kept[levels] = h[:, :-1] - h[:, 1:]
        return self._kept[levels]

    def deficit(self, target: frozenset, alive: list, shares: list, stays: list) -> Deficit:
        """The chain for the levels ``target`` (module docstring): a class that spares levels outside it,
        and some in it, carries a deficit on: the copies its phase kept beyond those on ``target``, and,
        where the phase made none on ``target``, the deficit it began with. ``alive[j]``: the levels
        class j spares; ``stays[j]``: per row, the chance its deficit outlives its recovery."""
        n, L = self.origin.shape
        chaining = [j for j, a in enumerate(alive) if shares[j] > 0 and carries(a, target)]
        heavier = [j for j, a in enumerate(alive) if shares[j] > 0 and a and a < target]
        if not chaining and not heavier:
            return Deficit(np.zeros(n), {}, {})
        first = self.newest(target)[:, 1:L + 1]  # a phase from phi: its first copy on target
        until = -self.lam * np.maximum(0.0, first - self.origin)
        none = -np.expm1(until)
        unmade = (self.starts * none).sum(axis=1)
        # after a heavier class wiped the nearer levels, a phase that made no copy restores a farther one
        fallbacks = {j: shares[j] * unmade for j in heavier}
        if not chaining:
            return Deficit(np.zeros(n), {}, fallbacks)
        capped = np.maximum(self.G, np.exp(until)[:, :, None])  # G(min(t, first)): no copy on target yet at t
        N = self.by_position(capped[:, :, :-1] - capped[:, :, 1:])
        pi, gains, carry, K = self.starts, np.zeros((n, L)), np.zeros(n), {}
        for j in chaining:
            K[j] = self.by_position(self.kept(alive[j]) - self.kept(alive[j] & target))
            gains += (shares[j] * stays[j])[:, None] * K[j]
            carry += shares[j] * stays[j]
        M = np.eye(L)[None] - carry[:, None, None] * N
        mu = np.linalg.solve(np.swapaxes(M, 1, 2), gains[:, :, None])[:, :, 0]  # mu (I - carry N) = gains
        carried = np.einsum("rp,rpq->rq", mu, N)
        fallbacks.update({j: shares[j] * stays[j] * unmade for j in chaining})
        return Deficit((mu * none).sum(axis=1), {j: (K[j] + carried).sum(axis=1) for j in chaining}, fallbacks)
