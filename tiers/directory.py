"""A tier that is a directory: node-local NVMe, or a parallel file system mount.

Every object is a file under ``root``; writes go to a hidden ``.partial``
sibling, are fsynced, renamed into place and the directory fsynced, so a crash
leaves either the old object or the new one, plus partials that
``recover_after_crash`` removes. Small objects (manifests) go through aiofiles
on the caller's event loop; bulk bytes through the kernel (``tiers.fileops``).

With ``recycle`` (the memory tier's default), a deleted file moves into a
bounded pool folder (``POOL_DIR``) and the next ``open_write`` takes one from
it, overwriting it in place: on tmpfs a new file's pages must be allocated and
zeroed at every checkpoint, a reused one's are already there (as DLRover's
flash checkpoint and NVRx keep their shared memory). The taken file is renamed
to a partial first, so publishing and crashes behave exactly as without. The
tier keeps each reused file mapped (``tiers.mapped``), so a rewrite is a memcpy
into pages already in this process's page tables, not a write() per page. One
difference: a reader still holding a deleted file open may see it overwritten
(an unlinked file would stay intact); retention never deletes the checkpoint a
drain reads, and a restore verifies size and CRC32C before it adopts anything.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Optional

import aiofiles
import aiofiles.os

from .base import Claim, OptionError, Sink, Tier, TierError, TierScope, validate_key, validate_prefix
from .copycrc import copy_crc32c
from .fileops import (as_bytes, copy_file_durable, fs_type, fsync_dir, is_partial, make_dirs, partial_path,
                      publish, remove_empty_dirs, remove_file, write_all)
from .locking import INTERNAL_FILES, claim_dir, join_dir
from .mapped import MapCache


class DirSink(Sink):
    """Writes straight to a hidden partial file (unbuffered: torch.save hands over whole tensors)."""

    def __init__(self, final: Path, pool: Optional["FilePool"] = None, prefer=None):
        make_dirs(final.parent)
        self._final = final
        self._tmp = partial_path(final)
        reused = pool is not None and pool.take(self._tmp, prefer)
        # a reused file is overwritten from offset 0, no O_TRUNC: its pages stay allocated
        self._file = open(self._tmp, "r+b" if reused else "xb", buffering=0)
        self._reused = reused
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
            if self._reused:  # cut what is left of the file's earlier, longer life
                os.ftruncate(self._file.fileno(), self.bytes_written)
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


class MappedSink(DirSink):
    """A recycling tier's sink: the bytes that fall inside a reused file's old size are copied into
    a shared mapping of it that the tier keeps (``tiers.mapped``), the rest are written after them.
    Same partial, same commit (cut to size, fsync, rename, fsync dir), same abort."""

    def __init__(self, final: Path, pool: "FilePool", maps: MapCache):
        super().__init__(final, pool, prefer=maps.holds)
        self._maps = maps
        self._map, self._room = self._mapping() if self._reused else (None, 0)
        self.bytes_mapped = 0

    def _mapping(self):
        try:
            return self._maps.take(self._file.fileno())
        except OSError:  # cannot map (address space, a limit): write() it all, as without
            return None, 0

    def write(self, data) -> int:
        view = as_bytes(data)
        pos, n = self.bytes_written, len(view)
        k = self.copy_room(n)
        if k:
            self._map.mm[pos:pos + k] = view[:k]  # a memcpy into pages already mapped
            self.bytes_mapped += k
        if k < n:
            os.lseek(self._file.fileno(), pos + k, os.SEEK_SET)
            write_all(self._file.fileno(), view[k:])
        self.bytes_written += n
        return n

    def copy_with_crc(self, data, crc: int) -> tuple[int, int]:
        """Copy the start of ``data`` that falls inside the mapping, computing its CRC32C
        (continued from ``crc``) in the same pass: (bytes taken, CRC). The rest is for write()."""
        view = as_bytes(data)
        k = self.copy_room(len(view))
        if k:
            crc = copy_crc32c(self._map.mm, self.bytes_written, view[:k], crc)
            self.bytes_mapped += k
            self.bytes_written += k
        return k, crc

    def copy_room(self, n: int) -> int:
        """How many of the next ``n`` bytes fall inside the file's mapping (``copy_with_crc`` takes them)."""
        return max(0, min(n, self._room - self.bytes_written))

    def commit(self) -> None:
        try:
            super().commit()
        except BaseException:
            self._let_go()
            raise
        if self._map is not None:  # published: kept for the file's next write
            self._maps.give_back(self._map)
            self._map = None

    def abort(self) -> None:
        super().abort()
        self._let_go()  # its pages go with the file

    def _let_go(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None


#: filesystems whose files are host memory
RAM_FILESYSTEMS = ("tmpfs", "ramfs")
POOL_DIR = ".recycle"
POOL_SUFFIX = ".pool"


class FilePool:
    """Deleted files kept for their pages: at most ``limit``, the largest (the checkpoint files, not
    manifests). Only the node leader deletes; every rank may take, so a take is an atomic rename
    and a file another process took first is simply skipped. Pool files are never listed."""

    def __init__(self, folder: Path, limit: int):
        self.folder, self.limit = folder, limit

    def files(self) -> list[Path]:
        try:
            return [self.folder / n for n in os.listdir(self.folder) if n.endswith(POOL_SUFFIX)]
        except FileNotFoundError:
            return []

    def take(self, dest: Path, prefer=None) -> bool:
        """Rename a pooled file to ``dest`` (a partial), those for which ``prefer(stat)`` is true
        first (the files this process keeps mapped); False when the pool is empty."""
        files = self.files()
        if prefer is not None:
            files.sort(key=lambda path: not prefer(_stat_or_none(path)))
        for path in files:
            try:
                os.rename(path, dest)
                return True
            except FileNotFoundError:
                continue  # another rank took it
        return False

    def give(self, path: Path) -> None:
        """Keep ``path``'s pages for a later write, or unlink it when the pool already holds
        ``limit`` files as large; durable either way (the folder is fsynced)."""
        make_dirs(self.folder)
        os.rename(path, self.folder / f"{uuid.uuid4().hex}{POOL_SUFFIX}")
        fsync_dir(path.parent)
        held = sorted(self.files(), key=_size_or_zero, reverse=True)
        for extra in held[self.limit:]:
            extra.unlink(missing_ok=True)
        if held[self.limit:]:
            fsync_dir(self.folder)

    def empty(self) -> int:
        files = self.files()
        for path in files:
            path.unlink(missing_ok=True)
        if files:
            fsync_dir(self.folder)
        return len(files)


def _stat_or_none(path: Path) -> Optional[os.stat_result]:
    try:
        return path.stat()
    except FileNotFoundError:
        return None


def _size_or_zero(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


@dataclass(frozen=True)
class DirOptions:
    #: the directory; "{node}" expands to the node's index (per-node folders on a shared machine)
    path: Optional[str] = None
    #: keep deleted files' pages for the next writes (None: off, except on the memory tier)
    recycle: Optional[bool] = None

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
        # the pool holds one checkpoint of this node: one file per rank
        return cls(options.for_node(scope.node), recycle=bool(options.recycle), pool_files=scope.ranks_per_node)

    @classmethod
    def preflight(cls, options: DirOptions, *, need_bytes: int) -> None:
        """Whether node 0's folder can be made and has room, checked without making it: a later
        tier's bad input must leave nothing written."""
        root = Path(options.for_node(0)).expanduser().resolve()
        there = next(p for p in (root, *root.parents) if os.path.lexists(p))
        if not there.is_dir():
            raise TierError(f"cannot create directory tier at {root}: {there} is not a directory")
        if not os.access(there, os.W_OK | os.X_OK):
            raise TierError(f"directory tier {root} is not writable" if there == root
                            else f"cannot create directory tier at {root}: {there} is not writable")
        free = shutil.disk_usage(there).free
        if free < need_bytes:
            raise TierError(f"{root} has {free / 2**30:.2f} GiB free, needs about {need_bytes / 2**30:.2f} GiB")

    def __init__(self, root: str | Path, *, recycle: bool = False, pool_files: int = 1):
        self.root = Path(root).expanduser().resolve()
        self.recycle, self.pool_files = recycle, pool_files
        self._pool = FilePool(self.root / POOL_DIR, pool_files) if recycle else None
        self.maps = MapCache() if recycle else None  # this process's mappings of reused files
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
        for dirpath, dirs, files in os.walk(base):
            rel = os.path.relpath(dirpath, self.root)
            if rel == "." and self._pool is not None and POOL_DIR in dirs:
                dirs.remove(POOL_DIR)
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
        # checkpoint leaves no directory behind; a recycling tier keeps the file's pages
        if self._pool is not None and path.is_file():
            self._pool.give(path)
        remove_file(path, stop_at=self.root)

    def open_write(self, key) -> Sink:
        if self._pool is not None:
            return MappedSink(self._path(key), self._pool, self.maps)
        return DirSink(self._path(key), self._pool)

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
        # a crashed run's pool goes too (its pages back to the host, whether or not this run recycles)
        await asyncio.to_thread(FilePool(self.root / POOL_DIR, 0).empty)
        folders = await asyncio.to_thread(self._remove_empty_folders)
        self._let_go_of_unlinked()
        return f"removed {partials} partial file(s), {folders} empty folder(s)" if partials or folders else ""

    async def clean_up_after_run(self) -> str:
        """A recycling tier gives its pool's pages back to the host: after a run, the tier holds
        its checkpoints and nothing else."""
        if self._pool is None:
            return ""
        n = await asyncio.to_thread(self._pool.empty)
        self._let_go_of_unlinked()
        return f"freed {n} recycled file(s)" if n else ""

    def _let_go_of_unlinked(self) -> None:
        """Unmap the files just removed: a kept mapping would hold their pages."""
        if self.maps is not None:
            self.maps.prune()

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

    @property
    def in_host_memory(self) -> bool:
        try:
            return fs_type(os.stat(self.root).st_dev) in RAM_FILESYSTEMS
        except OSError:
            return False

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
