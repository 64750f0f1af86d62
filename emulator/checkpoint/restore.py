"""Restore: every rank loads the newest checkpoint that all ranks can load, from the nearest tier.

Candidate steps are the union of complete checkpoints on every tier, newest
first. For a step, each rank tries its tiers fastest first (local, then
global): the manifest must list its file, and the file's CRC32C must match
while it is read. The file is read once: ``torch.load(map_location="meta")``
gives its structure and each tensor's offset (``_checkpoint_offset``), read from
the file in place or, on a tier without files (S3), through the tier's seekable
reader (a few small ranged GETs, nothing on the host's disk); then one
sequential pass through the tier's reader puts every tensor's bytes straight
into the rank's staging buffers (same layout, pages already in use) and the
CRC32C runs over every byte; only once every rank has verified its file of
the step do the staging buffers become the live state, on every rank at once
(``RankState.adopt_staging``: on the CPU a swap, not a copy; on a GPU a
host-to-device copy from the pinned staging buffers into the live tensors). (A CRC pass,
then ``torch.load(mmap)`` and a copy, was markedly slower and mapped the
whole file into the process: +1 GiB peak RSS per GiB of state.) A missing,
incomplete or corrupt copy falls back to the next tier; if any rank cannot
load the step at all, every rank moves on to the previous step together; if
no step is loadable on every rank, the load fails on all and no rank's live
state changes, so ranks never end on different steps.

Nothing a tier does can crash a restore or get loaded unverified: a tier that
cannot be listed or read (an outage) is skipped like an incomplete copy, a
manifest of another layout (world size, preset, scale, parallelism) is not a
candidate, and size or checksum mismatches are counted (``checksum_mismatch``)
before falling back. Live tensors are only overwritten after the file's bytes
verified, so a failed attempt leaves the state untouched.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import time

import crc32c
import torch

from emulator.checkpoint import layout
from emulator.checkpoint.file_plan import expected_layout
from emulator.checkpoint.integrity import (DEFAULT_READ_TIMEOUT_S, READ_CHUNK, BoundedReader, crc_of_stream,
                                          format_crc, reader_size)
from emulator.checkpoint.records import LoadRecord
from emulator.checkpoint.retry import RetryPolicy, describe_error, retrying
from emulator.checkpoint.tally import Tally
from emulator.metrics import NULL_METRICS
from tiers import paced
from tiers.base import TierError, unwrap
from tiers.emulated import anchored_at, counted_as
from tiers.fileops import open_regular
from tiers.runsync import run_sync
from tiers.s3_requests import Bill, charged_to

DROP_CACHES = "/proc/sys/vm/drop_caches"
_OTHER_LAYOUT = object()  # a file read intact whose structure is not the one this run writes


def _against_manifest(body, size: int, crc: str, entry) -> str | None:
    """Why the bytes just read are not the manifest's file, or None when size and CRC32C match."""
    if size == entry.size and body.longer():
        return f"size more than manifest {entry.size}"
    if size != entry.size:
        return f"size {size} != manifest {entry.size}"
    if crc != entry.crc32c:
        return f"checksum mismatch ({crc} != {entry.crc32c})"
    return None


def drop_page_cache() -> bool:
    """Flush dirty pages and drop the whole host's page cache (every other job's too: only on
    request, ``checkpoint.page_cache_scope: host``); False when not permitted (not root, container)."""
    os.sync()
    try:
        with open(DROP_CACHES, "w") as fh:
            fh.write("3\n")
        return True
    except OSError:
        return False


async def drop_file_pages(tiers) -> bool:
    """Drop the cached pages of every file on ``tiers`` that has one on this host (the checkpoints a
    load reads), with ``posix_fadvise(DONTNEED)``: no root needed, and other processes' cached
    pages stay. Files were fsynced when published, so their pages are clean and can go. Listed
    straight from the backend (no emulated request). False if a file could not be advised."""
    ok = True
    for tier in tiers:
        inner = unwrap(tier)
        for key in await inner.list():
            path = inner.local_path(key)
            if path is None:
                continue
            try:
                fd = open_regular(path)
            except (OSError, TierError):
                continue  # gone meanwhile (retention), or not a file of ours
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            except OSError:
                ok = False
            finally:
                os.close(fd)
    return ok


