"""A tier that is a directory: node-local NVMe, or a parallel file system mount.

Every object is a file under ``root``; writes go to a hidden ``.partial``
sibling, are fsynced, renamed into place and the directory fsynced, so a crash
leaves either the old object or the new one, plus partials that
``sweep_partials`` removes.
"""
from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import BinaryIO

from .base import Sink, Tier, TierError, validate_key, validate_prefix
from .fileops import copy_file_durable, is_partial, make_dirs, partial_path, publish, remove_file, write_all


class DirSink(Sink):
    """Writes straight to a hidden partial file (unbuffered: torch.save hands over whole tensors)."""

    def __init__(self, final: Path):
        make_dirs(final.parent)
        self._final = final
        self._tmp = partial_path(final)
        self._file = open(self._tmp, "xb", buffering=0)
        self.bytes_written = 0
        self._done = False

    def write(self, data) -> int:
        n = write_all(self._file.fileno(), data)  # one write() stops at ~2 GiB: loop
        self.bytes_written += n
        return n

    def fileno(self) -> int:
        return self._file.fileno()

    def commit(self) -> None:
        if self._done:
            return
        self._done = True
        try:
            publish(self._tmp, self._final, self._file.fileno())
        except BaseException:
            self._file.close()
            self._tmp.unlink(missing_ok=True)
            raise
        self._file.close()

    def abort(self) -> None:
        if self._done:
            return
        self._done = True
        self._file.close()
        self._tmp.unlink(missing_ok=True)


class DirTier(Tier):
    backend = "dir"

    def __init__(self, root: str | Path):
        self.root = Path(root).expanduser().resolve()
        try:
            make_dirs(self.root)
        except OSError as exc:
            raise TierError(f"cannot create directory tier at {self.root}: {exc.strerror}") from exc
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise TierError(f"directory tier {self.root} is not writable")

    def _path(self, key: str) -> Path:
        return self.root / validate_key(key)

    async def put(self, key, data) -> None:
        await asyncio.to_thread(self._put_sync, key, data)

    def _put_sync(self, key, data) -> None:
        with self.open_write(key) as sink:
            sink.write(data)

    async def get(self, key) -> bytes:
        return await asyncio.to_thread(self._path(key).read_bytes)

    async def put_file(self, key, src) -> None:
        await asyncio.to_thread(copy_file_durable, Path(src), self._path(key))

    async def get_file(self, key, dest) -> None:
        path = self._path(key)
        if not path.is_file():
            raise FileNotFoundError(key)
        await asyncio.to_thread(copy_file_durable, path, Path(dest))

    async def size(self, key) -> int | None:
        try:
            st = self._path(key).stat()
        except FileNotFoundError:
            return None
        return st.st_size

    async def list(self, prefix: str = "") -> list[str]:
        validate_prefix(prefix)
        return await asyncio.to_thread(self._list_sync, prefix)

    def _list_sync(self, prefix: str) -> list[str]:
        # walk only the deepest directory the prefix names, not the whole tree
        base = self.root / prefix.rsplit("/", 1)[0] if "/" in prefix else self.root
        keys = []
        for dirpath, _dirs, files in os.walk(base):
            rel = os.path.relpath(dirpath, self.root)
            for name in files:
                if is_partial(name):
                    continue
                key = name if rel == "." else f"{rel}/{name}"
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    async def delete(self, key) -> None:
        path = self._path(key)
        await asyncio.to_thread(self._delete_sync, path)

    def _delete_sync(self, path: Path) -> None:
        # durable (the folder is fsynced), and empty parent folders go too, so a deleted
        # checkpoint leaves no directory behind
        remove_file(path, stop_at=self.root)

    def open_write(self, key) -> Sink:
        return DirSink(self._path(key))

    def open_read(self, key) -> BinaryIO:
        return open(self._path(key), "rb")

    def local_path(self, key) -> Path | None:
        return self._path(key)

    def sweep_partials(self) -> int:
        """Remove ``.partial`` files left by a crash; returns how many were removed."""
        removed = 0
        for dirpath, _dirs, files in os.walk(self.root):
            for name in files:
                if is_partial(name):
                    Path(dirpath, name).unlink(missing_ok=True)
                    removed += 1
        return removed

    def describe(self) -> str:
        return f"dir:{self.root}"
