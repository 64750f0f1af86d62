"""Reaching folders and opening files without following anything this tool did not make.

ckpt-emu runs as root on shared machines, over folders other people can write
(/dev/shm, a project folder, a PFS mount). A name another user planted there (a
symbolic link, a FIFO, a hard link, a folder of theirs) must never turn one of
its writes, reads or deletes elsewhere (docs/security.md):

* ``reach`` walks a folder's path one component at a time through directory
  descriptors. A link is followed only when it belongs to this user or root;
  every folder on the way belongs to this user or root and is not writable by
  others unless sticky; the folder itself is this user's. Folders it makes are
  made with ``mkdir`` (mode 0700 unless told) and opened without following links.
* ``Folder.open_own`` opens (or creates) one of the tool's files in a folder it
  reached: never through a link, only a regular file of this user's with one name.
* ``tiers.fileops.open_regular`` opens a file to read: never through a link, never a
  FIFO or a device (opened non-blocking, then checked with ``fstat``).
* ``write_file`` (and ``write_figure``) writes every output the tool makes outside its tiers
  (results, reports, pictures, sweeps): its folder reached as above, the bytes written to a new
  partial there and renamed over the name, both by the folder's descriptor, so a link planted at
  the name is replaced, never written through.

Who may write a folder is read from its mode and its POSIX ACLs (``tiers.acl``), on the folder
as opened (``fstat`` and the descriptor's ACL), so nothing can change between the check and the
use but by its owner, who is trusted. A folder the tool makes names in (a tier, a results folder)
must not be writable by others at all: in a sticky folder they could still take a name first.
"""
from __future__ import annotations

import errno
import io
import os
import shutil
import stat
import uuid
from pathlib import Path

from . import fileops
from .acl import acl_writers
from .base import UnsafePath
from .fileops import PARTIAL_SUFFIX, open_checked, write_all

#: links followed while reaching one folder, as the kernel's own limit
MAX_LINKS = 40
_DIR = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def others_can_write(st: os.stat_result) -> bool:
    """Whether a user other than this one may create or rename names in the folder ``st``
    (its group counts as others unless it is this process's own group)."""
    return bool(st.st_mode & stat.S_IWOTH or (st.st_mode & stat.S_IWGRP and st.st_gid != os.getegid()))


def is_own_file(st: os.stat_result) -> bool:
    """A regular file of this user's with no other name: one the tool may reuse or delete."""
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and st.st_nlink == 1


def _trusted(uid: int) -> bool:
    return uid in (os.geteuid(), 0)


def check_folder(st: os.stat_result, shown: str, what: str, *, own: bool, fd: int | None = None) -> None:
    """``own``: a folder the tool works in, which must be this user's and writable by nobody else
    (sticky or not: it makes predictable names there); else a folder on the way to it (or one an
    output file is renamed into), which may also be root's and writable by others only with the
    sticky bit. ``fd``: the folder opened, whose ACLs count too (``tiers.acl``)."""
    if not (st.st_uid == os.geteuid() if own else _trusted(st.st_uid)):
        raise UnsafePath(f"{what}: {shown} belongs to another user (uid {st.st_uid}); "
                         "use a folder of your own")
    acl = acl_writers(fd, st.st_gid) if fd is not None else None
    if not (others_can_write(st) or acl):
        return
    how = acl or f"mode {stat.S_IMODE(st.st_mode):o}"
    undo = "remove their write permission (chmod go-w" + ("; setfacl -b for an ACL)" if acl else ")")
    if not st.st_mode & stat.S_ISVTX:
        raise UnsafePath(f"{what}: {shown} is writable by other users without the sticky bit ({how}): they could "
                         f"replace what the tool writes there; {undo}" + ("" if own else " or set the sticky bit (chmod +t)"))
    if own:
        raise UnsafePath(f"{what}: {shown} is writable by other users ({how}, sticky): they could take the names "
                         f"the tool makes there before it does; give it a folder only you can write, or {undo}")


