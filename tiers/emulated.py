"""Make any tier behave like a slower or farther one: bandwidth, latency, jitter, capacity.

Users evaluate storage they do not own ("what if global storage gave each
node 0.5 GiB/s at 20 ms?"), so the wrapper must be accurate (a transfer of B
bytes at R B/s takes B/R, within a few percent, even for short transfers) and
cheap (it computes each wait and sleeps once; it never spins).

How bandwidth is paced: see ``tiers/pacing.py`` (a transfer books its bytes
after its real I/O, so the I/O overlaps the emulated time). Capacity:
``tiers/capacity.py``.

The rule for a write (put, put_file, a sink up to its commit): it takes
max(real time of write + commit, bytes/rate + latency). The emulated device's
time and the real backend's (a DirTier's fsync, an upload) overlap; neither is
added to the other. A sink therefore books its bytes as it writes but waits
once, after the real commit, until its bytes are due plus the commit's latency.

Who shares a bucket (``shared_by``; a config's default is ``node``: a rate is the
node's device or link, as an architect reads it):

* ``none``: every call or stream gets the full rate on its own bucket.
* ``rank``: one bucket per EmulatedTier, i.e. per rank process.
* ``node``/``job``: one bucket for all processes of the node / of the job. A run
  never builds ``job`` here: emulator/job/rank_tiers.py turns a job's aggregate
  into each node's share first (emulator/design/links.py).
  Ranks are separate OS processes, so the bucket is a small state file in
  ``scope.shared_dir`` updated under ``fcntl.flock`` (all processes must
  see that directory and share a wall clock: one machine, as in our tests).
  Without ``shared_dir`` each process falls back to its own bucket at
  rate / ranks_per_node (node) or rate / (ranks_per_node * nodes) (job),
  exact only while every rank transfers at the same time.

Latency: each request (call, stream open, sink commit) pays ``latency`` plus
a uniform random extra in ``[0, jitter]`` from an RNG seeded with the rank;
for transfers it comes after their bytes are due, overlapping the real I/O.
Waits: every transfer's wait beyond its real I/O is added up per phase (what the
caller named with ``counted_as``, e.g. "drain") and direction, so a report can
say which phases waited on which device (``device_waits``).
Capacity: writes that would exceed it fail with ``OSError(ENOSPC)`` before
anything becomes visible. Usage starts from the inner tier's contents and is
shared through ``shared_dir`` by every process writing to the same storage
(else it is this process's own view).
"""
from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import math
import os
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Optional

from . import paced
from .base import OptionError, Sink, Tier, TierScope, TierWrapper, WrappedSink, validate_key
from .capacity import Capacity
from .fileops import as_bytes
from .pacing import BothBuckets, FileTokenBucket, TokenBucket
from .runsync import run_sync
from .s3_limits import AWS_GET_PER_S, AWS_PUT_PER_S, RequestLimits, limit_requests

GIB = 1 << 30
MIB = 1 << 20
SHARED_BY = ("none", "rank", "node", "job")
#: what the transfers started in this context are for; threads and tasks started in it inherit it
_PHASE = contextvars.ContextVar("emulated_wait_phase", default="other")
#: when the phase began for every process of the node at once (a barrier's end, wall clock): a write
#: stream opened in it books its first bytes from there, as if its process had not started late
_ANCHOR = contextvars.ContextVar("emulated_anchor", default=None)


@contextlib.contextmanager
def counted_as(phase: str):
    """Count the emulated waits of the transfers made inside the block as ``phase``."""
    token = _PHASE.set(phase)
    try:
        yield
    finally:
        _PHASE.reset(token)


def current_phase() -> str:
    """The phase the transfers started here count as (:func:`counted_as`; "other" outside one)."""
    return _PHASE.get()


@contextlib.contextmanager
def anchored_at(wall_time: float):
    """Transfers inside the block book their bytes as if they had run back to back from ``wall_time``
    on (the moment every rank of the node left the barrier), not from when this process got round to
    each piece: on a host with fewer cores than ranks, a rank scheduled late, or a stream that paused
    for the CPU, is the host's delay, not the device's (the device stays busy with the phase's bytes)."""
    token = _ANCHOR.set(wall_time)
    try:
        yield
    finally:
        _ANCHOR.reset(token)


