"""Who may write a folder besides its owner, by its POSIX ACLs as well as its mode bits.

A folder's mode can read ``drwx------`` (or ``drwxrwx---`` of root's own group) while an ACL
(``setfacl -m u:alice:rwx``) lets another user create and rename names in it: the mode's group
bits are then the ACL's mask, not the group's permission. ``tiers.safepath`` treats a folder whose
access ACL grants write to another user or group (through the mask) as writable by others, and so
a folder whose default ACL would grant it on what the tool makes inside.

The ACLs are read from the ``system.posix_acl_access`` and ``system.posix_acl_default`` extended
attributes (the kernel's own format: a version, then (tag, perm, id) entries) of a descriptor, so
what is checked is what was opened. ``encode`` writes that format (the tests set ACLs with it,
where ``setfacl`` is not installed).
"""
from __future__ import annotations

import errno
import os
import struct

ACCESS = "system.posix_acl_access"
DEFAULT = "system.posix_acl_default"
VERSION = 2
USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
UNDEFINED_ID = 0xFFFFFFFF
WRITE = 0o2
_ENTRY = struct.Struct("<HHI")
#: errors meaning "no ACL here": none set, or a filesystem without them
_NONE = (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS)


def encode(entries: list[tuple[int, int, int]]) -> bytes:
    """The xattr value of an ACL of (tag, perm, id) entries (id ``UNDEFINED_ID`` for the owner,
    owning group, mask and other entries)."""
    return struct.pack("<I", VERSION) + b"".join(_ENTRY.pack(*e) for e in entries)


def decode(raw: bytes) -> list[tuple[int, int, int]]:
    """(tag, perm, id) entries of an ACL xattr value; ValueError if it is not one."""
    if len(raw) < 4 or (len(raw) - 4) % _ENTRY.size or struct.unpack_from("<I", raw)[0] != VERSION:
        raise ValueError("not a POSIX ACL")
    return [_ENTRY.unpack_from(raw, off) for off in range(4, len(raw), _ENTRY.size)]


def other_writers(entries: list[tuple[int, int, int]], *, owner_gid: int) -> list[str]:
    """Who besides this user and its group may write, by these entries: ``user 65534``, ``group 100``.
    A named entry's write counts through the mask; the owning group counts when it is not ours."""
    mask = next((perm for tag, perm, _ in entries if tag == MASK), 0o7)
    found = []
    for tag, perm, ident in entries:
        if not perm & mask & WRITE:
            continue
        if tag == USER and ident != os.geteuid():
            found.append(f"user {ident}")
        elif tag == GROUP and ident != os.getegid():
            found.append(f"group {ident}")
        elif tag == GROUP_OBJ and owner_gid != os.getegid():
            found.append(f"group {owner_gid}")
    return found


def _read(fd: int, name: str) -> bytes | None:
    try:  # an O_PATH descriptor has no xattr calls of its own: its /proc link reaches the same file
        return os.getxattr(f"/proc/self/fd/{fd}", name)
    except OSError as exc:
        if exc.errno in _NONE:
            return None
        raise


def acl_writers(fd: int, owner_gid: int) -> str | None:
    """What the folder held by ``fd`` lets others write through an ACL, in words (None: nothing):
    e.g. ``its ACL lets user 65534 write``, ``its default ACL lets group 100 write``."""
    for name, words in ((ACCESS, "its ACL"), (DEFAULT, "its default ACL (on what is made in it)")):
        raw = _read(fd, name)
        if raw is None:
            continue
        try:
            who = other_writers(decode(raw), owner_gid=owner_gid)
        except ValueError:
            return f"{words} cannot be read"
        if who:
            return f"{words} lets {' and '.join(who)} write"
    return None
