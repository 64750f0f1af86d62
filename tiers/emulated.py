"""Make any tier behave like a slower or farther one: bandwidth, latency, jitter, capacity.

Users evaluate storage they do not own ("what if global storage gave each
node 0.5 GiB/s at 20 ms?"), so the wrapper must be accurate (a transfer of B
bytes at R B/s takes B/R, within a few percent, even for short transfers) and
cheap (it computes each wait and sleeps once; it never spins).

How bandwidth is paced: every transfer books its bytes in a ``TokenBucket``
*after* doing the real I/O, anchored at the moment it started, then sleeps
until its booked finish time. The real I/O therefore overlaps the emulated
time instead of adding to it, and transfers that share a bucket queue behind
each other, so N streams on one bucket get R/N each and R in total.

Who shares a bucket (``shared_by``):

* ``none``: every call or stream gets the full rate on its own bucket.
* ``rank``: one bucket per EmulatedTier, i.e. per rank process.
* ``node``/``job``: one bucket for all processes of the node / of the job.
  Ranks are separate OS processes, so the bucket is a small state file in
  ``scope["shared_dir"]`` updated under ``fcntl.flock`` (all processes must
  see that directory and share a wall clock: one machine, as in our tests).
  Without ``shared_dir`` each process falls back to its own bucket at
  rate / ranks_per_node (node) or rate / (ranks_per_node * nodes) (job),
  exact only while every rank transfers at the same time.

Latency: each request (call, stream open, sink commit) pays ``latency`` plus
a uniform random extra in ``[0, jitter]`` from an RNG seeded with the rank.
Capacity: writes that would exceed it fail with ``OSError(ENOSPC)`` before
anything becomes visible. Usage starts from the inner tier's contents and is
shared through ``shared_dir`` by every process writing to the same storage
(else it is this process's own view).
"""
from __future__ import annotations

import asyncio
import concurrent.futures as cf
import errno
import fcntl
import hashlib
import math
import os
import random
import struct
import threading
import time
from pathlib import Path
from typing import BinaryIO, Callable

from .base import Sink, Tier, validate_key

GIB = 1 << 30
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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = None
        self._pid = -1

    def _file(self) -> int:
        # flock belongs to the open file, which a forked child would share: reopen per process
        if self._fd is None or self._pid != os.getpid():
            self._fd, self._pid = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644), os.getpid()
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


def _enospc(what: str) -> OSError:
    return OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (emulated capacity): {what}")


