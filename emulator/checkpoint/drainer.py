"""The node drainer: copies a node's complete local checkpoint files to the global tier.

Runs on each node's leader (local rank 0) in the background, with at most
``concurrency`` files in flight (asyncio semaphore). Bytes move through the
tier's bulk door (``put_file``), so a directory-to-directory drain uses the
kernel's copy path and S3 uses multipart uploads. Each copy is verified before
the drain counts as done: by default its bytes are read back from the global
tier, streamed in small chunks, and their CRC32C compared with the one the
local write recorded (``verify="checksum"``); ``verify="size"`` only compares
the size, which a copy with wrong bytes passes. A bare directory tier reads its
copy back from the copy's own file a chunk behind the copy, beside it
(``put_file_read_back``); through any wrapper the copy is read back after. A
copy that fails verification is retried like a transient error. The manifest
is written by the caller only after every node's drain succeeded.

Transient global-tier errors (an S3 5xx, a timeout, a refused connection) are
retried per file with exponential backoff (``drain.retries``,
``drain.retry_backoff_s``); a file that still fails is abandoned, and so is the
drain: the checkpoint stays incomplete on the global tier (no manifest) and is
counted (``drain_abandoned``). Every file's copy runs to its end (success or
abandonment) before the drain returns, so no copy is still writing into a step
that retention may be deleting.
"""
from __future__ import annotations

import asyncio
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from emulator.checkpoint.integrity import (DEFAULT_READ_TIMEOUT_S, BoundedReader, crc_of_stream, format_crc,
                                          reader_size)
from emulator.checkpoint.layout import FileEntry
from emulator.checkpoint.retry import Abandoned, RetryPolicy, retrying
from emulator.checkpoint.tally import Tally
from emulator.design.links import lone_drain_seconds
from emulator.design.requests import file_requests
from emulator.metrics import NULL_METRICS
from tiers import paced
from tiers.base import Tier, unwrap
from tiers.emulated import anchored_at, emulated_behind, settle_requests


#: the phases that write into a node tier a drain may be reading (tiers/paced.py)
WRITES = ("local_write", "persist")
#: read-back chunk of the checksum verification: up to ``concurrency`` of them are in memory at once
VERIFY_CHUNK = 4 << 20
#: what a drain checks on the global copy when not told: its bytes, not only its size
DEFAULT_VERIFY = "checksum"


class DrainError(Exception):
    """The global copy does not match the local file; transient: the copy is tried again."""


@dataclass
class DrainResult:
    node: int
    ok: bool
    start: float
    end: float
    bytes: int = 0
    files: int = 0
    error: str = ""
    per_file: list = field(default_factory=list)  # (key, seconds)
    retries: int = 0
    abandoned: bool = False
    #: of its seconds, the paced transfers' (tiers/paced.py): the design's part (None: nothing paced)
    paced_s: float | None = None

    @property
    def seconds(self) -> float:
        return self.end - self.start


