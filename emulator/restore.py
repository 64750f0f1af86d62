"""Restore: every rank loads the newest checkpoint that all ranks can load, from the nearest tier.

Candidate steps are the union of complete checkpoints on every tier, newest
first. For a step, each rank tries its tiers fastest first (local, then
global): the manifest must list its file, and the file's CRC32C must match
while it is read. The file is read once: ``torch.load(map_location="meta")``
gives its structure and each tensor's offset (``_checkpoint_offset``), then one
sequential pass through the tier's reader puts every tensor's bytes straight
into the rank's staging buffers (same layout, pages already in use) and the
CRC32C runs over every byte; only if it matches do the staging buffers become
the live state (``RankState.adopt_staging``, a swap, not a copy). (A CRC pass,
then ``torch.load(mmap)`` and a copy, read at 0.6-0.7x ``dd`` here and mapped the
whole file into the process: +1 GiB peak RSS per GiB of state.) A missing,
incomplete or corrupt copy falls back to the next tier; if any rank cannot
load the step at all, every rank moves on to the previous step together, so
ranks never restore different steps.

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
import time
from functools import partial
from pathlib import Path

import crc32c
import torch

from . import layout
from .metrics import NULL_METRICS
from .records import LoadRecord
from .retry import describe_error
from .tally import Tally
from .integrity import READ_CHUNK, crc_of_stream, format_crc

DROP_CACHES = "/proc/sys/vm/drop_caches"


def drop_page_cache() -> bool:
    """Flush dirty pages and drop the page cache; False when not permitted (not root, container)."""
    os.sync()
    try:
        with open(DROP_CACHES, "w") as fh:
            fh.write("3\n")
        return True
    except OSError:
        return False


class Restorer:
    def __init__(self, state, tiers: list[tuple[str, object]], comm, *, scratch_dir: Path,
                 metrics=NULL_METRICS, loop=None, mode: str = "async", meta: dict | None = None, tally: Tally | None = None):
        self.state, self.tiers, self.comm, self.mode = state, tiers, comm, mode
        self.scratch_dir, self.metrics, self.loop = Path(scratch_dir), metrics, loop
        self.meta = meta or {}  # expected manifest meta (preset, scale, tp, ...); {} accepts any
        self.tally = tally or Tally(metrics)
        self.manifest = None  # the manifest of the step restored last (its meta carries the lineage)
        self._buf = bytearray(16 << 20)

    def _run(self, coro):
        return self.loop.run(coro) if self.loop else asyncio.run(coro)

    def candidate_steps(self) -> list[int]:
        mine = set()
        for _, tier in self.tiers:
            try:
                mine |= set(self._run(layout.list_steps(tier))[0])
            except Exception:  # noqa: BLE001 - an unreachable tier offers nothing
                self.tally.count("tier_error")
        union = set()
        for steps in self.comm.all_gather(sorted(mine)):
            union |= set(steps)
        return sorted(union, reverse=True)

    def load(self) -> LoadRecord:
        """Restore the newest loadable checkpoint into the live state (collective)."""
        rec = LoadRecord(self.comm.rank, self.comm.node)
        start = time.perf_counter()
        for step in self.candidate_steps():
            ok = self._try_step(step, rec)
            if self.comm.all_min(1.0 if ok else 0.0) == 1.0:
                rec.ok, rec.step = True, step
                break
        rec.seconds = time.perf_counter() - start
        everyone = self.comm.all_gather((rec.seconds, rec.bytes))
        if rec.ok:
            backend = dict(self.tiers)[rec.tier].backend
            self.metrics.observe_phase("load", rec.tier, rec.seconds, backend=backend)
            self.metrics.add_bytes("read", rec.tier, rec.bytes, backend=backend)
            if self.comm.rank == 0:  # MLPerf style: all bytes / slowest rank
                slowest = max(s for s, _ in everyone)
                self.metrics.set_throughput("load", self.mode, sum(b for _, b in everyone) / max(slowest, 1e-9))
        return rec

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
        try:
            manifest = self._run(layout.read_manifest(tier, step))
        except Exception as exc:  # noqa: BLE001 - e.g. the global tier is down: fall back
            return f"tier unreadable: {describe_error(exc)}"
        if manifest is None:
            return "not complete on this tier"
        if manifest.world != self.comm.world_size or any(
                manifest.meta.get(k) != v for k, v in self.meta.items()):
            return "checkpoint of another layout"
        entry = manifest.entry_for_rank(self.comm.rank)
        if entry is None:
            return "manifest does not list this rank"
        path = tier.local_path(entry.key)
        scratch = None
        try:
            if path is not None:
                if not path.is_file():
                    return "file missing"
                open_read = partial(tier.open_read, entry.key)  # through the tier (emulated bandwidth applies)
            else:
                scratch = self.scratch_dir / f"restore-rank{self.comm.rank:05d}.pt"
                scratch.parent.mkdir(parents=True, exist_ok=True)
                self._run(tier.get_file(entry.key, scratch))
                path = scratch
                open_read = partial(open, scratch, "rb")
            try:  # structure and tensor offsets only, no data; trusted only once the bytes verify
                meta = torch.load(path, map_location="meta", weights_only=True)
                self._check_shapes(meta)
                spans, bad = self._spans(meta), None
            except Exception as exc:  # noqa: BLE001 - a damaged file: the checksum says so first
                meta, spans, bad = None, None, exc
            with open_read() as fh:
                crc, size = _read_into(fh, spans) if spans is not None else crc_of_stream(fh, self._buf)
            if size != entry.size:
                return f"size {size} != manifest {entry.size}"
            if crc != entry.crc32c:
                return f"checksum mismatch ({crc} != {entry.crc32c})"
            if bad is not None:  # intact bytes, but not this rank's layout
                raise bad
            if meta.get("step") != step or meta.get("rank") != self.comm.rank:
                return "file belongs to another step or rank"
            if spans is not None:
                self.state.adopt_staging()  # verified: the staging buffers hold the checkpoint
            else:  # a torch without storage offsets: load again, mapped, and copy
                loaded = torch.load(path, mmap=True, weights_only=True)
                self.state.restore_from(loaded)
                del loaded
        except FileNotFoundError:
            return "file missing"
        except Exception as exc:  # a torn or foreign file must fall back, never crash the restore
            return f"unreadable: {type(exc).__name__}: {exc}"
        finally:
            if scratch is not None:
                scratch.unlink(missing_ok=True)
        rec.tier, rec.bytes = name, entry.size
        self.manifest = manifest
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


def _read_into(stream, spans: list) -> tuple[str, int]:
    """CRC32C and length of the whole stream, read once in order: each span's bytes land
    in its tensor, the rest (zip headers, pickle, directory; small) is read as bytes.

    The CRC32C of each chunk runs on a helper thread (in order: one worker) while the
    next chunk is read, so on two cores the checksum costs no wall time.
    """
    crc = [0]
    pos = 0

    def add(data) -> None:  # crc32c releases the GIL
        crc[0] = crc32c.crc32c(data, crc[0])

    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="restore-crc") as pool:
        jobs = []

        def skip_to(offset: int) -> bool:  # bytes before a tensor: read them, checksum them
            nonlocal pos
            while pos < offset:
                data = stream.read(min(READ_CHUNK, offset - pos))
                if not data:
                    return False
                jobs.append(pool.submit(add, data))
                pos += len(data)
            return True

        def fill(target: memoryview) -> bool:
            nonlocal pos
            got = 0
            while got < len(target):
                part = target[got:got + READ_CHUNK]
                n = stream.readinto(part) or 0
                if n == 0:
                    return False
                jobs.append(pool.submit(add, part[:n]))  # the tensor's memory is not reused: no copy
                got, pos = got + n, pos + n
            return True

        complete = True
        for offset, dst in spans:
            if offset < pos:
                raise ValueError("tensors overlap in the file")
            if not (skip_to(offset) and fill(memoryview(dst.view(-1).view(torch.uint8).numpy()))):
                complete = False  # shorter than its own index says: the size check fails
                break
        while complete:
            data = stream.read(READ_CHUNK)
            if not data:
                break
            jobs.append(pool.submit(add, data))
            pos += len(data)
        for job in jobs:
            job.result()
    return format_crc(crc[0]), pos