def _run_sync(coro):
    """Run a coroutine to completion from sync code, whether or not this thread runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with cf.ThreadPoolExecutor(1) as ex:  # a loop thread: use a private loop elsewhere
        return ex.submit(asyncio.run, coro).result()


class _Capacity:
    """Bytes used on the inner tier (stored plus being written) against a limit.

    With a ``shared_dir`` the count is one integer in a file under ``flock``,
    keyed by the inner tier's location, so every process writing to the same
    storage (a node's ranks on its NVMe, all ranks on global storage) sees the
    others' bytes. Otherwise it is this process's own view. The first user
    counts what the inner tier already holds.
    """

    def __init__(self, limit: int, inner: Tier, path: Path | None = None):
        self.limit, self._inner, self._path = limit, inner, path
        self._lock = threading.Lock()
        self._used: int | None = None  # in-process count, once scanned
        self._fd, self._pid = None, -1

    def _scan(self) -> int:
        async def scan():
            return sum([(await self._inner.size(k)) or 0 for k in await self._inner.list()])
        return _run_sync(scan())

    def _update(self, fn, scan: bool = True):
        """Apply ``fn(used) -> (new_used, result)`` atomically across threads (and processes).

        Before the first count exists, ``scan=False`` does nothing: the scan
        that creates the count will see the change anyway.
        """
        with self._lock:
            if self._path is None:
                if self._used is None:
                    if not scan:
                        return None
                    self._used = self._scan()
                self._used, result = fn(self._used)
                return result
            if self._fd is None or self._pid != os.getpid():
                self._path.parent.mkdir(parents=True, exist_ok=True)
                self._fd, self._pid = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644), os.getpid()
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                raw = os.pread(self._fd, 8, 0)
                if len(raw) != 8 and not scan:
                    return None
                used = struct.unpack("<q", raw)[0] if len(raw) == 8 else self._scan()
                used, result = fn(used)
                os.pwrite(self._fd, struct.pack("<q", used), 0)
                return result
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def reserve(self, n: int, what: str) -> None:
        """Claim ``n`` bytes or raise ENOSPC (claiming nothing)."""
        def claim(used):
            if used + n > self.limit:
                raise _enospc(f"{what} needs {n} bytes, {max(0, self.limit - used)} free")
            return used + n, None
        self._update(claim)

    def free(self, n: int | None) -> None:
        """Give back ``n`` bytes: an aborted write, a deleted or replaced object."""
        if n:
            self._update(lambda used: (max(0, used - n), None), scan=False)


class _Pacer:
    """Bandwidth for one direction: where its buckets come from, and how a transfer waits."""

    def __init__(self, tier: "EmulatedTier", bucket: Callable[[], TokenBucket] | None):
        self.tier, self.bucket = tier, bucket

    def finish_sync(self, bucket: TokenBucket | None, n: int, start: float) -> None:
        if bucket is not None and n:
            bucket.wait_until(bucket.reserve(n, start))

    async def finish(self, bucket: TokenBucket | None, n: int, start: float) -> None:
        if bucket is not None and n:
            delay = bucket.reserve(n, start) - bucket.clock()
            if delay > 0:
                await self.tier._async_sleep(delay)


class _ThrottledSink(Sink):
    def __init__(self, tier: "EmulatedTier", key: str, inner: Sink):
        self._tier, self._key, self._inner = tier, key, inner
        self._bucket = tier._writes.bucket() if tier._writes.bucket else None
        self._reserved = 0
        self._done = False

    @property
    def bytes_written(self) -> int:
        return self._inner.bytes_written

    def write(self, data) -> int:
        n = memoryview(data).nbytes
        if self._tier._capacity is not None:
            try:
                self._tier._capacity.reserve(n, f"write to {self._key}")
            except OSError:
                self.abort()  # nothing half-written may linger, whatever the caller does next
                raise
            self._reserved += n
        start = self._bucket.clock() if self._bucket else 0.0
        written = self._inner.write(data)
        self._tier._writes.finish_sync(self._bucket, n, start)
        return written

    def flush(self) -> None:
        self._inner.flush()

    def commit(self) -> None:
        if self._done:
            return
        self._tier._latency_sync()
        capacity = self._tier._capacity
        replaced = _run_sync(self._tier.inner.size(self._key)) if capacity is not None else None
        self._inner.commit()
        self._done = True
        if capacity is not None:
            capacity.free(replaced)

    def abort(self) -> None:
        if self._done:
            return
        self._done = True
        self._inner.abort()
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
        start = self._clock()
        data = self._inner.read(size)
        self._pacer.finish_sync(self._bucket, len(data), start)
        return data

    def readinto(self, buf) -> int:
        start = self._clock()
        n = self._inner.readinto(buf) or 0
        self._pacer.finish_sync(self._bucket, n, start)
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


class EmulatedTier(Tier):
    """Wraps ``inner`` and paces it; rates in bytes/s, times in seconds."""

    def __init__(self, inner: Tier, write_bps: float | None = None, read_bps: float | None = None,
                 latency_s: float = 0.0, jitter_s: float = 0.0, shared_by: str = "none",
                 capacity_bytes: int | None = None, scope: dict | None = None, seed: int | None = None,
                 clock: Callable[[], float] | None = None, sleep: Callable[[float], None] | None = None,
                 async_sleep: Callable | None = None):
        if shared_by not in ("none", "rank", "node", "job"):
            raise ValueError(f"shared_by must be none, rank, node or job, got {shared_by!r}")
        self.inner = inner
        self.write_bps, self.read_bps = write_bps, read_bps
        self.latency_s, self.jitter_s = latency_s, jitter_s
        self.shared_by = shared_by
        self.scope = dict(scope or {})
        self._clock, self._sleep = clock, sleep or time.sleep
        if async_sleep is None:
            async_sleep = asyncio.sleep if sleep is None else _as_async(sleep)
        self._async_sleep = async_sleep
        self._rng = random.Random(self.scope.get("rank", 0) if seed is None else seed)
        self._rng_lock = threading.Lock()
        self._capacity = None
        if capacity_bytes is not None:
            shared_dir = self.scope.get("shared_dir")
            where = hashlib.sha1(inner.describe().encode()).hexdigest()[:16]
            path = Path(shared_dir) / f"capacity-{where}" if shared_dir else None
            self._capacity = _Capacity(int(capacity_bytes), inner, path)
        self._writes = _Pacer(self, self._bucket_source(write_bps, "write"))
        self._reads = _Pacer(self, self._bucket_source(read_bps, "read"))

    @classmethod
    def from_config(cls, inner: Tier, emulate_cfg, scope: dict | None = None) -> "EmulatedTier":
        """Build from an ``emulator.config.EmulateConfig`` (GiB = 2**30 bytes, ms)."""
        c = emulate_cfg
        gib = lambda v: None if v is None else v * GIB  # noqa: E731
        return cls(inner, write_bps=gib(c.write_gib_s), read_bps=gib(c.read_gib_s),
                   latency_s=c.latency_ms / 1000, jitter_s=c.jitter_ms / 1000, shared_by=c.shared_by,
                   capacity_bytes=None if c.capacity_gib is None else int(c.capacity_gib * GIB),
                   scope=scope)

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
        shared_dir = self.scope.get("shared_dir")
        if shared_dir:
            name = f"node{self.scope.get('node_id', 0)}" if self.shared_by == "node" else "job"
            bucket = FileTokenBucket(rate, Path(shared_dir) / f"{name}-{direction}.bucket", **kw)
        else:
            sharers = int(self.scope.get("ranks_per_node", 1))
            if self.shared_by == "job":
                sharers *= int(self.scope.get("nodes", 1))
            bucket = TokenBucket(rate / max(1, sharers), **kw)
        return lambda: bucket

    def _latency(self) -> float:
        if not self.jitter_s:
            return self.latency_s
        with self._rng_lock:
            return self.latency_s + self._rng.uniform(0, self.jitter_s)

    def _latency_sync(self) -> None:
        delay = self._latency()
        if delay > 0:
            self._sleep(delay)

    async def _latency_async(self) -> None:
        delay = self._latency()
        if delay > 0:
            await self._async_sleep(delay)

    async def _paced(self, pacer: _Pacer, op, nbytes):
        """Latency, then ``op()``, then wait out the rest of n/rate from its start.

        ``nbytes`` is a count, or a function of op's result (for reads).
        """
        await self._latency_async()
        bucket = pacer.bucket() if pacer.bucket else None
        start = bucket.clock() if bucket else 0.0
        result = await op()
        await pacer.finish(bucket, nbytes(result) if callable(nbytes) else nbytes, start)
        return result

    async def _write_whole(self, key: str, n: int, op) -> None:
        """put/put_file: claim capacity first (so nothing appears on ENOSPC), then pace ``op``."""
        validate_key(key)
        cap = self._capacity
        if cap is None:
            return await self._paced(self._writes, op, n)
        await asyncio.to_thread(cap.reserve, n, f"write of {key}")

        async def write_and_account():
            try:
                replaced = await self.inner.size(key)
                await op()
            except BaseException:
                cap.free(n)
                raise
            cap.free(replaced)  # the new version's bytes stay claimed, the old one's are freed
        await self._paced(self._writes, write_and_account, n)

    # ------------------------------------------------------------------ Tier API

    @property
    def backend(self) -> str:  # metrics label the real backend
        return self.inner.backend

    async def put(self, key, data) -> None:
        await self._write_whole(key, memoryview(data).nbytes, lambda: self.inner.put(key, data))

    async def get(self, key) -> bytes:
        return await self._paced(self._reads, lambda: self.inner.get(key), len)

    async def put_file(self, key, src) -> None:
        await self._write_whole(key, os.stat(src).st_size, lambda: self.inner.put_file(key, src))

    async def get_file(self, key, dest) -> None:
        await self._paced(self._reads, lambda: self.inner.get_file(key, dest),
                          lambda _: os.stat(dest).st_size)

    async def size(self, key) -> int | None:
        await self._latency_async()
        return await self.inner.size(key)

    async def list(self, prefix: str = "") -> list[str]:
        await self._latency_async()
        return await self.inner.list(prefix)

    async def delete(self, key) -> None:
        await self._latency_async()
        size = await self.inner.size(key) if self._capacity is not None else None
        await self.inner.delete(key)
        if self._capacity is not None:
            self._capacity.free(size)

    def open_write(self, key) -> Sink:
        return _ThrottledSink(self, key, self.inner.open_write(key))

    def open_read(self, key) -> BinaryIO:
        self._latency_sync()
        return _ThrottledReader(self.inner.open_read(key), self._reads)  # type: ignore[return-value]

    def local_path(self, key) -> Path | None:
        return self.inner.local_path(key)

    async def close(self) -> None:
        await self.inner.close()

    def describe(self) -> str:
        bits = []
        if self.write_bps:
            bits.append(f"write {self.write_bps / GIB:g} GiB/s")
        if self.read_bps:
            bits.append(f"read {self.read_bps / GIB:g} GiB/s")
        if self.latency_s or self.jitter_s:
            bits.append(f"{self.latency_s * 1000:g} ms" + (f" +0-{self.jitter_s * 1000:g} ms" if self.jitter_s else ""))
        if self.shared_by != "none":
            bits.append(f"shared by {self.shared_by}")
        if self._capacity is not None:
            bits.append(f"capacity {self._capacity.limit / GIB:g} GiB")
        return f"{self.inner.describe()} (emulated: {', '.join(bits) or 'pass-through'})"

    def __getattr__(self, name):
        """Backend extras (``check``, ``abort_stale_uploads``, ``sweep_partials``) pass through."""
        if name == "inner":  # not set yet (during construction): avoid recursing
            raise AttributeError(name)
        return getattr(self.inner, name)


def _as_async(sleep: Callable[[float], None]):
    async def async_sleep(delay: float) -> None:
        sleep(delay)
    return async_sleep
