"""Restore: every rank loads the newest checkpoint that all ranks can load, from the nearest tier.

Candidate steps are the union of complete checkpoints on every tier, newest
first. For a step, each rank tries its tiers fastest first (local, then
global): the manifest must list its file, the file's CRC32C must match while
it is read, and only then is it ``torch.load``-ed (mmap) and copied into the
live tensors. A missing, incomplete or corrupt copy falls back to the next
tier; if any rank cannot load the step at all, every rank moves on to the
previous step together, so ranks never restore different steps.

Nothing a tier does can crash a restore or get loaded unverified: a tier that
cannot be listed or read (an outage) is skipped like an incomplete copy, a
manifest of another layout (world size, preset, scale, parallelism) is not a
candidate, and size or checksum mismatches are counted (``checksum_mismatch``)
before falling back. Live tensors are only overwritten after the file's bytes
verified, so a failed attempt leaves the state untouched.
"""
from __future__ import annotations

import asyncio
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from . import layout
from .faults import Tally, describe_error
from .integrity import crc_of_stream

DROP_CACHES = "/proc/sys/vm/drop_caches"


@dataclass
class LoadRecord:
    rank: int
    node: int
    ok: bool = False
    step: int = -1
    tier: str = ""
    seconds: float = 0.0
    bytes: int = 0
    fallbacks: list = field(default_factory=list)  # "tier@step: reason"

    def to_dict(self) -> dict:
        return asdict(self)


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
                 metrics=None, loop=None, mode: str = "async", meta: dict | None = None, tally: Tally | None = None):
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
        if self.metrics and rec.ok:
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
                with tier.open_read(entry.key) as fh:  # reads through the tier (emulated bandwidth applies)
                    crc, size = crc_of_stream(fh, self._buf)
            else:
                scratch = self.scratch_dir / f"restore-rank{self.comm.rank:05d}.pt"
                scratch.parent.mkdir(parents=True, exist_ok=True)
                self._run(tier.get_file(entry.key, scratch))
                path = scratch
                with open(scratch, "rb") as fh:
                    crc, size = crc_of_stream(fh, self._buf)
            if size != entry.size:
                return f"size {size} != manifest {entry.size}"
            if crc != entry.crc32c:
                return f"checksum mismatch ({crc} != {entry.crc32c})"
            loaded = torch.load(path, mmap=True, weights_only=True)
            if loaded.get("step") != step or loaded.get("rank") != self.comm.rank:
                return "file belongs to another step or rank"
            self._check_shapes(loaded)
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