class Folder:
    """A folder held by its descriptor (``O_PATH``): what it names cannot be swapped under it."""

    def __init__(self, fd: int, path: str):
        self.fd, self.path = fd, path
        st = os.fstat(fd)
        self.ident = (st.st_dev, st.st_ino)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def still_there(self) -> str | None:
        """None while the path still names this folder; else what happened to it."""
        if os.fstat(self.fd).st_nlink == 0:
            return "was removed"
        try:
            st = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            return "was removed or moved away"
        if (st.st_dev, st.st_ino) != self.ident:
            return "was replaced by another folder or a link"
        return None

    def lstat(self, name: str) -> os.stat_result | None:
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def listdir(self) -> list[str]:
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=self.fd)
        try:
            return os.listdir(fd)
        finally:
            os.close(fd)

    def fsync(self) -> None:
        """Make the folder's entries durable (through its descriptor, not its path)."""
        fileops.fsync_dir(self.path, dir_fd=self.fd)

    def subfolder(self, name: str, *, create: bool = True, mode: int = 0o700, what: str = "folder",
                  own_links: bool = False) -> "Folder":
        """The tool's own folder ``name`` in this one, made (durably) when missing and ``create``;
        UnsafePath if ``name`` is a link, not a folder, or another user's; FileNotFoundError if
        missing and not ``create``. ``own_links``: a link of this user's (or root's) there is the
        user's choice and is followed, its target reached and checked like any folder."""
        shown = os.path.join(self.path, name)
        st = self.lstat(name)
        if st is None:
            if not create:
                raise FileNotFoundError(errno.ENOENT, "no such folder", shown)
            try:
                os.mkdir(name, mode, dir_fd=self.fd)
                self.fsync()
            except FileExistsError:
                pass  # another process of the run made it: checked below like any other
            st = self.lstat(name)
            if st is None:
                raise FileNotFoundError(errno.ENOENT, "folder removed as it was made", shown)
        if stat.S_ISLNK(st.st_mode) and own_links and _trusted(st.st_uid):
            return reach(shown, what=what)
        if stat.S_ISLNK(st.st_mode):
            raise UnsafePath(f"{what}: {shown} is a link; refused (the tool never writes through a link)")
        if not stat.S_ISDIR(st.st_mode):
            raise UnsafePath(f"{what}: {shown} is not a folder")
        return Folder(_open_checked_folder(self.fd, name, shown, what, own=True), shown)

    def open_own(self, name: str, flags: int, mode: int = 0o600, *, what: str = "file") -> int:
        """Open (``O_CREAT`` in ``flags``: or create) the tool's file ``name`` here: never through
        a link, and only a regular file of this user's with one name (UnsafePath otherwise)."""
        return open_checked(name, flags, mode, dir_fd=self.fd, shown=os.path.join(self.path, name), what=what,
                            check=is_own_file, wanted="a regular file of this user's with one name")

    def remove_own_file(self, name: str, *, what: str = "file") -> bool:
        """Unlink ``name`` here if it is a regular file of this user's (False if it is not there);
        anything else at that name is refused (UnsafePath), never removed."""
        st = self.lstat(name)
        if st is None:
            return False
        if not (stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()):
            raise UnsafePath(f"{what}: {os.path.join(self.path, name)} is not a file this tool made "
                             f"({stat.filemode(st.st_mode)}, uid {st.st_uid}); refused")
        os.unlink(name, dir_fd=self.fd)
        self.fsync()
        return True

    def create_new(self, name: str, mode: int = 0o644) -> int:
        """A new file ``name`` here, opened to write (``O_EXCL`` by this folder's descriptor: never
        through a link, never a file that was there)."""
        return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=self.fd)

    def publish(self, tmp: str, name: str, fd: int | None = None, *, durable: bool = True) -> None:
        """Rename the partial ``tmp`` over ``name`` here (a link at ``name`` is replaced, never
        followed); ``durable``: ``fd`` (the partial's) fsynced before, the folder after."""
        if durable and fd is not None:
            os.fsync(fd)
        os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        if durable:
            self.fsync()

    def discard(self, name: str) -> None:
        """Unlink ``name`` here if it is there (a partial given up)."""
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass

    def write_file(self, name: str, data, *, mode: int = 0o644, durable: bool = True) -> None:
        """``data`` (bytes or text) as the whole file ``name`` here: written into a new partial
        (``create_new``), then renamed over ``name`` (``publish``), so a link planted at the name is
        replaced, never written through. ``durable``: the file and the folder fsynced."""
        tmp = f".{name}.{uuid.uuid4().hex[:12]}{PARTIAL_SUFFIX}"
        fd = self.create_new(tmp, mode)
        try:
            write_all(fd, data.encode() if isinstance(data, str) else data)
            self.publish(tmp, name, fd, durable=durable)
        except BaseException:
            self.discard(tmp)
            raise
        finally:
            os.close(fd)

    def remove_own_tree(self, name: str, *, what: str = "folder", own_links: bool = False) -> bool:
        """Delete the tool's own folder ``name`` here and everything in it, never following a link
        (``shutil.rmtree`` through descriptors); False if it was not there. ``own_links``: a link of
        this user's (or root's) there is left alone, and its target (False)."""
        st = self.lstat(name)
        if st is None or (stat.S_ISLNK(st.st_mode) and own_links and _trusted(st.st_uid)):
            return False
        with self.subfolder(name, create=False, what=what):  # refuses a link, a file, another's folder
            pass
        shutil.rmtree(name, dir_fd=self.fd)
        self.fsync()
        return True