class Drainer:
    def __init__(self, source: Tier, dest: Tier, *, concurrency: int = 4, verify: str = DEFAULT_VERIFY,
                 metrics=NULL_METRICS, node: int = 0, policy: RetryPolicy | None = None, tally: Tally | None = None,
                 spool_dir: str | None = None, read_timeout_s: float = DEFAULT_READ_TIMEOUT_S):
        self.source, self.dest = source, dest
        self.concurrency, self.verify = concurrency, verify
        self.metrics, self.node = metrics, node
        self.policy = policy or RetryPolicy()
        self.tally = tally or Tally()
        self.spool_dir = spool_dir
        self.read_timeout_s = read_timeout_s  # the read-back of one file is given up after it
        self.in_flight_since: float | None = None  # when the drain now in progress began

    async def drain(self, entries: list[FileEntry], after_file=None) -> DrainResult:
        """Copy and verify every entry; ``after_file()`` runs after each file (fault injection)."""
        total = sum(e.size for e in entries)
        start = self.in_flight_since = time.time()
        self.metrics.drain_started(total)
        sem = asyncio.Semaphore(self.concurrency)
        result = DrainResult(self.node, True, start, start, files=len(entries))

        def on_retry(exc):
            result.retries += 1
            self.tally.count("drain_retry")

        async def copy_verified(entry: FileEntry):
            read_back = await self._copy(entry)
            await self._verify(entry, read_back)

        async def one(entry: FileEntry):
            async with sem:
                t = time.perf_counter()
                await retrying(self.policy, f"drain of {entry.key}", lambda: copy_verified(entry), on_retry)
                result.per_file.append((entry.key, time.perf_counter() - t))
                result.bytes += entry.size
                self.metrics.drain_progress(entry.size)
                if after_file is not None:
                    after_file()

        outcomes = await asyncio.gather(*(one(e) for e in entries), return_exceptions=True)
        await asyncio.to_thread(settle_requests, self.dest)  # the job's drain ends with its last request
        failures = [o for o in outcomes if isinstance(o, BaseException)]
        if failures:  # reported to every rank; the checkpoint stays incomplete
            exc = failures[0]
            result.ok = False
            result.abandoned = any(isinstance(f, Abandoned) for f in failures)
            result.error = str(exc) if isinstance(exc, Abandoned) else f"{type(exc).__name__}: {exc}"
            if len(failures) > 1:
                result.error += f" (and {len(failures) - 1} more file(s))"
            if result.abandoned:
                self.tally.count("drain_abandoned")
        result.end = time.time()
        self.in_flight_since = None
        if not result.ok:
            self.metrics.drain_progress(total - result.bytes)
        self.metrics.drain_finished(result.seconds, ok=result.ok)
        return result

    def paced_seconds(self, phase: str, result: DrainResult, sizes: list[int]) -> float | None:
        """Of ``result``'s seconds, the paced devices' (the spans of ``phase``, tiers/paced.py; None:
        nothing paces the destination), never more than they need for its files (:meth:`floor_seconds`):
        a copy the host delayed also delays the read-backs and copies queued behind it, whose paced
        spans would otherwise cover the delay."""
        if emulated_behind(self.dest) is None:
            return None
        spans = paced.seconds(phase, result.start, result.end)
        source = emulated_behind(self.source)
        others = tuple(p for p in WRITES if p != phase)
        shared = source is not None and source.shares_device and paced.seconds(others, result.start, result.end) > 0
        floor = self.floor_seconds(sizes) if result.ok and not result.retries and not shared else None
        return spans if floor is None else min(spans, floor)

    def floor_seconds(self, sizes: list[int]) -> float | None:
        """The least time the paced devices take to drain files of ``sizes`` with nothing else on them,
        as emulator/design/costs.py's drain: every byte at the copy's rate (the destination's write, or
        the source's read where slower), the smallest file read back (``checksum``; every file where
        reads and writes share the device), and a request latency at each end of every wave of
        ``concurrency`` files; no less than an object store's request ceilings allow. None where the devices' time may also be another transfer's (a NIC the
        peer copies cross, a bucket per call; :meth:`paced_seconds` also leaves out a source device
        the next checkpoint's write shared during the drain)."""
        dest, source = emulated_behind(self.dest), emulated_behind(self.source)
        if dest is None or not sizes or dest.rate("write") is None or dest.nic_bps or dest.shared_by == "none":
            return None
        if source is not None and (source.nic_bps or source.shared_by == "none"):
            return None
        return max(lone_drain_seconds(sizes, write_bps=dest.rate("write"), source_read_bps=source and source.rate("read"),
                                      read_back_bps=dest.rate("read") if self.verify == "checksum" else None,
                                      latency_s=dest.latency_s, concurrency=self.concurrency,
                                      shared_device=dest.shares_device),
                   self._requests_floor(dest, sizes))

    def _requests_floor(self, dest, sizes: list[int]) -> float:
        """The least time the drain's requests (each file's upload and check) take at the store's
        ceilings, each at the requests it stands for (tiers/s3_limits.py); 0 where nothing limits them."""
        store = unwrap(dest)
        if dest.limiter is None or not hasattr(store, "part_size"):
            return 0.0
        counts = Counter()
        for size in sizes:
            counts += file_requests(1, size, store.part_size, self.verify, store.single_get_threshold)
        return dest.limiter.floor_seconds(counts, "drain")

    async def _copy(self, entry: FileEntry) -> tuple[int, int] | None:
        """Copy ``entry`` to the global tier; where that tier read the copy back beside it (a bare
        directory, ``checksum``), the CRC32C and count of the bytes it read."""
        try:
            return await self._copy_from_source(entry)
        except FileNotFoundError:
            check_live = getattr(unwrap(self.source), "check_live", None)
            if check_live is not None:
                check_live()  # the source tier's folder went under the run: TierLost, not a missing file
            raise

    async def _copy_from_source(self, entry: FileEntry) -> tuple[int, int] | None:
        put = self.dest.put_file_read_back if self.verify == "checksum" else self.dest.put_file
        path = self.source.local_path(entry.key)
        if path is not None and path.is_file():
            # the copy reads the local device as it writes the global tier: the slower of the two
            # (and the real copy) sets its time; an emulated local tier is not read for free
            read_back, _ = await asyncio.gather(put(entry.key, path), self.source.read_from_path(entry.key, entry.size))
            return read_back
        with tempfile.TemporaryDirectory(prefix="ckpt-emu-drain-", dir=self.spool_dir) as tmp:
            spool = Path(tmp) / "file"
            await self.source.get_file(entry.key, spool)
            return await put(entry.key, spool)

    async def _verify(self, entry: FileEntry, read_back: tuple[int, int] | None = None) -> None:
        if self.verify == "size":
            _check_size(entry, await self.dest.size(entry.key))
            return
        if read_back is not None:  # read back from the copy beside it, by the tier
            crc, size = format_crc(read_back[0]), read_back[1]
        else:
            crc, size = await asyncio.to_thread(self._read_back, entry)
        _check_size(entry, size)
        if crc != entry.crc32c:
            raise DrainError(f"{entry.key}: global copy checksum {crc} != {entry.crc32c} (CRC32C of the local write)")

    def _read_back(self, entry: FileEntry) -> tuple[str, int | None]:
        """CRC32C and length of the bytes the global tier holds, streamed through one small
        buffer (no second copy of the file in memory); length None if the copy is missing. A
        size that differs from the entry's is known before a byte is read where the tier says it,
        and no more than the entry's size is ever read (a longer copy reads as one byte longer)."""
        try:  # after its copy: booked from now, not from the drain's start (its phase anchor)
            with anchored_at(None), self.dest.open_read(entry.key) as fh:
                known = reader_size(fh)
                if known is not None and known != entry.size:
                    return "", known
                body = BoundedReader(fh, entry.size, timeout_s=self.read_timeout_s,
                                     what=f"the global copy of {entry.key}")
                crc, size = crc_of_stream(body, bytearray(VERIFY_CHUNK))
                return crc, size + 1 if body.longer() else size
        except FileNotFoundError:
            return "", None


def _check_size(entry: FileEntry, size: int | None) -> None:
    if size != entry.size:
        got = "is missing" if size is None else f"has {size} bytes"
        raise DrainError(f"{entry.key}: global copy {got}, expected {entry.size} bytes")
