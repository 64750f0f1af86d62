"""Bandwidth pacing: a token bucket (GCRA) that books each transfer's bytes and says when it
may finish, in-process or shared by several processes through a small state file.

Transfers book their bytes *after* doing the real I/O, anchored at the moment
they started, then sleep until their booked finish time, so real I/O overlaps
the emulated time instead of adding to it, and transfers that share a bucket
queue behind each other (N streams on one bucket get rate/N each). A write
stream books as it writes and sleeps once, after its real commit (tiers/emulated.py).
"""
from __future__ import annotations

import fcntl
import math
import os
import struct
import threading
import time
from pathlib import Path
from typing import Callable

from .safepath import open_own_file

MIB = 1 << 20


def default_burst(rate: float) -> float:
    """1/20 s of bandwidth, at most 8 MiB: enough to absorb the caller's own pauses."""
    return min(rate / 20, 8 * MIB)


class TokenBucket:
    """Paces bytes at ``rate`` B/s; thread-safe, one lock-protected update per request.

    Implemented as virtual finish times (GCRA): ``reserve(n, start)`` books
    n/rate seconds after the later of the previous booking and ``start``, and
    returns that finish time. An idle bucket grants no head start, so a
    transfer from idle takes B/rate, not (B - burst)/rate; ``burst`` only lets
    a busy stream reclaim gaps of up to burst/rate between its requests (the
    time its own I/O took), so pacing does not add to that I/O time.
    ``clock`` and ``sleep`` are injectable so tests run on a fake clock.
    """

    def __init__(self, rate: float, burst: float | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        if not rate > 0:
            raise ValueError(f"rate must be > 0 bytes/s, got {rate!r}")
        self.rate = float(rate)
        self.burst = default_burst(self.rate) if burst is None else float(burst)
        self.clock, self.sleep = clock, sleep
        self._slack = self.burst / self.rate
        self._lock = threading.Lock()
        self._tat = -math.inf  # virtual time at which everything booked so far is done

    def _book(self, tat: float, n: int, start: float) -> float:
        base = tat if tat >= start - self._slack else start
        return base + n / self.rate

    def reserve(self, n: int, start: float | None = None) -> float:
        """Book ``n`` bytes for a transfer that began at ``start``; returns when it may finish."""
        now = self.clock()
        start = now if start is None else min(start, now)
        with self._lock:
            self._tat = self._book(self._tat, n, start)
            return self._tat

    def wait_until(self, deadline: float) -> float:
        """Sleep (once) until ``deadline``; returns the time slept."""
        delay = deadline - self.clock()
        if delay > 0:
            self.sleep(delay)
            return delay
        return 0.0

    def acquire(self, n: int, start: float | None = None) -> float:
        """Book ``n`` bytes and sleep until they are due; returns the time slept."""
        return self.wait_until(self.reserve(n, start))


class FileTokenBucket(TokenBucket):
    """A TokenBucket whose state (one double) lives in a file shared by processes.

    Each booking takes ``flock`` on the file, reads the finish time, writes the
    new one and unlocks: two syscalls' worth of work per request, so several
    processes can pace against one aggregate rate. Uses the wall clock
    (``time.time``), the clock that processes can share.
    """

    _FMT = "<d"

    def __init__(self, rate: float, path: str | Path, burst: float | None = None,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep):
        super().__init__(rate, burst, clock, sleep)
        self.path = Path(path)
        self._fd: int | None = None
        self._pid = -1

    def _file(self) -> int:
        # flock belongs to the open file, which a forked child would share: reopen per process
        if self._fd is None or self._pid != os.getpid():
            self._fd = open_own_file(self.path, os.O_RDWR | os.O_CREAT, what="shared pacing")
            self._pid = os.getpid()
        return self._fd

    def reserve(self, n: int, start: float | None = None) -> float:
        now = self.clock()
        start = now if start is None else min(start, now)
        with self._lock:  # threads of this process share one open file, which flock cannot tell apart
            fd = self._file()
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                raw = os.pread(fd, 8, 0)
                tat = struct.unpack(self._FMT, raw)[0] if len(raw) == 8 else -math.inf
                tat = self._book(tat, n, start)
                os.pwrite(fd, struct.pack(self._FMT, tat), 0)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
            return tat

    def __del__(self):
        if self._fd is not None and self._pid == os.getpid():
            try:
                os.close(self._fd)
            except OSError:
                pass


class BothBuckets:
    """Two buckets a transfer takes its bytes out of at once, such as a node's share of a file
    system and the NIC in front of it, which other traffic (peer copies) also crosses: the
    transfer may finish when both say so. Both must keep time on the same clock."""

    def __init__(self, first: TokenBucket, second: TokenBucket):
        if first.clock is not second.clock:
            raise ValueError("both buckets must use the same clock")
        self.first, self.second = first, second
        self.rate = min(first.rate, second.rate)
        self.clock = first.clock

    def reserve(self, n: int, start: float | None = None) -> float:
        return max(self.first.reserve(n, start), self.second.reserve(n, start))

    def wait_until(self, deadline: float) -> float:
        return self.first.wait_until(deadline)

    def acquire(self, n: int, start: float | None = None) -> float:
        return self.wait_until(self.reserve(n, start))

