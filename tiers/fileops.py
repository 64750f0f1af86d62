"""Filesystem primitives shared by the tiers: complete writes, durable folders, copies that copy.

Three traps at real checkpoint sizes shape this module (docs/performance.md):

* One ``write()`` moves at most 2,147,479,552 bytes on Linux, and an
  unbuffered Python file returns the short count. ``write_all`` loops until
  every byte is written and raises if the kernel stops taking them.
* A new file is durable only once its folder's entry is: ``make_dirs``
  fsyncs the parent of every folder it creates, ``publish`` fsyncs the
  folder after the rename, ``remove_file`` after the unlink. That is what
  lets "manifest last, deleted first" survive a power cut, not only SIGKILL.
* ``os.copy_file_range`` within one XFS (reflink is the mkfs default), btrfs
  or ZFS filesystem clones extents instead of copying: a "drain" then takes
  milliseconds and uses no space. ``copy_fd`` uses it only between filesystems that
  cannot share extents (ext2/3/4, tmpfs), where it is the fastest real copy;
  everywhere else it uses ``sendfile``, which always moves the bytes.

Files are opened to read with ``open_regular`` (``open_checked``): never
through a link, never a FIFO or a device that could block or never end.
"""
from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
import threading
import uuid
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import crc32c

from .base import UnsafePath

PARTIAL_SUFFIX = ".partial"
COPY_CHUNK = 64 << 20

#: filesystem types that cannot share extents, so copy_file_range on them really copies
NO_CLONE_FSTYPES = frozenset({"ext2", "ext3", "ext4", "tmpfs"})


def partial_path(final: Path) -> Path:
    """A hidden sibling name for a file being written; never listed as an object."""
    return final.with_name(f".{final.name}.{uuid.uuid4().hex[:12]}{PARTIAL_SUFFIX}")


_PARTIAL = re.compile(r"^\..+\.[0-9a-f]{12}" + re.escape(PARTIAL_SUFFIX) + "$")


def is_partial(name: str) -> bool:
    """A name ``partial_path`` makes (and only such a name: another program's partial is not ours)."""
    return bool(_PARTIAL.match(name))


def partial_of(name: str) -> str | None:
    """The final name a partial named ``name`` was being written for (``partial_path``'s inverse);
    None for any other name."""
    return name[1:].rsplit(".", 2)[0] if is_partial(name) else None


def as_bytes(data) -> memoryview:
    """A flat byte view of any buffer (bytes, bytearray, memoryview of any format)."""
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def write_all(fd: int, data) -> int:
    """Write every byte of ``data`` to ``fd`` (looping over short writes); returns the count."""
    view = as_bytes(data)
    total = len(view)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.EIO, f"write stopped after {total - len(view)} of {total} bytes")
        view = view[n:]
    return total


def fsync_dir(path: Path, *, dir_fd: int | None = None) -> None:
    """fsync the folder ``path`` (with ``dir_fd``: the folder that descriptor holds; ``path`` only names it)."""
    fd = os.open(path if dir_fd is None else ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(path: Path) -> None:
    """``mkdir -p`` that makes each new folder durable (fsync of its parent after creating it)."""
    path = Path(path)
    missing = []
    while not path.is_dir():
        missing.append(path)
        if path.parent == path:
            break
        path = path.parent
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:
            if not folder.is_dir():
                raise
            continue  # another process made it: it fsyncs the parent
        fsync_dir(folder.parent)


def publish(tmp: Path, final: Path, fd: int | None = None) -> None:
    """fsync the data, rename it into place, fsync the directory: durable and atomic."""
    if fd is not None:
        os.fsync(fd)
    os.replace(tmp, final)
    fsync_dir(final.parent)


def remove_file(path: Path, *, stop_at: Path | None = None) -> None:
    """Unlink ``path`` durably, then remove (durably) parent folders left empty, up to ``stop_at``.

    A missing file is not an error, and its empty folders still go (an aborted write
    leaves a step folder with nothing in it)."""
    try:
        path.unlink()
        fsync_dir(path.parent)
    except FileNotFoundError:
        pass
    if stop_at is not None:
        remove_empty_dirs(path.parent, stop_at=stop_at)


def remove_empty_dirs(folder: Path, *, stop_at: Path) -> int:
    """rmdir ``folder`` and then each parent below ``stop_at`` while they are empty (each durably)."""
    removed = 0
    while folder != stop_at and stop_at in folder.parents:
        try:
            folder.rmdir()
        except OSError:  # not empty (or already gone): stop here
            break
        fsync_dir(folder.parent)
        removed += 1
        folder = folder.parent
    return removed


def open_checked(path, flags: int, mode: int = 0o600, *, dir_fd: int | None = None, shown: str | None = None,
                 what: str = "file", check=None, wanted: str = "a regular file") -> int:
    """``os.open`` that never follows a link in the last component and never blocks on a FIFO;
    the file must then pass ``check(fstat)`` (default: a regular file)."""
    shown = shown or str(path)
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except OSError as exc:  # ELOOP for a link; EACCES for O_CREAT on another's link in a sticky folder
        try:
            st = os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            raise exc from None
        if stat.S_ISLNK(st.st_mode):
            raise UnsafePath(f"{what}: {shown} is a link; refused (the tool never follows a link it did not make)") \
                from None
        if not stat.S_ISREG(st.st_mode):  # e.g. a FIFO with no reader, opened to write (ENXIO)
            raise UnsafePath(f"{what}: {shown} is not {wanted}") from None
        raise
    st = os.fstat(fd)
    if not (check or (lambda s: stat.S_ISREG(s.st_mode)))(st):
        os.close(fd)
        raise UnsafePath(f"{what}: {shown} is not {wanted} (mode {stat.filemode(st.st_mode)}, uid {st.st_uid}, "
                         f"{st.st_nlink} name(s)); refused")
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return fd


def open_regular(path, *, what: str = "file") -> int:
    """A descriptor to read ``path``: a regular file, never reached through a final link, never a
    FIFO or a device (which could block or never end)."""
    return open_checked(path, os.O_RDONLY, what=what)


def read_regular(path) -> bytes:
    """The whole of a file the user named (a results.json, a trace): a regular file only, so a FIFO
    or a device is refused (UnsafePath) instead of blocking or never ending."""
    with open(open_regular(path), "rb") as fh:
        return fh.read()


# --------------------------------------------------------------------------- copies

@lru_cache(maxsize=64)
def fs_type(dev: int) -> str:
    """Filesystem type of the device number ``dev`` (``st_dev``), from /proc/self/mountinfo.

    "" when unknown (e.g. a btrfs subvolume below the mount point, which has its own
    anonymous device): callers must then assume the filesystem can clone.
    """
    want = f"{os.major(dev)}:{os.minor(dev)}"
    try:
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) > 3 and fields[2] == want and "-" in fields:
                    return fields[fields.index("-") + 1]
    except OSError:
        pass
    return ""


