"""A tier that is a directory: node-local NVMe, or a parallel file system mount.

Every object is a file under ``root``; writes go to a hidden ``.partial``
sibling, are fsynced, renamed into place and the directory fsynced, so a crash
leaves either the old object or the new one, plus partials that
``recover_after_crash`` removes. Small objects (manifests) go through aiofiles
on the caller's event loop; bulk bytes through the kernel (``tiers.fileops``).
"""
from __future__ import annotations

import asyncio
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Optional

import aiofiles
import aiofiles.os

from .base import Claim, OptionError, Sink, Tier, TierError, TierScope, validate_key, validate_prefix
from .fileops import (copy_file_durable, fs_type, is_partial, make_dirs, partial_path, publish,
                      remove_empty_dirs, remove_file, write_all)
from .locking import INTERNAL_FILES, claim_dir, join_dir


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


@dataclass(frozen=True)
class DirOptions:
    #: the directory; "{node}" expands to the node's index (per-node folders on a shared machine)
    path: Optional[str] = None

    def __post_init__(self):
        if not self.path:
            raise OptionError("path: a dir tier needs a path")

    def for_node(self, node: int) -> str:
        return self.path.replace("{node}", str(node))


class DirTier(Tier):
    backend = "dir"
    Options = DirOptions

    @classmethod
    def from_options(cls, options: DirOptions, *, scope: TierScope) -> "DirTier":
        return cls(options.for_node(scope.node))

    @classmethod
    def preflight(cls, options: DirOptions, *, need_bytes: int) -> None:
        tier = cls(options.for_node(0))
        free = shutil.disk_usage(tier.root).free
        if free < need_bytes:
            raise TierError(f"{tier.root} has {free / 2**30:.2f} GiB free, needs about {need_bytes / 2**30:.2f} GiB")

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
        final = self._path(key)
        await aiofiles.os.wrap(make_dirs)(final.parent)
        tmp = partial_path(final)
        try:
            async with aiofiles.open(tmp, "xb") as fh:
                await fh.write(data)  # a buffered file: writes every byte
                await fh.flush()
                await aiofiles.os.wrap(publish)(tmp, final, fh.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    async def get(self, key) -> bytes:
        async with aiofiles.open(self._path(key), "rb") as fh:
            return await fh.read()

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
                if is_partial(name) or (rel == "." and name in INTERNAL_FILES):
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

    def claim(self, holder) -> Claim:
        return claim_dir(self.root, holder, what=f"dir tier {self.root}")

    def join(self) -> Claim:
        return join_dir(self.root, what=f"dir tier {self.root}")

    async def recover_after_crash(self) -> str:
        partials = await asyncio.to_thread(self.sweep_partials)
        folders = await asyncio.to_thread(self._remove_empty_folders)
        return f"removed {partials} partial file(s), {folders} empty folder(s)" if partials or folders else ""

    def _remove_empty_folders(self) -> int:
        """Folders a crash left empty (deepest first, so emptied parents go too)."""
        folders = sorted((Path(d) for d, _, _ in os.walk(self.root)), key=lambda p: len(p.parts), reverse=True)
        return sum(remove_empty_dirs(f, stop_at=self.root) for f in folders if f.is_dir())

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
        """The folder and what holds its bytes (``on tmpfs, host memory``, ``on ext4``): a tier
        emulated on memory can be paced to a device faster than this host's disk."""
        return f"dir:{self.root}{_backing(self.root)}"


def _backing(root: Path) -> str:
    try:
        fs = fs_type(os.stat(root).st_dev)
    except OSError:
        return ""
    if not fs:
        return ""
    return " (on tmpfs, host memory)" if fs == "tmpfs" else f" (on {fs})"
