"""The spans this process spent in paced transfers, per phase: the part of a run's time that is the
design's, not this host's.

Every paced transfer (tiers/emulated.py) and the paced snapshot log the span from their start to
the moment their bytes were due. A phase of a run (a rank's write, a node's drain) then asks how
much of its wall time was covered by such spans: that part is the emulated devices' time, which a
time-dilated run maps back to the design's by dividing by its time factor; the rest is the
software's own (collectives, manifests, Python), counted once (docs/time-dilation.md).
"""
from __future__ import annotations

import threading
import time
from collections import deque

#: spans kept per process: a checkpoint's transfers are a few per file; soak runs must not grow
MAX_SPANS = 20_000

_lock = threading.Lock()
_spans: deque = deque(maxlen=MAX_SPANS)  # (phase, start, end) on the wall clock


def record(phase: str, start: float, end: float) -> None:
    """A paced span of ``phase`` from ``start`` to ``end`` (wall clock, ``time.time``)."""
    if end > start:
        with _lock:
            _spans.append((phase, start, end))


def record_due(phase: str, start_wall: float, due_in: float) -> None:
    """A paced span from ``start_wall`` to when its bytes were due, ``due_in`` seconds from now (a
    bucket's own clock; negative where the host's real I/O overran the paced time: the span ends
    then, and the overrun is the host's)."""
    record(phase, start_wall, time.time() + due_in)


def seconds(phase: str | tuple, t0: float, t1: float) -> float:
    """How much of [t0, t1] spans of ``phase`` (one name, or any of several) covered: their union."""
    return covered(spans(phase, t0, t1), t0, t1)


def spans(phase: str | tuple, t0: float, t1: float) -> list[tuple[float, float]]:
    """The spans of ``phase`` (one name, or any of several) within [t0, t1], merged where they overlap:
    what this process can hand to others sharing its device (few, however many transfers)."""
    phases = (phase,) if isinstance(phase, str) else tuple(phase)
    with _lock:
        mine = sorted((max(s, t0), min(e, t1)) for p, s, e in _spans if p in phases and e > t0 and s < t1)
    merged: list[tuple[float, float]] = []
    for s, e in mine:
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return merged


def covered(spans_: list, t0: float, t1: float) -> float:
    """How much of [t0, t1] the union of ``spans_`` (any order, any processes') covers."""
    total, reach = 0.0, t0
    for s, e in sorted((max(s, t0), min(e, t1)) for s, e in spans_ if e > t0 and s < t1):
        if e > reach:
            total += e - max(s, reach)
            reach = e
    return total


def clear() -> None:
    with _lock:
        _spans.clear()
