"""A ladder's checkpoints without failures: the steady cycle of starts, stalls, copies and retentions.

Checkpoint n (counted from the job's start) goes to every level whose ``every`` divides n, so the
ladder repeats every lcm(every) checkpoints: one *cycle* of :class:`Checkpoint` positions. Each is
``interval`` seconds of training after the previous one's stall, as the emulator's loop and the
simulator run it (emulator/simulation/model.py), then:

- **sync** (``blocking``): the snapshot, then the pipeline (its copies one after another, its
  global commit) inside the stall, after the previous checkpoint's retention;
- **async**: a wait for the previous checkpoint to be complete (a *deadline miss*), the snapshot
  (the stall), then the pipeline in the background, after the previous retention; training owes the
  copies' interference before the next checkpoint.

These are max-plus recurrences: from any start they settle into a periodic schedule within a few
cycles, whose times this module returns for many intervals at once (numpy arrays, one row per
interval): exact for a failure-free run of the simulator, whose checkpoints in ``complete`` mode
never share a link with each other.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: cycles run before a schedule that has not settled is taken as it is (a few are always enough)
MAX_CYCLES = 64


@dataclass(frozen=True)
class Checkpoint:
    """One position of the cycle. ``levels``: the indices of the levels it goes to, nearest first;
    ``stall_s``: what blocks training before its pipeline (the snapshot); ``durable_s``: per level of
    ``levels``, from the pipeline's start until durable there; ``complete_s``: until durable everywhere
    (the pipeline's end); ``retention_s``: the deletes and listings after it, which the next pipeline
    waits for; ``interference_s``: training time its background copies cost (async)."""

    levels: tuple
    stall_s: float
    durable_s: tuple
    complete_s: float
    retention_s: float = 0.0
    interference_s: float = 0.0


@dataclass
class Steady:
    """The settled schedule, one row per interval, one column per position of the cycle; times from the
    cycle's first start. ``start``: a checkpoint's start (training stops; its progress is what it
    saves); ``stall_end``: training resumes; ``pipe``: its pipeline starts; ``period``: the cycle's
    length; ``stall``, ``wait``, ``interference``: the cycle's time blocked by snapshots and pipelines,
    by waits for a previous checkpoint or retention, and owed to background copies."""

    intervals: np.ndarray
    start: np.ndarray
    stall_end: np.ndarray
    pipe: np.ndarray
    period: np.ndarray
    stall: np.ndarray
    wait: np.ndarray
    interference: np.ndarray


def steady(cycle: tuple, intervals, blocking: bool) -> Steady:
    """The periodic schedule of ``cycle`` at each of ``intervals`` (module docstring): in closed form
    where nothing waits (each pipeline and retention done before the next needs it), else by the
    recurrence until it settles."""
    T = np.asarray(intervals, dtype=float)
    out = _unhindered(cycle, T, blocking)
    slow = ~_unhindered_holds(cycle, out, blocking)
    if slow.any():
        settled = _settled(cycle, T[slow], blocking)
        for name in ("start", "stall_end", "pipe", "period", "stall", "wait", "interference"):
            getattr(out, name)[slow] = getattr(settled, name)
    return out


def _unhindered(cycle: tuple, T: np.ndarray, blocking: bool) -> Steady:
    """The schedule where no checkpoint waits: each starts ``T`` (and the interference owed) after the
    previous one's stall."""
    stall = np.array([ck.stall_s + (ck.complete_s if blocking else 0.0) for ck in cycle])
    owed = np.array([ck.interference_s for ck in cycle])
    step = stall[None, :] + T[:, None] + owed[None, :]
    start = np.concatenate([np.zeros((T.size, 1)), np.cumsum(step, axis=1)[:, :-1]], axis=1)
    snapped = start + np.array([ck.stall_s for ck in cycle])[None, :]
    stall_end = start + stall[None, :]
    n = T.size
    return Steady(T, start, stall_end, snapped.copy(), start[:, -1] + step[:, -1], np.full(n, stall.sum()),
                  np.zeros(n), np.full(n, owed.sum()))


def _unhindered_holds(cycle: tuple, s: Steady, blocking: bool) -> np.ndarray:
    """Per row: whether every pipeline starts at its snapshot's end and (async) every checkpoint finds the
    previous one complete, the last of the cycle's before the next cycle's first included."""
    done = s.pipe + np.array([ck.complete_s for ck in cycle])[None, :]
    kept = done + np.array([ck.retention_s for ck in cycle])[None, :]
    after = np.roll(s.pipe, -1, axis=1)
    after[:, -1] += s.period
    ok = (kept <= after + 1e-9).all(axis=1)
    if not blocking:
        nxt = np.roll(s.start, -1, axis=1)
        nxt[:, -1] += s.period
        ok &= (done <= nxt + 1e-9).all(axis=1)
    return ok


def _settled(cycle: tuple, T: np.ndarray, blocking: bool) -> Steady:
    """The recurrence of the module docstring, run from an empty pipeline until the state a cycle leaves
    (the last pipeline's end and retention's, against the next start) repeats. Where the pipeline falls
    behind a little every cycle (its copies and retentions take a little longer than the training), it
    jumps ahead to the cycle before that backlog first makes a checkpoint wait (:func:`_skipped`)."""
    n, L = T.size, len(cycle)
    t = np.zeros(n)
    complete = np.full(n, -np.inf)
    kept = np.full(n, -np.inf)  # the previous retention's end
    last = drift = None
    for _ in range(MAX_CYCLES):
        rows = [np.empty((n, L)) for _ in range(5)]
        slack = np.full(n, np.inf)  # how far the backlog is from making some checkpoint wait
        start0 = t.copy()
        for p, ck in enumerate(cycle):
            if blocking:
                snapped = t + ck.stall_s
                slack = np.minimum(slack, snapped - kept)
                pipe = np.maximum(snapped, kept)
                wait = pipe - snapped
                complete = pipe + ck.complete_s
                end = complete
            else:
                slack = np.minimum(slack, t - complete)
                begun = np.maximum(t, complete)
                wait = begun - t
                end = begun + ck.stall_s
                slack = np.minimum(slack, end - kept)
                pipe = np.maximum(end, kept)
                complete = pipe + ck.complete_s
            for row, v in zip(rows, (t, end, pipe, wait, end - t - wait)):
                row[:, p] = v
            kept = complete + ck.retention_s
            t = end + T + ck.interference_s
        state = np.stack([complete - t, kept - t])
        if last is not None and np.allclose(np.nan_to_num(state, neginf=0.0), np.nan_to_num(last, neginf=0.0),
                                            rtol=1e-12, atol=1e-9):
            break
        step = state - last if last is not None else None
        if drift is not None and step is not None and np.allclose(step, drift, rtol=1e-9, atol=1e-9, equal_nan=True):
            complete, kept = _skipped(complete, kept, slack, step)
        drift, last = step, state
    period = t - start0
    start, stall_end, pipe, wait, blocked = rows
    base = start[:, :1]
    interference = np.full(n, sum(ck.interference_s for ck in cycle))
    return Steady(T, start - base, stall_end - base, pipe - base, period, blocked.sum(axis=1), wait.sum(axis=1),
                  interference)


def _skipped(complete: np.ndarray, kept: np.ndarray, slack: np.ndarray, step: np.ndarray) -> tuple:
    """A backlog growing by ``step`` (the last pipeline's end and retention's) every cycle, ``slack`` from
    binding: the state all the cycles later until one cycle before it binds (rows with no such backlog
    unchanged)."""
    growth = np.nan_to_num(np.max(step, axis=0), nan=0.0, neginf=0.0)
    growing = (growth > 1e-9) & np.isfinite(slack) & (slack > 0)
    ahead = np.maximum(np.where(growing, np.floor(slack / np.where(growing, growth, 1.0)) - 1, 0), 0)
    return complete + ahead * np.nan_to_num(step[0], neginf=0.0), kept + ahead * np.nan_to_num(step[1], neginf=0.0)
