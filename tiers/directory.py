"""A tier that is a directory: node-local NVMe, or a parallel file system mount.

Every object is a file under ``root``; writes go to a hidden ``.partial``
sibling, are fsynced, renamed into place and the directory fsynced, so a crash
leaves either the old object or the new one, plus partials that
``recover_after_crash`` removes; every partial is made, renamed and removed through
its folder's descriptor (``tiers.safepath.Folder``). Small objects (manifests) are written in a
worker thread; bulk bytes go through the kernel (``tiers.fileops``).

With ``recycle`` (the memory tier's default), a deleted file moves into a
bounded pool folder (``POOL_DIR``, tiers/filepool.py) and the next ``open_write`` takes one from
it, overwriting it in place: on tmpfs a new file's pages must be allocated and
zeroed at every checkpoint, a reused one's are already there (as DLRover's
flash checkpoint and NVRx keep their shared memory). The taken file is renamed
to a partial first, so publishing and crashes behave exactly as without. The
tier keeps each reused file mapped (``tiers.mapped``), so a rewrite is a memcpy
into pages already in this process's page tables, not a write() per page. One
difference: a reader still holding a deleted file open may see it overwritten
(an unlinked file would stay intact); retention never deletes the checkpoint a
drain reads, and a restore verifies size and CRC32C before it adopts anything.

On a shared machine (docs/security.md) the tier's folder is reached and held by
its descriptor (``tiers.safepath``): made 0700, never another user's, never
through their link; step folders are made with ``mkdir`` and a link there is
refused; files are read only if regular. It touches only its own names: crash
recovery removes its partials at the top level and one level inside its
checkpoint folders, and those folders once empty, nothing else; a claim
refuses a folder holding names it did not make (``allow_foreign`` accepts it).
A folder that goes while the run holds it is never made again (``TierLost``).
"""
from __future__ import annotations

import asyncio
import os
import re
import shutil
import stat
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Optional

from .base import Claim, OptionError, Sink, Tier, TierError, TierScope, UnsafePath, validate_key, validate_prefix
from .copycrc import copy_crc32c
from .fileops import (ReadBack, as_bytes, copy_file_durable, fs_type, is_partial, open_regular,
                      partial_path, remove_empty_dirs, remove_file, write_all)
from .filepool import POOL_DIR, FilePool
from .locking import INTERNAL_FILES, WAIT_FOR_ENDED_RUN_S, busy_holder, claim_dir, join_dir
from .mapped import MapCache
from .safepath import Folder, check_reach, is_own_file, path_problem, reach


class DirSink(Sink):
    """Writes straight to a hidden partial file (unbuffered: torch.save hands over whole tensors)
    in a folder the tier made and checked (``DirTier._folder_of``), held by its descriptor, which
    the sink owns: the partial is made, renamed and removed through it, never by path."""

    def __init__(self, final: Path, folder: Folder, pool: Optional["FilePool"] = None, prefer=None):
        self._final, self._folder = final, folder
        self._tmp = partial_path(final)
        reused = pool is not None and pool.take(self._tmp, prefer)
        # a reused file is overwritten from offset 0, no O_TRUNC: its pages stay allocated
        self._file = _reopened(folder, self._tmp.name) if reused else None
        self._reused = self._file is not None
        if self._file is None:
            self._file = open(folder.create_new(self._tmp.name, 0o666), "wb", buffering=0)
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
            self._folder.publish(self._tmp.name, self._final.name, self._file.fileno())
        except BaseException:
            self._file.close()
            self._folder.discard(self._tmp.name)
            self._folder.close()
            raise
        self._file.close()
        self._folder.close()

    def abort(self) -> None:
        if self._done:
            return
        self._done = True
        self._file.close()
        self._folder.discard(self._tmp.name)
        self._folder.close()


class MappedSink(DirSink):
    """A recycling tier's sink: the bytes that fall inside a reused file's old size are copied into
    a shared mapping of it that the tier keeps (``tiers.mapped``), the rest are written after them.
    Same partial, same commit (cut to size, fsync, rename, fsync dir), same abort."""

    def __init__(self, final: Path, folder: Folder, pool: "FilePool", maps: MapCache):
        super().__init__(final, folder, pool, prefer=maps.holds)
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


def _reopened(folder: Folder, tmp: str):
    """A pooled file just renamed to ``tmp`` in ``folder``, opened to be overwritten: only a regular
    file of this user's with one name (else its name is dropped, and None: the caller makes a new file)."""
    try:
        fd = folder.open_own(tmp, os.O_RDWR, what="recycled file")
    except (UnsafePath, OSError):
        folder.discard(tmp)
        return None
    return open(fd, "r+b", buffering=0)