def _walk(path, *, create: bool, mode: int, what: str, owned: bool = True) -> tuple[int, list[str], list[str]]:
    """(descriptor of the deepest folder reached, its real components, the components missing
    below it); folders are checked as they are passed, and made when ``create``; the last one as
    the tool's own (``check_folder``) when ``owned``."""
    todo = [p for p in os.path.abspath(os.path.expanduser(str(path))).split("/") if p][::-1]
    fd, where, links = os.open("/", _DIR), [], 0
    try:
        while todo:
            name = todo.pop()
            if name == ".":
                continue
            if name == "..":
                if where:
                    fd = _swap(fd, os.open("..", _DIR, dir_fd=fd))
                    where.pop()
                continue
            shown = "/" + "/".join(where + [name])
            st = _lstat_at(fd, name)
            if st is None and not create:
                return fd, where, [name] + todo[::-1]
            if st is None:
                _make_at(fd, name, mode)
                todo.append(name)  # look again: checked like a folder that was there
                continue
            if stat.S_ISLNK(st.st_mode):
                if not _trusted(st.st_uid):
                    raise UnsafePath(f"{what}: {shown} is a link owned by another user (uid {st.st_uid}); refused")
                links += 1
                if links > MAX_LINKS:
                    raise UnsafePath(f"{what}: {path}: too many levels of links")
                target = os.readlink(name, dir_fd=fd)
                if target.startswith("/"):
                    fd, where = _swap(fd, os.open("/", _DIR)), []
                todo.extend([p for p in target.split("/") if p][::-1])
                continue
            if not stat.S_ISDIR(st.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, "Not a directory", shown)
            fd = _swap(fd, _open_checked_folder(fd, name, shown, what, own=owned and not todo))
            where.append(name)
        return fd, where, []
    except BaseException:
        os.close(fd)
        raise