def _anchored_start(now: float) -> float:
    """When a transfer starting ``now`` (on a bucket's clock) books from: the phase's anchor, if any."""
    anchor = _ANCHOR.get()
    return now if anchor is None else now - max(0.0, time.time() - anchor)


def is_paced(tier) -> bool:
    """Whether an EmulatedTier paces ``tier`` (behind any wrappers)."""
    return emulated_behind(tier) is not None


def emulated_behind(tier) -> "EmulatedTier | None":
    """The first EmulatedTier behind ``tier``'s wrappers (None: nothing paces it)."""
    while tier is not None and not isinstance(tier, EmulatedTier):
        tier = getattr(tier, "inner", None)
    return tier


def settle_requests(tier, phase: str | None = None) -> float:
    """Wait until the object store's requests that ``tier``'s transfers of ``phase`` (default: the
    current one) stood for are done, where a run of a design paces them (tiers/s3_limits.py
    ``settle``); the seconds waited."""
    limiter = getattr(emulated_behind(tier), "limiter", None)
    return limiter.settle(phase or current_phase()) if limiter is not None else 0.0


def device_waits(tier) -> dict | None:
    """The first EmulatedTier behind ``tier``'s wrappers: {"shared": reads and writes share one
    device, "waits": {phase: {direction: seconds}}}; None if nothing emulates a device."""
    tier = emulated_behind(tier)
    if tier is None:
        return None
    with tier._waits_lock:
        waits = {phase: dict(by_dir) for phase, by_dir in tier._waits.items()}
    return {"shared": tier.shares_device, "waits": waits}


