"""Folders as tiers/safepath.py holds them. Whose folder is whose (``check_folder``) for a user who
is not root: the folder the tool works in must be the user's own, root's is not; a folder on the way
to it may be root's (the suite runs as root, where the two rules coincide, so the user is set
here). And a folder held by its descriptor knows when its path names another one."""
from __future__ import annotations

import os
import stat

import pytest

from tiers.base import UnsafePath
from tiers.safepath import check_folder, reach

USER = 1000


def _folder(uid: int, mode: int = 0o755, gid: int | None = None) -> os.stat_result:
    return os.stat_result((stat.S_IFDIR | mode, 0, 0, 2, uid, uid if gid is None else gid, 0, 0, 0, 0))


@pytest.fixture
def as_user(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: USER)
    monkeypatch.setattr(os, "getegid", lambda: USER)


def test_the_working_folder_must_be_the_users_own_not_roots(as_user):
    check_folder(_folder(USER), "/w", "dir tier", own=True)
    with pytest.raises(UnsafePath, match=r"/w belongs to another user \(uid 0\)"):
        check_folder(_folder(0), "/w", "dir tier", own=True)
    with pytest.raises(UnsafePath, match=r"uid 1001"):
        check_folder(_folder(1001), "/w", "dir tier", own=True)


def test_a_folder_on_the_way_may_be_roots_not_another_users(as_user):
    check_folder(_folder(0), "/srv", "dir tier", own=False)
    check_folder(_folder(USER), "/srv", "dir tier", own=False)
    with pytest.raises(UnsafePath, match=r"uid 1001"):
        check_folder(_folder(1001), "/srv", "dir tier", own=False)
    with pytest.raises(UnsafePath, match="without the sticky bit"):
        check_folder(_folder(0, 0o777), "/srv", "dir tier", own=False)
    check_folder(_folder(0, 0o1777), "/tmp", "dir tier", own=False)  # as /tmp and /dev/shm


def test_a_folder_its_group_may_write_is_safe_only_in_the_users_own_group(as_user):
    check_folder(_folder(USER, 0o775, gid=USER), "/w", "dir tier", own=True)
    with pytest.raises(UnsafePath, match="writable by other users"):
        check_folder(_folder(USER, 0o775, gid=1001), "/w", "dir tier", own=True)


@pytest.mark.parametrize("how", ["moved away, another made", "moved away, a link put there", "removed"])
def test_a_held_folder_knows_when_its_path_names_another(tmp_path, how):
    folder = reach(tmp_path / "tier", create=True)
    try:
        assert folder.still_there() is None
        if how == "removed":
            os.rmdir(tmp_path / "tier")
        else:
            os.rename(tmp_path / "tier", tmp_path / "elsewhere")
            (tmp_path / "tier").mkdir() if how.endswith("made") else os.symlink(tmp_path / "elsewhere", tmp_path / "tier")
        want = "was removed" if how == "removed" else "was replaced by another folder or a link"
        assert folder.still_there() == want
    finally:
        folder.close()


def test_another_users_file_is_never_removed_as_the_tools_own(tmp_path):
    """``Folder.remove_own_file``: a regular file of another user's at the name is refused and kept."""
    if os.geteuid() != 0:
        pytest.skip("a file of another user's needs root to make")
    (tmp_path / "theirs").write_bytes(b"their bytes")
    os.chown(tmp_path / "theirs", 65534, 65534)
    (tmp_path / "mine").write_bytes(b"my bytes")
    with reach(tmp_path) as folder:
        with pytest.raises(UnsafePath, match="is not a file this tool made"):
            folder.remove_own_file("theirs")
        assert folder.remove_own_file("mine") and not folder.remove_own_file("mine")
    assert (tmp_path / "theirs").read_bytes() == b"their bytes" and not (tmp_path / "mine").exists()