def _open_checked_folder(parent: int, name: str, shown: str, what: str, *, own: bool) -> int:
    """A descriptor of the folder ``name`` in ``parent`` (never through a link), checked as opened:
    what the check saw is what the descriptor holds."""
    try:
        fd = os.open(name, _DIR, dir_fd=parent)
    except OSError as exc:
        raise UnsafePath(f"{what}: {shown} changed while it was reached ({exc.strerror})") from None
    try:
        check_folder(os.fstat(fd), shown, what, own=own, fd=fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _lstat_at(fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _make_at(fd: int, name: str, mode: int) -> None:
    try:
        os.mkdir(name, mode, dir_fd=fd)
    except FileExistsError:
        return
    rfd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
    try:
        os.fsync(rfd)  # the new folder's entry is durable
    finally:
        os.close(rfd)


def _swap(old: int, new: int) -> int:
    os.close(old)
    return new


def reach(path, *, create: bool = False, mode: int = 0o700, what: str = "folder", owned: bool = True) -> Folder:
    """The folder ``path``, reached safely (module docstring) and held by its descriptor; missing
    folders are made (mode ``mode``) when ``create``, else FileNotFoundError. ``owned``: the
    folder is one the tool works in (``check_folder``); else one it only renames files into."""
    fd, where, missing = _walk(path, create=create, mode=mode, what=what, owned=owned)
    if missing:
        os.close(fd)
        raise FileNotFoundError(errno.ENOENT, "no such folder", str(path))
    return Folder(fd, "/" + "/".join(where))


def fresh_folder(path, *, mode: int = 0o700, what: str = "folder") -> Path:
    """The tool's working folder ``path``, emptied (or made): its parent reached safely (and made),
    what was in it removed without following a link, a link or another user's folder refused."""
    path = Path(path)
    with reach(path.parent, create=True, mode=mode, what=what) as parent:
        parent.remove_own_tree(path.name, what=what)
        parent.subfolder(path.name, mode=mode, what=what).close()
    return path


def check_reach(path, *, what: str = "folder", owned: bool = True) -> tuple[Path, list[str]]:
    """Check ``path`` as ``reach`` would, making nothing: (the deepest existing folder on it, as a
    real path, and the components that would be made below it)."""
    fd, where, missing = _walk(path, create=False, mode=0o700, what=what, owned=owned)
    os.close(fd)
    return Path("/" + "/".join(where)), missing


def write_file(path, data, *, what: str = "file", durable: bool = True, mode: int = 0o644) -> Path:
    """``data`` (bytes or text) as the whole file ``path``, the tool's one way to write an output:
    its folder reached safely (missing folders made, mode 0755; it may be root's, or shared with the
    sticky bit), then ``Folder.write_file`` (a partial renamed over the name, by descriptor)."""
    path = Path(os.path.abspath(os.path.expanduser(str(path))))
    with reach(path.parent, create=True, mode=0o755, what=what, owned=False) as folder:
        folder.write_file(path.name, data, mode=mode, durable=durable)
    return path


def open_own_file(path, flags: int, mode: int = 0o644, *, what: str = "file", folder_mode: int = 0o700) -> int:
    """The tool's own working file ``path`` opened (``O_CREAT`` in ``flags``: made when missing): its
    folder reached safely (made, mode ``folder_mode``), the file never through a link and only a
    regular file of this user's with one name (``Folder.open_own``)."""
    path = Path(os.path.abspath(os.path.expanduser(str(path))))
    with reach(path.parent, create=True, mode=folder_mode, what=what) as folder:
        return folder.open_own(path.name, flags, mode, what=what)


def figure_png(fig, **savefig) -> bytes:
    """A matplotlib figure drawn into memory as PNG: the plotting library never opens a path itself
    (it would follow a link planted there)."""
    buf = io.BytesIO()
    fig.savefig(buf, **{"format": "png", **savefig})
    return buf.getvalue()


def write_figure(fig, path, *, what: str = "picture", **savefig) -> Path:
    """A matplotlib figure as the PNG file ``path``: ``figure_png``, then ``write_file``."""
    return write_file(path, figure_png(fig, **savefig), what=what)


#: the longest file name (bytes) and path (bytes) Linux takes (NAME_MAX, PATH_MAX)
NAME_MAX, PATH_MAX = 255, 4096


def path_problem(path) -> str | None:
    """Why ``path`` can name no folder or file of the tool's (None: it can): a control character
    (a NUL, a newline), a name or a whole path longer than Linux takes. For a one-line refusal
    before anything is made."""
    text = str(path)
    if not text.strip():
        return "an empty path"
    bad = next((c for c in text if ord(c) < 0x20 or ord(c) == 0x7f), None)
    if bad is not None:
        return f"holds a control character ({bad!r} at {text.index(bad)}): refused, as in no path of the tool's"
    raw = os.fsencode(os.path.expanduser(text))
    if len(raw) >= PATH_MAX:
        return f"{len(raw)} bytes long, more than a path may be ({PATH_MAX - 1})"
    longest = max(raw.split(b"/"), key=len)
    if len(longest) > NAME_MAX:
        return f"has a name of {len(longest)} bytes, more than a file name may be ({NAME_MAX})"
    return None