async def drop_cached_pages(scope: str, tiers) -> bool:
    """Before a load: ``files`` drops the pages of the checkpoint files on ``tiers`` only (the default);
    ``host`` the whole host's page cache (root). Whether it could."""
    if scope == "host":
        return drop_page_cache()
    return await drop_file_pages(tiers)


def lists_tier(comm, *, shared: bool) -> bool:
    """Whether this rank lists a tier: a job-wide one (``shared``) by rank 0, a node's by its leader.
    One LIST per tier, not one per rank: every rank listing a bucket at once is a LIST storm."""
    return comm.rank == 0 if shared else comm.is_node_leader


#: a process's buffer for reading a file whose structure is not read first (16 MiB), one for every
#: restore: a buffer of its own per restore left the allocator's heap 16 MiB larger after each of a
#: soak's first recoveries (glibc raises its mmap threshold once such a block is freed)
_READ_BUFFER = threading.local()


def _read_buffer() -> bytearray:
    buf = getattr(_READ_BUFFER, "buf", None)
    if buf is None:
        buf = _READ_BUFFER.buf = bytearray(16 << 20)
    return buf


class Restorer:
    def __init__(self, state, tiers: list[tuple[str, object]], comm, *, metrics=NULL_METRICS,
                 loop=None, mode: str = "async", meta: dict | None = None,
                 tally: Tally | None = None, policy: RetryPolicy | None = None,
                 shared: tuple[str, ...] = ("global",), source: int | None = None,
                 read_timeout_s: float = DEFAULT_READ_TIMEOUT_S, time_factor: float = 0.0, dcp=None):
        self.state, self.tiers, self.comm, self.mode = state, tiers, comm, mode
        # loads at a dilation of their own (emulator/rank/dilation.py): the time factor their tiers
        # are paced at (0: the run's); their records carry it, so the metrics' clock converts them
        self.time_factor = time_factor
        self.read_timeout_s = read_timeout_s  # a file's read is given up after it (checkpoint.read_timeout_s)
        # checkpoint.engine dcp: DCP loads the step's files (emulator/checkpoint/dcp_engine.py DcpSaver)
        self.dcp = dcp
        # whose file this rank restores: its own, or (a replicated layout) its DP group leader's,
        # with ``state`` then a replica of the leader's layout (checkpoint/broadcast_restore.py)
        self.source = comm.rank if source is None else source
        self.plan = None  # with keep_plan: the file's gaps and tensor spans, read last (for a broadcast)
        self.keep_plan = False
        self.shared = shared  # the tiers every rank of the job sees the same (listed by rank 0 only)
        self.policy = policy or RetryPolicy(retries=0)  # the run's one retry policy for tier requests
        self.metrics, self.loop = metrics, loop
        self.meta = meta or {}  # expected manifest meta (preset, scale, tp, ...); {} accepts any
        self.tally = tally or Tally(metrics)
        self.manifest = None  # the manifest of the step restored last (its meta carries the lineage)
        self._buf = _read_buffer()
        self._stream = None  # (start, end) of this rank's last stream of a file's bytes (wall clock)
        self._found = None  # during a load: (tier, step) -> what _locate found

    def _run(self, coro):
        return self.loop.run(coro) if self.loop else run_sync(coro)

    def _retried(self, what: str, make_coro):
        """A tier request under the run's retry policy (transient errors only), then its result."""
        return self._run(retrying(self.policy, what, make_coro))

    def candidate_steps(self) -> list[int]:
        """Every step complete on some tier, newest first (collective). A tier is listed by one rank
        of those that share it: a job-wide tier (``shared``) by rank 0, any other by each node's
        leader. Every rank listing the bucket at once is a LIST storm (DLIO issue 347: at 512 ranks
        S3 answered 503s and the restore aborted); this way a restore lists the global tier once,
        and each rank then reads the one manifest of the step it tries."""
        mine = set()
        for name, tier in self.tiers:
            if not lists_tier(self.comm, shared=name in self.shared):
                continue
            try:
                mine |= set(self._retried("list checkpoints", lambda t=tier: layout.list_steps(t))[0])
            except Exception:  # noqa: BLE001 - an unreachable tier offers nothing
                self.tally.count("tier_error")
        union = set()
        for steps in self.comm.all_gather(sorted(mine)):
            union |= set(steps)
        return sorted(union, reverse=True)

    def load(self) -> LoadRecord:
        """Restore the newest checkpoint every rank can load into the live state (collective).

        All or nothing: each rank reads and verifies a step into its staging buffers
        only; the step becomes live on every rank once all ranks verified it, and if no
        step is loadable on every rank, no rank's live state changes. The record carries
        the S3 requests the restore made on this rank (``requests``)."""
        with charged_to(Bill("restore", self.metrics.count_s3_request)) as bill, counted_as("restore"):
            rec = self._load()
        rec.requests = bill.counts()
        return rec

    def _load(self) -> LoadRecord:
        rec = LoadRecord(self.comm.rank, self.comm.node, source_rank=self.source)
        start, wall, self._stream, self._found = time.perf_counter(), time.time(), None, {}
        candidates = self.candidate_steps()
        for step in candidates:
            if not self._everyone_holds(step, rec):
                continue
            ok = self._try_step(step, rec)
            if self.comm.all_min(1.0 if ok else 0.0) == 1.0:
                staged = self.state.adopt_staging()  # every rank verified this step: all take it together
                rec.h2d_s = staged.device_s if staged is not None else 0.0
                rec.ok, rec.step = True, step
                break
            self.manifest = None  # someone could not: nobody takes it
        self._found = None  # the manifests read are this load's
        if not rec.ok:
            rec.error = (f"no checkpoint is loadable on every rank ({len(candidates)} candidate step(s) tried); "
                         "the live state is unchanged on every rank")
        rec.seconds = time.perf_counter() - start
        rec.time_factor = self.time_factor
        mine = paced.spans(("restore", "fetch"), wall, wall + rec.seconds)
        everyone = self.comm.all_gather((rec.seconds, wall, rec.bytes, self.comm.node, mine))
        # its stream is behind when its node's device is idle (the node's ranks read through one);
        # its load is paced while any node's reads are (device_seconds)
        node_spans = [s for *_, node, spans in everyone if node == self.comm.node for s in spans]
        rec.paced_s = device_seconds(everyone, wall, rec.seconds)
        if rec.ok and self._stream is not None:
            rec.lag_s = self._stream[1] - self._stream[0] - paced.covered(node_spans, *self._stream)
        if rec.ok:
            self._observe(rec, everyone)
        return rec

    def _observe(self, rec: LoadRecord, everyone: list) -> None:
        """The load's metrics at full size; rank 0's throughput, MLPerf style: every rank's bytes over
        the slowest rank's time (each rank's paced part from every rank's spans, as its own)."""
        clock, backend = self.metrics.clock, dict(self.tiers)[rec.tier].backend
        self.metrics.observe_phase("load", rec.tier, clock.load(rec), backend=backend)
        self.metrics.add_bytes("read", rec.tier, clock.bytes(rec.bytes), backend=backend)
        if self.comm.rank == 0:
            slowest = max(clock.load({"seconds": s, "paced_s": device_seconds(everyone, w, s),
                                      "time_factor": rec.time_factor}) for s, w, *_ in everyone)
            self.metrics.set_throughput("load", self.mode, clock.bytes(sum(b for _, _, b, *_ in everyone))
                                        / max(slowest, 1e-9))

    def _everyone_holds(self, step: int, rec: LoadRecord) -> bool:
        """Whether every rank finds a complete copy of its file of ``step`` on one of its tiers
        (collective, on the manifests alone): a step some rank cannot load is read by none. Read
        first, a node that lost its memory made the other node read the newest step, then the one
        they both held: twice the restore's reads."""
        reasons = []
        for name, tier in self.tiers:
            found = self._locate(tier, step)
            if not isinstance(found, str):
                break
            reasons.append(f"{name}@{step}: {found}")
        else:
            name = None
        if self.comm.all_min(0.0 if name is None else 1.0) == 1.0:
            return True
        rec.fallbacks += reasons if name is None else [f"{name}@{step}: complete here, not on every rank"]
        return False

    def _try_step(self, step: int, rec: LoadRecord) -> bool:
        for name, tier in self.tiers:
            reason = self._try_tier(name, tier, step, rec)
            if reason is None:
                return True
            rec.fallbacks.append(f"{name}@{step}: {reason}")
            if reason.startswith(("checksum mismatch", "size ")):
                self.tally.count("checksum_mismatch")
        return False

    def _try_tier(self, name: str, tier, step: int, rec: LoadRecord) -> str | None:
        """Load from one tier; returns None on success, else why not."""
        found = self._locate(tier, step)
        if isinstance(found, str):
            return found
        manifest, entry = found
        if self.dcp is not None:
            return self._try_dcp(name, tier, manifest, step, rec)
        try:  # a tier error (an S3 read cut off) is tried again under the run's retry policy
            reason = self._retried(f"read of {entry.key}", lambda: asyncio.to_thread(
                self._read_from_tier, tier, entry, step))
        except FileNotFoundError:
            return "file missing"
        except Exception as exc:  # an unreachable tier must fall back, never crash the restore
            return f"unreadable: {type(exc).__name__}: {exc}"
        if reason is not None:
            return reason
        rec.tier, rec.bytes, rec.read_bytes = name, entry.size, entry.size
        self.manifest = manifest
        return None

    def _try_dcp(self, name: str, tier, manifest, step: int, rec: LoadRecord) -> str | None:
        """DCP's load of the step from one tier into the staging buffers, every file it reads checked
        against the manifest first; None on success, else why not."""
        try:
            read = self._retried(f"DCP load of step {step}", lambda: asyncio.to_thread(
                self.dcp.load_staging, tier, layout.step_dir(step), manifest.files))
        except Exception as exc:  # noqa: BLE001 - an unreadable or corrupt copy falls back
            text = describe_error(exc)
            return f"checksum mismatch: {text}" if "CRC32C" in text else f"unreadable: {text}"
        rec.tier, rec.bytes, rec.read_bytes = name, read, read
        self.manifest = manifest
        return None

    def _locate(self, tier, step: int):
        """(manifest, this rank's entry) of a complete checkpoint of this layout, or why not; read once
        a load (:meth:`_everyone_holds` and the reads ask the same)."""
        key = (id(tier), step)
        found = self._found.get(key) if self._found is not None else None
        if found is None:
            found = self._manifest_entry(tier, step)
            if self._found is not None:
                self._found[key] = found
        return found

    def _manifest_entry(self, tier, step: int):
        try:
            manifest = self._retried(f"manifest of step {step}", lambda: layout.read_manifest(tier, step))
        except Exception as exc:  # noqa: BLE001 - e.g. the global tier is down: fall back
            return f"tier unreadable: {describe_error(exc)}"
        if manifest is None:
            return "not complete on this tier"
        if manifest.world != self.comm.world_size or any(
                manifest.meta.get(k) != v for k, v in self.meta.items()):
            return "checkpoint of another layout"
        entry = manifest.entry_for_rank(self.source)
        if entry is None:
            return "manifest does not list this rank"
        return manifest, entry

    def _read_from_tier(self, tier, entry, step: int) -> str | None:
        """Read and verify this rank's file from ``tier``; None on success, else why not.
        Tier errors propagate (the retry policy decides); anything else is a reason."""
        try:
            with tier.open_read(entry.key) as fh:  # a directory tier: a regular file, never a FIFO
                known = reader_size(fh)
                if known is not None and known != entry.size:  # before a byte is read
                    return f"size {known} != manifest {entry.size}"
                return self._verify_into_staging(tier.local_path(entry.key), fh, entry, step)
        except (TierError, FileNotFoundError):
            raise
        except Exception as exc:  # noqa: BLE001 - a torn or foreign file falls back
            return f"unreadable: {type(exc).__name__}: {exc}"

    def _verify_into_staging(self, path, fh, entry, step: int) -> str | None:
        """Read the file into the staging buffers and verify size, CRC32C and layout; the live
        state is not touched (``load`` adopts the staging buffers once every rank verified).

        ``fh`` is the tier's reader (emulated bandwidth applies). ``torch.load`` reads the
        structure from ``path`` when the tier has files, else from ``fh`` itself, which must
        then seek: an S3 object is read with a few small ranged GETs, nothing goes to disk."""
        if path is None and not fh.seekable():
            return "unreadable: the tier's reader cannot seek (a tier without files needs one)"
        if path is None:  # no file to parse in place (S3): first as the run's writer lays it out
            planned = self._read_as_written(fh, entry, step)
            if planned is not _OTHER_LAYOUT:
                return planned
            fh.seek(0)
        if path is None and hasattr(fh, "will_read_all"):
            fh.will_read_all()  # S3: the structure's GETs and the body's in parallel (tiers/s3_stream.py)
        try:  # structure and tensor offsets only, no data; trusted only once the bytes verify
            meta = torch.load(path if path is not None else fh, map_location="meta", weights_only=True)
            self._check_shapes(meta)
            spans, bad = self._spans(meta), None
        except Exception as exc:  # noqa: BLE001 - a damaged file: the checksum says so first
            meta, spans, bad = None, None, exc
        if path is None:
            fh.seek(0)
        gaps = [] if self.keep_plan else None
        # never more than the manifest's size, never longer than checkpoint.read_timeout_s
        body = BoundedReader(fh, entry.size, timeout_s=self.read_timeout_s, what=entry.key)
        # the device streams the file from its first byte on, while this rank checksums and copies (not
        # from the load's start: the listing, manifest and structure before it are the software's, once)
        begun = time.time()
        with anchored_at(begun):
            crc, size = _read_into(body, spans, gaps) if spans is not None else crc_of_stream(body, self._buf)
        self._stream = (begun, time.time())  # the file's bytes streamed (wall clock)
        if (wrong := _against_manifest(body, size, crc, entry)) is not None:
            return wrong
        if bad is not None:  # intact bytes, but not this rank's layout
            raise bad
        if meta.get("step") != step or meta.get("rank") != self.source:
            return "file belongs to another step or rank"
        self.plan = (spans, gaps, size) if gaps is not None and spans is not None else None
        if spans is None:  # a torch without storage offsets: load again (mapped if a file) into staging
            if path is None:
                fh.seek(0)
            loaded = torch.load(fh if path is None else path, mmap=path is not None, weights_only=True)
            self.state.fill_staging(loaded)
            del loaded
        return None

    def _read_as_written(self, fh, entry, step: int):
        """Read the file in one pass as this run's writer lays it out for ``step``
        (emulator/checkpoint/file_plan.py): None on success, else why not, or ``_OTHER_LAYOUT`` when
        it is intact but laid out otherwise (read again the general way)."""
        if hasattr(fh, "will_read_all"):
            fh.will_read_all(structure=False)  # S3: one GET, first to last byte, asked for as the plan is made
        plan = expected_layout(self.state, step)
        if plan is None or plan.size != entry.size:
            return _OTHER_LAYOUT
        body = BoundedReader(fh, entry.size, timeout_s=self.read_timeout_s, what=entry.key)
        gaps, begun = [], time.time()
        with anchored_at(begun):
            crc, size = _read_into(body, plan.spans, gaps)
        self._stream = (begun, time.time())
        if (wrong := _against_manifest(body, size, crc, entry)) is not None:
            return wrong
        if not plan.matches(gaps):
            return _OTHER_LAYOUT
        self.plan = (plan.spans, gaps, size) if self.keep_plan and plan.whole_tensors else None
        return None

    def _spans(self, meta: dict) -> list | None:
        """(file offset, staging tensor) of every tensor, in file order; None if offsets are unknown."""
        spans = []
        for group, tensors in self.state.staging.items():
            for key, dst in tensors.items():
                m = meta[group][key]
                base = getattr(m.untyped_storage(), "_checkpoint_offset", None)
                if base is None or not m.is_contiguous():
                    return None
                spans.append((base + m.storage_offset() * m.element_size(), dst))
        spans.sort(key=lambda s: s[0])
        return spans

    def _check_shapes(self, loaded: dict) -> None:
        """Every live tensor has a counterpart of the same shape and dtype (before anything is copied)."""
        for group, tensors in self.state.live.items():
            src = loaded.get(group)
            if not isinstance(src, dict):
                raise ValueError(f"no {group} state")
            for key, t in tensors.items():
                s = src.get(key)
                if s is None or s.shape != t.shape or s.dtype != t.dtype:
                    raise ValueError(f"{group}.{key} missing or of another shape")