#: a checkpoint folder at a tier's top level: the emulator's ``step_<digits>``
#: (emulator/checkpoint/layout.py) and MLPerf's ``global_epoch<E>_step<N>`` (emulator/mlperf/protocol.py)
CHECKPOINT_FOLDER = re.compile(r"^(step_\d+|global_epoch\d+_step\d+)$")
#: names at a tier's top level the tool never made but may find, and leaves alone (a mount point's)
HARMLESS = frozenset({"lost+found"})


def is_own_top_name(name: str) -> bool:
    """Whether a tier's top-level ``name`` is one this tool makes there."""
    return bool(CHECKPOINT_FOLDER.match(name)) or name in INTERNAL_FILES or name == POOL_DIR or is_partial(name)


class TierLost(TierError):
    """The tier's folder went away (or was replaced) while the run held it: never made again."""

    def __init__(self, *args):
        super().__init__(*args, transient=False)


@dataclass(frozen=True)
class DirOptions:
    #: the directory; "{node}" expands to the node's index (per-node folders on a shared machine),
    #: "{uid}" to this user's id (a per-user folder in a shared place such as /dev/shm),
    #: "{tiers_dir}" to the user's default tier folder (:func:`tiers_dir`)
    path: Optional[str] = None
    #: keep deleted files' pages for the next writes (None: off, except on the memory tier)
    recycle: Optional[bool] = None
    #: use a folder that holds names this tool did not make (a project folder); the tool still
    #: touches only its own names there. Off: such a folder is refused before the run starts
    allow_foreign: bool = False

    def __post_init__(self):
        if not self.path:
            raise OptionError("path: a dir tier needs a path")
        problem = path_problem(self.path)
        if problem is not None:
            raise OptionError(f"path: {problem}")

    def for_node(self, node: int) -> str:
        return expand_path(self.path, node)


#: moves the folder the shipped configs keep their tiers in (``{tiers_dir}``): a test suite sets
#: it per test, so its runs never meet a run of the same user's beside it
TIERS_DIR_ENV = "CKPT_EMU_TIERS_DIR"
DEFAULT_TIERS_DIR = "/dev/shm/ckpt-emu-{uid}"


def tiers_dir() -> str:
    """The user's default tier folder: ``$CKPT_EMU_TIERS_DIR``, else ``/dev/shm/ckpt-emu-{uid}``."""
    return os.path.expanduser(os.environ.get(TIERS_DIR_ENV) or DEFAULT_TIERS_DIR)


def expand_path(path: str, node: int) -> str:
    """``{tiers_dir}``, ``{node}`` and ``{uid}`` of a dir tier's path, for this node and user."""
    path = path.replace("{tiers_dir}", tiers_dir())
    return path.replace("{node}", str(node)).replace("{uid}", str(os.geteuid()))


