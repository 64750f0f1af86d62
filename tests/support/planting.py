"""A second user who plants names where the tool works: links, FIFOs, folders of their own.

The tests run as root; the second user is ``nobody`` (uid 65534), reached with
``os.setuid`` in a forked child, so nothing is installed. ``shared`` is a folder
others can write, as /dev/shm is (mode 1777, inside a folder others can reach),
and ``victims`` are files and folders only root may write, outside every folder
the tool is given: a test checks they are unchanged, byte for byte, afterwards.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest

OTHER_UID = OTHER_GID = 65534


def as_other_user(fn, *args) -> None:
    """Run ``fn(*args)`` as the second user, in a forked child; raise if it failed."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.setgroups([])
            os.setgid(OTHER_GID)
            os.setuid(OTHER_UID)
            fn(*args)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"{fn.__name__}{args} failed as uid {OTHER_UID}"


def plant_link(link: Path, target: Path) -> None:
    as_other_user(os.symlink, str(target), str(link))


def plant_folder(path: Path, mode: int = 0o777) -> None:
    def make(p):
        os.mkdir(p)
        os.chmod(p, mode)
    as_other_user(make, str(path))


def plant_fifo(path: Path) -> None:
    as_other_user(os.mkfifo, str(path))


def grant_write(folder: Path, uid: int = OTHER_UID, *, default: bool = False) -> None:
    """``setfacl -m u:UID:rwx folder`` (``-d``: its default ACL), written as the kernel stores it
    (``tiers.acl``: no setfacl needed); the test is skipped where the filesystem has no ACLs."""
    from tiers import acl
    undefined = acl.UNDEFINED_ID
    entries = [(acl.USER_OBJ, 0o7, undefined), (acl.USER, 0o7, uid), (acl.GROUP_OBJ, 0o5, undefined),
               (acl.MASK, 0o7, undefined), (acl.OTHER, 0o5, undefined)]
    try:
        os.setxattr(folder, acl.DEFAULT if default else acl.ACCESS, acl.encode(entries))
    except OSError as exc:
        pytest.skip(f"no POSIX ACLs on this filesystem ({exc.strerror})")


def snapshot(root: Path) -> dict:
    """Every name under ``root`` (links not followed) with its kind and content digest."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath, name)
            if p.is_symlink():
                out[str(p)] = ("link", os.readlink(p))
            elif p.is_file():
                out[str(p)] = ("file", hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mode)
            else:
                out[str(p)] = ("dir", p.stat().st_mode)
    return out


@pytest.fixture
def machine():
    """(shared, victims): a world-writable sticky folder and root-only files beside it."""
    if os.geteuid() != 0:
        pytest.skip("planting as a second user needs root (os.setuid in a forked child)")
    base = Path(tempfile.mkdtemp(prefix="ckpt-emu-shared-", dir="/tmp"))
    os.chmod(base, 0o755)  # the second user can reach what is inside
    shared = base / "shm"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    victims = base / "victims"
    victims.mkdir()
    (victims / "secret").write_bytes(b"root only\n" * 1000)
    os.chmod(victims / "secret", 0o600)
    (victims / "tree" / "deep").mkdir(parents=True)
    (victims / "tree" / "deep" / "keep.txt").write_text("keep me")
    (victims / "tree" / "empty").mkdir()
    (victims / "tree" / ".download.partial").write_text("a user's partial download")
    try:
        yield shared, victims
    finally:
        shutil.rmtree(base, ignore_errors=True)