@dataclass(frozen=True)
class EmulateOptions:
    """Make a tier behave like a slower or farther one (GiB = 2**30 bytes)."""

    write_gib_s: Optional[float] = None
    read_gib_s: Optional[float] = None
    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    #: who shares the bandwidth: "node" (the node's device or link, its ranks share it), "job" (the
    #: modelled job's aggregate: each node gets its share), "rank", or "none" (each stream gets it)
    shared_by: str = "node"
    #: emulated capacity; writes past it fail with ENOSPC
    capacity_gib: Optional[float] = None
    #: reads and writes on separate paths (true), or one device that both share (false, as
    #: ``design.node.local.duplex``): a drain reading the device then slows the next checkpoint's
    #: write on it, and the other way round
    duplex: bool = False
    #: the node's NIC these writes leave through (a design's ``node.nic``), shared with the node's
    #: other sends through it (the peer tier's copies): writes take their bytes out of both
    nic_gib_s: Optional[float] = None
    #: an object store's requests per second per key prefix, 503 SlowDown beyond (s3 backend only;
    #: null: no limit) and what a prefix is (null: the key up to its last '/'): tiers/s3_limits.py
    put_per_s_per_prefix: Optional[float] = AWS_PUT_PER_S
    get_per_s_per_prefix: Optional[float] = AWS_GET_PER_S
    prefix_depth: Optional[int] = None

    def __post_init__(self):
        RequestLimits.from_options(self)
        for name in ("write_gib_s", "read_gib_s", "capacity_gib", "nic_gib_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise OptionError(f"{name}: must be > 0")
        if self.latency_ms < 0 or self.jitter_ms < 0:
            raise OptionError(f"{'latency_ms' if self.latency_ms < 0 else 'jitter_ms'}: must be >= 0")
        if self.shared_by not in SHARED_BY:
            raise OptionError("shared_by: must be none, rank, node or job")


class _Pacer:
    """Bandwidth for one direction: where its buckets come from, and how a transfer waits.

    ``weight`` converts this direction's bytes into the bucket's: a read on a device that
    shares one bucket with writes (not duplex) books n x write_rate / read_rate, so it takes
    n / read_rate of the device's time and that time is not the writes'.
    """

    def __init__(self, tier: "EmulatedTier", direction: str, bucket: Callable[[], TokenBucket] | None,
                 weight: float = 1.0):
        self.tier, self.direction, self.bucket, self.weight = tier, direction, bucket, weight

    def finish_sync(self, bucket: TokenBucket | None, n: int, start: float, start_wall: float) -> None:
        if bucket is not None and n:
            due = bucket.reserve(n * self.weight, start)
            due_in = due - bucket.clock()
            # many small reads, each later than the device would have streamed them: still its time
            self.record(bucket, n, start_wall, due_in)
            self.tier._count(self.direction, bucket.wait_until(due))

    def record(self, bucket: TokenBucket | None, n: int, start_wall: float, due_in: float) -> None:
        """Log the paced span of ``n`` bytes begun at ``start_wall`` and due ``due_in`` seconds from now:
        at least the device's time for them, even where this host began or ended them later than
        the device, streaming from the phase's anchor, would have: that is the device's time too."""
        busy = n * self.weight / bucket.rate if bucket is not None and n else 0.0
        paced.record_due(_PHASE.get(), min(start_wall, time.time() + due_in - busy), due_in)

    def bytes_due(self, bucket: TokenBucket | None, n: int, start: float) -> float:
        """Book ``n`` bytes moved from ``start`` on; when the emulated device has them (no wait)."""
        return bucket.reserve(n * self.weight, start) if bucket is not None and n else start


#: a write stream books its bytes on its bucket in pieces of at least this much (and at its commit):
#: a shared bucket costs a lock and two syscalls per booking, and torch.save writes in small pieces
BOOK_PIECE = 256 << 10


class _ThrottledSink(WrappedSink):
    """Books its writes' bytes (in pieces of BOOK_PIECE) and claims capacity before each write; waits
    once, after the real commit.

    Waiting at the commit, not write by write, lets the backend's real commit (a
    DirTier's fsync) overlap the emulated transfer: the stream takes
    max(real write + commit, bytes/rate + latency), as put and put_file do.
    """

    def __init__(self, tier: "EmulatedTier", key: str, inner: Sink):
        super().__init__(tier, key, inner)
        self._bucket = tier._writes.bucket() if tier._writes.bucket else None
        self._reserved = 0
        self._due = -math.inf  # when the emulated device has every byte booked so far
        self._phase, self._anchor = _PHASE.get(), _ANCHOR.get()
        self._opened = time.time() if self._anchor is None else min(time.time(), self._anchor)
        self._pending, self._pending_start = 0, None  # written, not yet booked, and since when

    def write(self, data) -> int:
        n = memoryview(data).nbytes
        start = self._claim(n)
        written = self._inner.write(data)
        self._book(n, start)
        return written

    def copy_with_crc(self, data, crc: int) -> tuple[int, int]:
        """The inner sink's copy with its CRC32C (a mapped memory tier: ``tiers.directory``), claimed
        and booked as a write of the bytes it takes; (0, crc), taking none, where it has none."""
        copy, room = getattr(self._inner, "copy_with_crc", None), getattr(self._inner, "copy_room", None)
        view = as_bytes(data)
        n = room(len(view)) if copy is not None and room is not None else 0
        if not n:
            return 0, crc
        start = self._claim(n)
        taken, crc = copy(view[:n], crc)
        self._book(taken, start)
        return taken, crc

    def _claim(self, n: int) -> float:
        """Claim capacity for ``n`` more bytes (ENOSPC: abort, nothing lingers); the bucket's now."""
        capacity = self._tier._capacity
        if capacity is not None:
            try:
                capacity.reserve(n, f"write to {self._key}")
            except OSError:
                self.abort()  # nothing half-written may linger, whatever the caller does next
                raise
            self._reserved += n
        now = self._tier._now(self._bucket)
        if self._anchor is not None:  # the phase's bytes, back to back from its anchor
            return now - max(0.0, time.time() - self._anchor)
        return now

    def _book(self, n: int, start: float, *, now: bool = False) -> None:
        """Add ``n`` bytes written from ``start`` on; book what is pending once it is a piece (or ``now``)."""
        if self._pending_start is None:
            self._pending_start = start
        self._pending += n
        if self._pending and (now or self._pending >= BOOK_PIECE):
            self._due = max(self._due, self._tier._writes.bytes_due(self._bucket, self._pending, self._pending_start))
            self._pending, self._pending_start = 0, None

    def commit(self) -> None:
        if self._done:
            return
        capacity = self._tier._capacity
        replaced = run_sync(self._tier.inner.size(self._key)) if capacity is not None else None
        self._book(0, self._tier._now(self._bucket), now=True)
        issued = self._tier._now(self._bucket)
        try:
            self._inner.commit()
        except BaseException:
            self.abort()  # frees what it claimed
            raise
        self._done = True
        answered = self._tier._answered(max(self._due, issued), f"commit {self._key}")
        # the device's time ends with its bytes (and the commit's latency): a commit this host issued
        # later than that is the host's time, not the device's
        device_done = answered - max(0.0, issued - self._due)
        paced.record_due(self._phase, self._opened, device_done - self._tier._now(self._bucket))
        self._tier._count("write", self._tier._wait_sync(self._bucket, answered))
        if capacity is not None:
            capacity.free(replaced)

    def abort(self) -> None:
        if self._done:
            return
        super().abort()
        if self._tier._capacity is not None:
            self._tier._capacity.free(self._reserved)


class _ThrottledReader:
    """Paces ``read``/``readinto`` of the inner reader; everything else passes through."""

    def __init__(self, inner: BinaryIO, pacer: _Pacer):
        self._inner, self._pacer = inner, pacer
        self._bucket = pacer.bucket() if pacer.bucket else None

    def _clock(self) -> float:
        return self._bucket.clock() if self._bucket else 0.0

    def read(self, size: int = -1) -> bytes:
        start, wall = _anchored_start(self._clock()), time.time()
        data = self._inner.read(size)
        self._pacer.finish_sync(self._bucket, len(data), start, wall)
        return data

    def readinto(self, buf) -> int:
        start, wall = _anchored_start(self._clock()), time.time()
        n = self._inner.readinto(buf) or 0
        self._pacer.finish_sync(self._bucket, n, start, wall)
        return n

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self._inner.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __getattr__(self, name):
        return getattr(self._inner, name)


class EmulatedTier(TierWrapper):
    """Wraps ``inner`` and paces it; rates in bytes/s, times in seconds."""

    request_limits = ""  # the inner S3 tier's emulated request limits, in words (from_config)
    limiter = None  # and the limiter that applies them (tiers/s3_limits.py)

    def __init__(self, inner: Tier, write_bps: float | None = None, read_bps: float | None = None,
                 latency_s: float = 0.0, jitter_s: float = 0.0, shared_by: str = "none",
                 capacity_bytes: int | None = None, scope: TierScope | None = None, seed: int | None = None,
                 clock: Callable[[], float] | None = None, sleep: Callable[[float], None] | None = None,
                 async_sleep: Callable | None = None, duplex: bool = True, nic_bps: float | None = None):
        if shared_by not in SHARED_BY:
            raise ValueError(f"shared_by must be none, rank, node or job, got {shared_by!r}")
        super().__init__(inner, sleep=sleep or time.sleep, async_sleep=async_sleep)
        self.write_bps, self.read_bps = write_bps, read_bps
        self.latency_s, self.jitter_s = latency_s, jitter_s
        self.shared_by = shared_by
        self.scope = scope or TierScope()
        self._clock = clock
        self._rng = random.Random(self.scope.rank if seed is None else seed)
        self._rng_lock = threading.Lock()
        self._capacity = None
        if capacity_bytes is not None:
            where = hashlib.sha1(inner.describe().encode()).hexdigest()[:16]
            shared_dir = self.scope.shared_dir
            path = Path(shared_dir) / f"capacity-{where}" if shared_dir else None
            self._capacity = Capacity(int(capacity_bytes), inner, path)
        self.duplex, self.nic_bps = duplex, nic_bps
        self._waits, self._waits_lock = {}, threading.Lock()  # {phase: {direction: seconds}}
        device, w = self._bucket_source(write_bps, "write"), self.scope.bytes_weight
        self._writes = _Pacer(self, "write", self._through_nic(device, nic_bps), weight=w)
        if not self.shares_device:
            self._reads = _Pacer(self, "read", self._bucket_source(read_bps, "read"), weight=w)
        else:  # one device: reads take their time out of the writes' device bucket
            self._reads = _Pacer(self, "read", device, weight=w * write_bps / read_bps)

    def rate(self, direction: str) -> float | None:
        """The bytes/s one transfer of this process's bytes in ``direction`` ("write", "read") is held
        to with its bucket to itself (a write: the slower of the device and the NIC; a read on a shared
        device: its own rate; over the scope's ``bytes_weight``); None where that direction is not paced."""
        pacer = self._writes if direction == "write" else self._reads
        if pacer.bucket is None:
            return None
        return pacer.bucket().rate / pacer.weight

    @property
    def shares_device(self) -> bool:
        """Reads and writes take their time out of one device (not duplex, both rates set)."""
        return not self.duplex and bool(self.write_bps and self.read_bps)

    @classmethod
    def from_config(cls, inner: Tier, emulate_cfg: EmulateOptions, scope: TierScope | None = None) -> "EmulatedTier":
        """Build from ``EmulateOptions`` (a config's ``emulate:`` section; GiB = 2**30 bytes, ms)."""
        c = emulate_cfg
        gib = lambda v: None if v is None else v * GIB  # noqa: E731
        limiter = limit_requests(inner, RequestLimits.from_options(c), scope, phase=current_phase,
                                 on_wait=paced.record)
        tier = cls(inner, write_bps=gib(c.write_gib_s), read_bps=gib(c.read_gib_s),
                   latency_s=c.latency_ms / 1000, jitter_s=c.jitter_ms / 1000, shared_by=c.shared_by,
                   capacity_bytes=None if c.capacity_gib is None else int(c.capacity_gib * GIB),
                   scope=scope, duplex=c.duplex, nic_bps=gib(c.nic_gib_s))
        tier.request_limits = limiter.limits.describe() if limiter is not None else ""
        tier.limiter = limiter
        return tier

    # ------------------------------------------------------------------ pacing plumbing

    def _bucket_source(self, rate: float | None, direction: str) -> Callable[[], TokenBucket] | None:
        """A callable giving the bucket a call or stream must use (see the module docstring)."""
        if rate is None:
            return None
        kw = {"clock": self._clock} if self._clock else {}
        kw["sleep"] = self._sleep
        if self.shared_by == "none":
            return lambda: TokenBucket(rate, **kw)
        if self.shared_by == "rank":
            bucket = TokenBucket(rate, **kw)
            return lambda: bucket
        shared_dir = self.scope.shared_dir
        if shared_dir:
            name = f"node{self.scope.node}" if self.shared_by == "node" else "job"
            bucket = FileTokenBucket(rate, Path(shared_dir) / f"{name}-{direction}.bucket", **kw)
        else:
            sharers = self.scope.ranks_per_node
            if self.shared_by == "job":
                sharers *= self.scope.nodes
            bucket = TokenBucket(rate / max(1, sharers), **kw)
        return lambda: bucket

    def _through_nic(self, device: Callable[[], TokenBucket] | None,
                     nic_bps: float | None) -> Callable[[], TokenBucket] | None:
        """Writes' buckets: the device's, and the node's NIC (``scope.nic_path``: one file for
        every sender on the node, on the wall clock as the device's shared file is; without it,
        or beside a private device bucket, this process's part of the NIC on that bucket's clock)."""
        if nic_bps is None:
            return device
        probe = device() if device is not None else None
        if self.scope.nic_path and (probe is None or isinstance(probe, FileTokenBucket)):
            kw = {"clock": self._clock} if self._clock else {}
            nic = FileTokenBucket(nic_bps, self.scope.nic_path, sleep=self._sleep, **kw)
        else:
            kw = {"clock": probe.clock} if probe is not None else ({"clock": self._clock} if self._clock else {})
            nic = TokenBucket(nic_bps / max(1, self.scope.ranks_per_node), sleep=self._sleep, **kw)
        if device is None:
            return lambda: nic
        return lambda: BothBuckets(device(), nic)

    def request_delay(self, what: str) -> float:
        """Every request pays the latency plus a uniform extra in [0, jitter]."""
        if not self.jitter_s:
            return self.latency_s
        with self._rng_lock:
            return self.latency_s + self._rng.uniform(0, self.jitter_s)

    def _now(self, bucket: TokenBucket | None) -> float:
        """The clock deadlines are on: the bucket's (shared buckets use the wall clock)."""
        return bucket.clock() if bucket is not None else (self._clock or time.monotonic)()

    def _answered(self, bytes_due: float, what: str) -> float:
        """When a request answers: once its bytes are due, plus one request latency."""
        return bytes_due + self.request_delay(what)

    def _wait_sync(self, bucket: TokenBucket | None, deadline: float) -> float:
        delay = deadline - self._now(bucket)
        if delay > 0:
            self._sleep(delay)
        return max(0.0, delay)

    async def _wait(self, bucket: TokenBucket | None, deadline: float) -> float:
        delay = deadline - self._now(bucket)
        if delay > 0:
            await self._async_sleep(delay)
        return max(0.0, delay)

    def _count(self, direction: str, seconds: float) -> None:
        """Add a transfer's wait beyond its real I/O to its phase's (``counted_as``) total."""
        with self._waits_lock:
            by_dir = self._waits.setdefault(_PHASE.get(), {})
            by_dir[direction] = by_dir.get(direction, 0.0) + seconds

    async def _paced(self, pacer: _Pacer, op, nbytes, what: str):
        """``op()``, then wait until its bytes are due (n/rate from its start) plus the latency.

        The real I/O overlaps the emulated time: max(real, n/rate + latency).
        ``nbytes`` is a count, or a function of op's result (for reads).
        """
        bucket = pacer.bucket() if pacer.bucket else None
        start, wall = _anchored_start(self._now(bucket)), time.time()
        result = await op()
        n = nbytes(result) if callable(nbytes) else nbytes
        answered = self._answered(pacer.bytes_due(bucket, n, start), what)
        pacer.record(bucket, n, wall, answered - self._now(bucket))
        waited = await self._wait(bucket, answered)
        self._count(pacer.direction, waited)
        return result

    async def _write_whole(self, key: str, n: int, op) -> None:
        """put/put_file: claim capacity first (so nothing appears on ENOSPC), then pace ``op``."""
        validate_key(key)
        cap = self._capacity
        if cap is None:
            return await self._paced(self._writes, op, n, f"put {key}")
        await asyncio.to_thread(cap.reserve, n, f"write of {key}")

        async def write_and_account():
            try:
                replaced = await self.inner.size(key)
                await op()
            except BaseException:
                cap.free(n)
                raise
            cap.free(replaced)  # the new version's bytes stay claimed, the old one's are freed
        await self._paced(self._writes, write_and_account, n, f"put {key}")

    # ------------------------------------------------------------------ Tier API

    async def put(self, key, data) -> None:
        await self._write_whole(key, memoryview(data).nbytes, lambda: self.inner.put(key, data))

    async def get(self, key) -> bytes:
        return await self._paced(self._reads, lambda: self.inner.get(key), len, f"get {key}")

    async def put_file(self, key, src) -> None:
        await self._write_whole(key, os.stat(src).st_size, lambda: self.inner.put_file(key, src))

    async def read_from_path(self, key: str, nbytes: int) -> None:
        """A read the caller does itself from ``local_path``: wait as the device would
        (n / read rate from now, plus one request latency; shared with writes unless duplex)."""
        async def nothing():
            return None
        await self._paced(self._reads, nothing, nbytes, f"read {key}")
        await self.inner.read_from_path(key, nbytes)

    async def get_file(self, key, dest) -> None:
        await self._paced(self._reads, lambda: self.inner.get_file(key, dest),
                          lambda _: os.stat(dest).st_size, f"download {key}")

    async def delete(self, key) -> None:
        await self.before(f"delete {key}")
        size = await self.inner.size(key) if self._capacity is not None else None
        await self.inner.delete(key)
        if self._capacity is not None:
            self._capacity.free(size)

    def open_write(self, key) -> Sink:
        return _ThrottledSink(self, key, self.inner.open_write(key))

    def open_read(self, key) -> BinaryIO:
        self.before_sync(f"get {key}")
        return _ThrottledReader(self.inner.open_read(key), self._reads)  # type: ignore[return-value]

    def describe(self) -> str:
        bits = []
        if self.write_bps:
            bits.append(f"write {self.write_bps / GIB:.4g} GiB/s")
        if self.read_bps:
            bits.append(f"read {self.read_bps / GIB:.4g} GiB/s")
        if self.latency_s or self.jitter_s:
            bits.append(f"{self.latency_s * 1000:g} ms" + (f" +0-{self.jitter_s * 1000:g} ms" if self.jitter_s else ""))
        if self.shared_by != "none":
            bits.append(f"shared by {self.shared_by}")
        if self.nic_bps:
            bits.append(f"writes through a {self.nic_bps / GIB:.4g} GiB/s NIC shared with peer copies")
        if self.shares_device:
            bits.append("reads and writes share the device")
        if self._capacity is not None:
            bits.append(f"capacity {self._capacity.limit / GIB:g} GiB")
        if self.request_limits:
            bits.append(self.request_limits)
        return f"{self.inner.describe()} (emulated: {', '.join(bits) or 'pass-through'})"