def _read_into(stream, spans: list, gaps: list | None = None) -> tuple[str, int]:
    """CRC32C and length of the whole stream, read once in order: each span's bytes land
    in its tensor, the rest (zip headers, pickle, directory; small) is read as bytes
    (and kept as (offset, bytes) in ``gaps`` when given: with the tensors, the whole file).

    The CRC32C of each chunk runs on a helper thread (in order: one worker) while the
    next chunk is read, so on two cores the checksum costs no wall time.
    """
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="restore-crc") as pool:
        reader = _CrcReader(stream, pool, gaps)
        complete = True
        for offset, dst in spans:
            if offset < reader.pos:
                raise ValueError("tensors overlap in the file")
            if not (reader.skip_to(offset) and reader.fill(memoryview(dst.view(-1).view(torch.uint8).numpy()))):
                complete = False  # shorter than its own index says: the size check fails
                break
        if complete:
            reader.skip_to(None)
        return reader.result()


class _CrcReader:
    """A sequential reader that checksums everything it reads, the CRC on a helper thread."""

    def __init__(self, stream, pool, gaps: list | None = None):
        self.stream, self.pool, self.gaps = stream, pool, gaps
        self.pos, self._crc, self._jobs = 0, 0, []

    def _add(self, data) -> None:  # crc32c releases the GIL; one worker keeps the order
        self._crc = crc32c.crc32c(data, self._crc)

    def skip_to(self, offset: int | None) -> bool:
        """Read (and checksum) up to ``offset``, or to the end with None; False if it ends first."""
        while offset is None or self.pos < offset:
            data = self.stream.read(READ_CHUNK if offset is None else min(READ_CHUNK, offset - self.pos))
            if not data:
                return offset is None
            self._jobs.append(self.pool.submit(self._add, data))
            if self.gaps is not None:
                self.gaps.append((self.pos, data))
            self.pos += len(data)
        return True

    def fill(self, target: memoryview) -> bool:
        """Read straight into ``target`` (a tensor's bytes: never reused, so no copy is needed)."""
        got = 0
        while got < len(target):
            part = target[got:got + READ_CHUNK]
            n = self.stream.readinto(part) or 0
            if n == 0:
                return False
            self._jobs.append(self.pool.submit(self._add, part[:n]))
            got, self.pos = got + n, self.pos + n
        return True

    def result(self) -> tuple[str, int]:
        for job in self._jobs:
            job.result()
        return format_crc(self._crc), self.pos


def device_seconds(everyone: list, wall: float, seconds: float) -> float:
    """Of a rank's load from ``wall`` for ``seconds``, the time some node's paced reads covered
    (``everyone``: every rank's (seconds, bytes, node, paced spans)): a node's ranks read through one
    device, and every node waits for the slowest node's (the restart needs every rank), so a rank
    done early waits for device time, not for its host or its software."""
    return paced.covered([s for *_, spans in everyone for s in spans], wall, wall + seconds)