class DirTier(Tier):
    backend = "dir"
    Options = DirOptions

    @classmethod
    def from_options(cls, options: DirOptions, *, scope: TierScope) -> "DirTier":
        # the pool holds one checkpoint of this node: one file per rank
        return cls(options.for_node(scope.node), recycle=bool(options.recycle), pool_files=scope.ranks_per_node,
                   allow_foreign=options.allow_foreign)

    @classmethod
    def preflight(cls, options: DirOptions, *, need_bytes: int) -> None:
        """Whether node 0's folder can be reached safely, made, holds nothing foreign and has room,
        checked without making or writing anything: a later tier's bad input must leave nothing
        written. (Whether another run holds it: ``busy``.)"""
        wanted = Path(options.for_node(0)).expanduser()
        what = f"dir tier {wanted}"
        try:
            there, missing = check_reach(wanted, what=what)
        except NotADirectoryError as exc:
            raise TierError(f"cannot create directory tier at {wanted}: {exc.filename} is not a directory") from None
        root = there.joinpath(*missing)
        if not os.access(there, os.W_OK | os.X_OK):
            raise TierError(f"directory tier {root} is not writable" if not missing
                            else f"cannot create directory tier at {root}: {there} is not writable")
        if not missing and not options.allow_foreign:
            _refuse_foreign(root, os.listdir(root))
        free = shutil.disk_usage(there).free
        if free < need_bytes:
            raise TierError(f"{root} has {free / 2**30:.2f} GiB free, needs about {need_bytes / 2**30:.2f} GiB")

    @staticmethod
    def busy(options: DirOptions, node: int = 0):
        """The holder (``tiers.locking.Holder``) of the run that holds node ``node``'s folder now, or
        None (after waiting for a run whose launcher ended); checked without making or writing anything."""
        return busy_holder(Path(options.for_node(node)).expanduser(), wait_ending_s=WAIT_FOR_ENDED_RUN_S)

    def __init__(self, root: str | Path, *, recycle: bool = False, pool_files: int = 1, allow_foreign: bool = False):
        wanted = Path(root).expanduser()
        try:  # made 0700, held by its descriptor: the path must keep naming this folder (``_live``)
            self._folder = reach(wanted, create=True, mode=0o700, what=f"dir tier {wanted}")
        except NotADirectoryError as exc:
            raise TierError(f"cannot create directory tier at {wanted}: {exc.filename} is not a directory") from None
        except OSError as exc:
            raise TierError(f"cannot create directory tier at {wanted}: {exc.strerror}") from exc
        weakref.finalize(self, self._folder.close)
        self.root = Path(self._folder.path)
        self.recycle, self.pool_files, self.allow_foreign = recycle, pool_files, allow_foreign
        self._pool = FilePool(self._folder, pool_files) if recycle else None
        self.maps = MapCache() if recycle else None  # this process's mappings of reused files
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise TierError(f"directory tier {self.root} is not writable")

    def check_live(self) -> None:
        """The tier's path still names the folder it opened; TierLost (and nothing written) if not."""
        why = self._folder.still_there()
        if why is not None:
            raise TierLost(f"dir tier {self.root} {why} during the run; it is never made again under a run")

    def _path(self, key: str) -> Path:
        return self.root / validate_key(key)

    @contextmanager
    def _folder_of(self, key: str, *, create: bool = True):
        """The folder ``key`` lives in, made (0700) and checked one level at a time from the tier's
        own folder: a level that is a link or another user's is refused (UnsafePath)."""
        self.check_live()
        folder, opened = self._folder, []
        try:
            for part in validate_key(key).split("/")[:-1]:
                folder = folder.subfolder(part, create=create, what=f"dir tier {self.root}")
                opened.append(folder)
            yield folder
        finally:
            for f in opened:
                f.close()

    async def put(self, key, data) -> None:
        await asyncio.to_thread(self._put_sync, key, data)

    def _put_sync(self, key, data) -> None:
        with self._folder_of(key) as folder:  # a partial renamed into place, by the folder's descriptor
            folder.write_file(self._path(key).name, data, mode=0o666)

    def _make_folder(self, key: str) -> None:
        with self._folder_of(key):
            pass

    async def get(self, key) -> bytes:
        return await asyncio.to_thread(self._get_sync, key)

    def _get_sync(self, key) -> bytes:
        with open(self._open_fd(key), "rb") as fh:
            return fh.read()

    def _open_fd(self, key) -> int:
        """A descriptor to read ``key``: a regular file, never a link, a FIFO or a device."""
        self.check_live()
        return open_regular(self._path(key), what=f"dir tier {self.root}")

    async def put_file(self, key, src) -> None:
        await asyncio.to_thread(self._put_file_sync, key, Path(src))

    def _put_file_sync(self, key, src: Path, read_back: ReadBack | None = None) -> None:
        with self._folder_of(key):
            copy_file_durable(src, self._path(key), read_back=read_back)

    async def put_file_read_back(self, key, src) -> tuple[int, int]:
        """The copy read back from its own file a chunk behind the copy, beside it (tiers.fileops)."""
        reader = ReadBack()
        await asyncio.to_thread(self._put_file_sync, key, Path(src), reader)
        return reader.crc, reader.bytes

    async def get_file(self, key, dest) -> None:
        path = self._path(key)
        if await self.size(key) is None:
            raise FileNotFoundError(key)
        await asyncio.to_thread(copy_file_durable, path, Path(dest))

    async def size(self, key) -> int | None:
        try:
            st = self._path(key).stat(follow_symlinks=False)
        except FileNotFoundError:
            return None
        return st.st_size if stat.S_ISREG(st.st_mode) else None

    async def list(self, prefix: str = "") -> list[str]:
        validate_prefix(prefix)
        return await asyncio.to_thread(self._list_sync, prefix)

    def _list_sync(self, prefix: str) -> list[str]:
        """Every regular file under the tier's own folders, never through a link or into another
        user's folder; only the folders the prefix can reach are read."""
        self.check_live()
        keys: list[str] = []
        self._list_in(self._folder, "", prefix, keys)
        return sorted(keys)

    def _list_in(self, folder: Folder, rel: str, prefix: str, keys: list) -> None:
        for name in folder.listdir():
            key = rel + name
            if not rel and (name in INTERNAL_FILES or (self._pool is not None and name == POOL_DIR)):
                continue
            st = folder.lstat(name)
            if st is None or is_partial(name):
                continue
            if stat.S_ISREG(st.st_mode) and key.startswith(prefix):
                keys.append(key)
            elif stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and \
                    (key + "/").startswith(prefix[:len(key) + 1]):
                try:
                    with folder.subfolder(name, create=False) as sub:
                        self._list_in(sub, key + "/", prefix, keys)
                except (FileNotFoundError, UnsafePath):
                    continue  # gone meanwhile, or not the tool's

    async def delete(self, key) -> None:
        await asyncio.to_thread(self._delete_sync, key)

    def _delete_sync(self, key: str) -> None:
        """Durable (the folder is fsynced), and empty parent folders go too, so a deleted checkpoint
        leaves no directory behind; a recycling tier keeps the file's pages. A key whose folder is
        not the tool's own (a link, another user's) is no object of this tier: nothing to delete."""
        path = self._path(key)
        try:
            with self._folder_of(key, create=False) as folder:
                st = folder.lstat(path.name)
                if st is not None and stat.S_ISREG(st.st_mode) and st.st_uid != os.geteuid():
                    return  # another user's file: not an object this run made
                if self._pool is not None and st is not None and is_own_file(st):
                    self._pool.give(path)  # moved into the pool (its name is gone), or not (unlinked below)
        except (FileNotFoundError, UnsafePath):
            return
        remove_file(path, stop_at=self.root)

    def open_write(self, key) -> Sink:
        with self._folder_of(key) as folder:
            held = Folder(os.dup(folder.fd), folder.path)  # the sink's own, closed when it ends
        try:
            if self._pool is not None:
                return MappedSink(self._path(key), held, self._pool, self.maps)
            return DirSink(self._path(key), held, self._pool)
        except BaseException:
            held.close()
            raise

    def open_read(self, key) -> BinaryIO:
        return open(self._open_fd(key), "rb")

    def local_path(self, key) -> Path | None:
        return self._path(key)

    def claim(self, holder) -> Claim:
        """Own the folder for this run: refused when it holds names the tool did not make (unless
        ``allow_foreign``), then its locks (tiers/locking.py), held with the folder's descriptor."""
        self.check_live()
        if not self.allow_foreign:
            _refuse_foreign(self.root, self._folder.listdir())
        return claim_dir(self._folder, holder, what=f"dir tier {self.root}")

    def join(self) -> Claim:
        return join_dir(self._folder, what=f"dir tier {self.root}", job=_job())

    async def recover_after_crash(self) -> str:
        partials, folders = await asyncio.to_thread(self._sweep)
        # a crashed run's pool goes too (its pages back to the host, whether or not this run recycles)
        await asyncio.to_thread(FilePool(self._folder, 0).empty)
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

    def _sweep(self) -> tuple[int, int]:
        """What a crash left, by the tool's own names only: its partials at the top level and in
        its checkpoint folders (one level, never deeper), then those folders if left empty. Nothing
        else in the folder is read or touched. (partials removed, folders removed)"""
        self.check_live()
        partials = folders = 0
        for name in self._folder.listdir():
            if is_partial(name):
                partials += _remove_own_file(self._folder, name)
            elif CHECKPOINT_FOLDER.match(name):
                try:
                    with self._folder.subfolder(name, create=False) as step:
                        partials += sum(_remove_own_file(step, n) for n in step.listdir() if is_partial(n))
                        empty = not step.listdir()
                except (FileNotFoundError, UnsafePath):
                    continue  # gone, or not the tool's: left alone
                if empty:
                    folders += remove_empty_dirs(self.root / name, stop_at=self.root)
        return partials, folders

    def sweep_partials(self) -> int:
        """Remove ``.partial`` files a crash left in the tool's own places; returns how many."""
        return self._sweep()[0]

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


def _remove_own_file(folder: Folder, name: str) -> int:
    """Unlink ``name`` in ``folder`` if it is a regular file of this user's (anything else stays); 1 if it went."""
    try:
        return int(folder.remove_own_file(name))
    except UnsafePath:
        return 0


def _refuse_foreign(root: Path, names: list[str]) -> None:
    foreign = sorted(n for n in names if not is_own_top_name(n) and n not in HARMLESS)
    if foreign:
        shown = ", ".join(repr(n) for n in foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise TierError(f"dir tier {root} holds {len(foreign)} name(s) this tool did not make ({shown}): give the "
                        "tier a folder of its own, or set allow_foreign: true on it to share this one (the tool "
                        "then touches only its own names there)", transient=False)


def _job() -> str | None:
    """The run this process belongs to (set by the launcher), which a joined folder must name."""
    return os.environ.get("CKPT_EMU_JOB")


def _backing(root: Path) -> str:
    try:
        fs = fs_type(os.stat(root).st_dev)
    except OSError:
        return ""
    if not fs:
        return ""
    return " (on tmpfs, host memory)" if fs == "tmpfs" else f" (on {fs})"
