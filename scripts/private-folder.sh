# Sourced by the scripts that write files (docs/security.md, "Scripts"): a folder they may write in
# as root without another user turning a write elsewhere. POSIX sh; the checks run in python3's
# standard library (no project import: the scripts run on machines without the project installed).
#
#   private_folder DIR   DIR made here (mode 0700), or an empty folder of this user's that nobody
#                        else may enter (mode 0700, e.g. from mktemp -d); prints its physical path
#   own_folder DIR       DIR made here (mode 0755), or a folder of this user's that nobody else may
#                        write; prints its physical path
#
# Either refuses (one line on stderr, status 1) a DIR that is a link, another user's, or writable by
# others (its mode or an ACL), and a DIR whose way from / passes a folder another user owns or may
# write without the sticky bit. Afterwards the scripts use only the physical path printed.

_checked_folder() {  # _checked_folder private|own DIR: the script's name starts its error line
  python3 - "$1" "$2" "${0##*/}" <<'EOF'
import errno, os, stat, struct, sys

kind, given, who = sys.argv[1], sys.argv[2], sys.argv[3].removesuffix(".sh")
me = os.geteuid()


def fail(why):
    sys.exit(f"{who}: {given}: {why}; refused (use a new folder of your own)")


def acl_writers(path):
    """Named ACL entries (or the owning group) that may write, through the mask."""
    found = []
    for name in ("system.posix_acl_access", "system.posix_acl_default"):
        try:
            raw = os.getxattr(path, name, follow_symlinks=False)
        except OSError as exc:
            if exc.errno in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
                continue
            raise
        entries = [struct.unpack_from("<HHI", raw, off) for off in range(4, len(raw), 8)]
        mask = next((p for t, p, _ in entries if t == 0x10), 7)
        found += [f"{'user' if t == 2 else 'group'} {i}" for t, p, i in entries
                  if t in (2, 8) and p & mask & 2 and not (t == 2 and i == me)]
    return found


def others_write(st, path):
    return bool(st.st_mode & stat.S_IWOTH or (st.st_mode & stat.S_IWGRP and st.st_gid != os.getegid())
                or acl_writers(path))


def reach(folder):
    """The physical path of ``folder``, walked from / one name at a time: a link followed only when it
    is root's or ours; every folder passed root's or ours, others' write only with the sticky bit."""
    todo, where, links = [p for p in folder.split("/") if p][::-1], [], 0
    check("/")
    while todo:
        name = todo.pop()
        if name in (".", ""):
            continue
        if name == "..":
            where = where[:-1]
            continue
        path = "/" + "/".join(where + [name])
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            fail(f"{path} does not exist")
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid not in (0, me):
                fail(f"{path} is a link another user owns (uid {st.st_uid})")
            links += 1
            if links > 40:
                fail("too many links")
            target = os.readlink(path)
            where = [] if target.startswith("/") else where
            todo += [p for p in target.split("/") if p][::-1]
            continue
        if not stat.S_ISDIR(st.st_mode):
            fail(f"{path} is not a folder")
        check(path)
        where.append(name)
    return "/" + "/".join(where)


def check(path):
    st = os.lstat(path)
    if st.st_uid not in (0, me):
        fail(f"{path} belongs to another user (uid {st.st_uid})")
    if others_write(st, path) and not st.st_mode & stat.S_ISVTX:
        fail(f"{path} is writable by other users without the sticky bit")


target = os.path.abspath(given)
physical = os.path.join(reach(os.path.dirname(target)), os.path.basename(target))
try:
    os.mkdir(physical, 0o700 if kind == "private" else 0o755)
except FileExistsError:
    st = os.lstat(physical)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        fail("is not a folder (a link or a file)")
    if st.st_uid != me:
        fail(f"belongs to another user (uid {st.st_uid})")
    if kind == "private" and (stat.S_IMODE(st.st_mode) & 0o077 or acl_writers(physical) or os.listdir(physical)):
        fail("is not an empty folder only you may enter (mode 0700, as mktemp -d makes)")
    if others_write(st, physical):
        fail("is writable by other users")
print(physical)
EOF
}

private_folder() { _checked_folder private "$1"; }
own_folder() { _checked_folder own "$1"; }
