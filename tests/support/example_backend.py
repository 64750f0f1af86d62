"""The examples of docs/extending.md, written with only the steps documented there.

``FlatDirTier``: a backend that keeps every object as one file in a single
folder (key "/" escaped), with one option. ``EveryNthFails``: a fault kind that
makes every Nth request fail like a 503. Both are used by tests/unit/project/test_extending.py,
including a real ``ckpt-emu run`` that names the backend as ``example_backend:FlatDirTier``.
"""
from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Optional
from urllib.parse import quote, unquote

from tiers.base import (OptionError, Sink, Tier, TierError, TierScope, TierWrapper, validate_key,
                        validate_prefix)
from tiers.fileops import copy_file_durable, make_dirs, partial_path, publish, write_all


@dataclass(frozen=True)
class FlatDirOptions:
    #: the folder holding every object
    folder: Optional[str] = None

    def __post_init__(self):
        if not self.folder:
            raise OptionError("folder: a flatdir tier needs a folder")


class _FlatSink(Sink):
    def __init__(self, final: Path):
        self._final, self._tmp = final, partial_path(final)
        self._fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        self.bytes_written = 0

    def write(self, data) -> int:
        n = write_all(self._fd, data)
        self.bytes_written += n
        return n

    def commit(self) -> None:
        try:
            publish(self._tmp, self._final, self._fd)
        finally:
            os.close(self._fd)

    def abort(self) -> None:
        os.close(self._fd)
        self._tmp.unlink(missing_ok=True)


class FlatDirTier(Tier):
    backend = "flatdir"
    Options = FlatDirOptions

    def __init__(self, folder):
        self.folder = Path(folder)
        make_dirs(self.folder)

    @classmethod
    def from_options(cls, options: FlatDirOptions, *, scope: TierScope) -> "FlatDirTier":
        return cls(options.folder.replace("{node}", str(scope.node)))

    @classmethod
    def preflight(cls, options: FlatDirOptions, *, need_bytes: int) -> None:
        if not os.access(Path(options.folder).parent, os.W_OK):
            raise TierError(f"flatdir {options.folder}: not writable")

    def _path(self, key: str) -> Path:
        return self.folder / quote(validate_key(key), safe="")

    async def put(self, key, data) -> None:
        await asyncio.to_thread(self._put, key, data)

    def _put(self, key, data) -> None:
        with self.open_write(key) as sink:
            sink.write(data)

    async def get(self, key) -> bytes:
        return await asyncio.to_thread(self._path(key).read_bytes)

    async def put_file(self, key, src) -> None:
        await asyncio.to_thread(copy_file_durable, Path(src), self._path(key))

    async def get_file(self, key, dest) -> None:
        if not self._path(key).is_file():
            raise FileNotFoundError(key)
        await asyncio.to_thread(copy_file_durable, self._path(key), Path(dest))

    async def size(self, key) -> int | None:
        path = self._path(key)
        return path.stat().st_size if path.is_file() else None

    async def list(self, prefix: str = "") -> list[str]:
        validate_prefix(prefix)
        keys = (unquote(p.name) for p in self.folder.iterdir() if not p.name.startswith("."))
        return sorted(k for k in keys if k.startswith(prefix))

    async def delete(self, key) -> None:
        self._path(key).unlink(missing_ok=True)

    def open_write(self, key) -> Sink:
        return _FlatSink(self._path(key))

    def open_read(self, key) -> BinaryIO:
        return open(self._path(key), "rb")

    def describe(self) -> str:
        return f"flatdir:{self.folder}"


class EveryNthFails(TierWrapper):
    """A fault kind: every ``n``-th request fails like a 503 (a transient error the drain retries)."""

    def __init__(self, inner: Tier, n: int = 3):
        super().__init__(inner)
        self.n, self.requests = n, 0

    def request_error(self, what: str):
        self.requests += 1
        if self.requests % self.n == 0:
            return TierError(f"every-nth fault: {what}: 503 Service Unavailable")
        return None
