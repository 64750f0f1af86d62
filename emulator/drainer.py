"""The node drainer: copies a node's complete local checkpoint files to the global tier.

Runs on each node's leader (local rank 0) in the background, with at most
``concurrency`` files in flight (asyncio semaphore). Bytes move through the
tier's bulk door (``put_file``), so a directory-to-directory drain uses the
kernel's copy path and S3 uses multipart uploads. Each copy is verified (size,
or a full CRC32C re-read) before the drain counts as done; the manifest is
written by the caller only after every node's drain succeeded.
"""
from __future__ import annotations

import asyncio
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tiers.base import Tier

from .integrity import crc_of_stream
from .layout import FileEntry


class DrainError(Exception):
    pass


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

    @property
    def seconds(self) -> float:
        return self.end - self.start


class Drainer:
    def __init__(self, source: Tier, dest: Tier, *, concurrency: int = 4, verify: str = "size",
                 metrics=None, node: int = 0):
        self.source, self.dest = source, dest
        self.concurrency, self.verify = concurrency, verify
        self.metrics, self.node = metrics, node

    async def drain(self, entries: list[FileEntry]) -> DrainResult:
        total = sum(e.size for e in entries)
        start = time.time()
        if self.metrics:
            self.metrics.drain_started(total)
        sem = asyncio.Semaphore(self.concurrency)
        result = DrainResult(self.node, True, start, start, files=len(entries))

        async def one(entry: FileEntry):
            async with sem:
                t = time.perf_counter()
                await self._copy(entry)
                await self._verify(entry)
                result.per_file.append((entry.key, time.perf_counter() - t))
                result.bytes += entry.size
                if self.metrics:
                    self.metrics.drain_progress(entry.size)

        try:
            await asyncio.gather(*(one(e) for e in entries))
        except Exception as exc:  # reported to every rank; the checkpoint stays incomplete
            result.ok, result.error = False, f"{type(exc).__name__}: {exc}"
        result.end = time.time()
        if self.metrics:
            if not result.ok:
                self.metrics.drain_progress(total - result.bytes)
            self.metrics.drain_finished(result.seconds, ok=result.ok)
        return result

    async def _copy(self, entry: FileEntry) -> None:
        path = self.source.local_path(entry.key)
        if path is not None and path.is_file():
            await self.dest.put_file(entry.key, path)
            return
        with tempfile.TemporaryDirectory(prefix="ckpt-emu-drain-") as tmp:
            spool = Path(tmp) / "file"
            await self.source.get_file(entry.key, spool)
            await self.dest.put_file(entry.key, spool)

    async def _verify(self, entry: FileEntry) -> None:
        size = await self.dest.size(entry.key)
        if size != entry.size:
            raise DrainError(f"{entry.key}: global copy has {size} bytes, expected {entry.size}")
        if self.verify == "checksum":
            def read_crc():
                with self.dest.open_read(entry.key) as fh:
                    return crc_of_stream(fh)[0]
            crc = await asyncio.to_thread(read_crc)
            if crc != entry.crc32c:
                raise DrainError(f"{entry.key}: global copy checksum {crc} != {entry.crc32c}")