def copy_can_clone(src_fd: int, dst_fd: int) -> bool:
    """Whether copy_file_range between these files might share extents instead of copying."""
    return not all(fs_type(os.fstat(fd).st_dev) in NO_CLONE_FSTYPES for fd in (src_fd, dst_fd))


def copy_fd(src_fd: int, dst_fd: int, count: int, *, copied=None) -> int:
    """Copy ``count`` bytes between descriptors through the kernel, always moving real bytes;
    ``copied(done)`` (optional) is told the bytes copied so far after each chunk."""
    methods = (_sendfile, _read_write) if copy_can_clone(src_fd, dst_fd) else \
        (_copy_file_range, _sendfile, _read_write)
    done = 0
    for method in methods:
        try:
            while done < count:
                n = method(src_fd, dst_fd, min(COPY_CHUNK, count - done))
                if n == 0:
                    raise EOFError(f"source ended after {done} of {count} bytes")
                done += n
                if copied is not None:
                    copied(done)
            return done
        except OSError as exc:  # e.g. EXDEV on old kernels, EINVAL on odd filesystems
            if done or exc.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                raise
    return done


def _copy_file_range(src_fd: int, dst_fd: int, n: int) -> int:
    return os.copy_file_range(src_fd, dst_fd, n)


def _sendfile(src_fd: int, dst_fd: int, n: int) -> int:
    return os.sendfile(dst_fd, src_fd, None, n)


def _read_write(src_fd: int, dst_fd: int, n: int) -> int:
    data = os.read(src_fd, n)
    return write_all(dst_fd, data) if data else 0


def copy_file_durable(src: Path, dest: Path, *, read_back: "ReadBack | None" = None) -> int:
    """Copy ``src`` to ``dest`` atomically (temp file + rename) and durably; returns bytes.

    With ``read_back``, the copy is also read back from ``dest``'s file as it is written, a chunk
    behind the copy on a thread of its own, and the fsync runs while the last chunk is read; the
    reader then holds the CRC32C and the count of the bytes it read."""
    make_dirs(dest.parent)
    tmp = partial_path(dest)
    src_fd = open_regular(src)
    try:
        size = os.fstat(src_fd).st_size
        dst_fd = os.open(tmp, (os.O_WRONLY if read_back is None else os.O_RDWR) | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            if read_back is None:
                copy_fd(src_fd, dst_fd, size)
            else:
                with read_back.reading(dst_fd):
                    copy_fd(src_fd, dst_fd, size, copied=read_back.up_to)
                    os.fsync(dst_fd)
            publish(tmp, dest, dst_fd if read_back is None else None)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        finally:
            os.close(dst_fd)
    finally:
        os.close(src_fd)
    return size


class ReadBack:
    """CRC32C of a file's bytes read back from the file while another thread writes it: told how
    far the writer got (``up_to``), it reads that far (``pread``) through one small buffer and
    checksums each piece while it is in cache. The bytes are those the file system holds for the
    file, as a reader after the copy would get them, read beside the copy instead of after it."""

    PIECE = 4 << 20

    def __init__(self):
        self.crc, self.bytes = 0, 0
        self._wanted, self._ended, self._error = 0, False, None
        self._moved = threading.Condition()

    @contextmanager
    def reading(self, fd: int):
        """Read ``fd`` back on a thread while the ``with`` block writes it (telling ``up_to``);
        on leaving, the reader finishes what it was told and its error, if any, is raised."""
        thread = threading.Thread(target=self._run, args=(fd,), name="read-back", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            with self._moved:
                self._ended = True
                self._moved.notify()
            thread.join()
        if self._error is not None:
            raise self._error

    def up_to(self, offset: int) -> None:
        """The writer has written the file's first ``offset`` bytes."""
        with self._moved:
            self._wanted = offset
            self._moved.notify()

    def _run(self, fd: int) -> None:
        buf = memoryview(bytearray(self.PIECE))
        try:
            while True:
                with self._moved:
                    self._moved.wait_for(lambda: self._wanted > self.bytes or self._ended)
                    wanted, ended = self._wanted, self._ended
                while self.bytes < wanted:
                    n = os.preadv(fd, [buf[:min(self.PIECE, wanted - self.bytes)]], self.bytes)
                    if n == 0:
                        return  # shorter than the writer said: the caller sees the count
                    self.crc = crc32c.crc32c(buf[:n], self.crc)
                    self.bytes += n
                if ended:
                    return
        except BaseException as exc:  # noqa: BLE001 - raised in the writer's thread
            self._error = exc
