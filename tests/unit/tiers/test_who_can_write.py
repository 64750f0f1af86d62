"""Who may write a folder, by its ACLs as well as its mode (issue 54, 2), and folders the tool makes
names in that others may write at all (issue 54, 7: a step folder squatted in a sticky tier).

A POSIX ACL that lets another user write a folder leaves its mode reading ``drwxrwxr-x`` of root's
own group: the mode check passed it, and a user granted write that way swapped the tier's folder
for a link between the check and the open (once in about 25,000 flips). The ACLs are set here by
writing their extended attribute (``tiers.acl.encode``: no ``setfacl`` needed).
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from planting import OTHER_UID, as_other_user, grant_write, machine, plant_link, snapshot  # noqa: F401 - a fixture

from tiers import acl
from tiers.base import UnsafePath
from tiers.directory import DirTier
from tiers.safepath import reach

def _acl_folder(base: Path, name: str, **kw) -> Path:
    """A folder of root's, mode 0755 and group root, that an ACL lets the second user write."""
    folder = base / name
    folder.mkdir(mode=0o755)
    grant_write(folder, **kw)
    return folder


def test_the_acl_format_reads_back_what_setfacl_writes():
    raw = bytes.fromhex("02000000" "01000700ffffffff" "02000700feff0000" "04000500ffffffff"
                        "10000700ffffffff" "20000500ffffffff")  # getfattr -e hex of `setfacl -m u:65534:rwx`
    entries = acl.decode(raw)
    assert acl.encode(entries) == raw
    assert acl.other_writers(entries, owner_gid=os.getegid()) == ["user 65534"]
    masked = [(t, p if t != acl.MASK else 0o5, i) for t, p, i in entries]  # `setfacl -m m::rx`
    assert acl.other_writers(masked, owner_gid=os.getegid()) == []
    with pytest.raises(ValueError):
        acl.decode(b"\x01\x00\x00\x00")


def test_a_folder_on_the_way_whose_acl_lets_another_user_write_is_refused(machine):
    shared, _ = machine
    folder = _acl_folder(shared.parent, "project")
    assert not os.stat(folder).st_mode & 0o022 or os.stat(folder).st_gid == os.getegid()  # the mode passes
    with pytest.raises(UnsafePath, match=r"project is writable by other users without the sticky bit "
                                         r"\(its ACL lets user 65534 write\)"):
        DirTier(folder / "nvme")
    assert not (folder / "nvme").exists()


def test_a_tier_folder_whose_acl_lets_another_user_write_is_refused(machine):
    shared, _ = machine
    folder = _acl_folder(shared.parent, "tier")
    with pytest.raises(UnsafePath, match="its ACL lets user 65534 write"):
        DirTier(folder)
    with pytest.raises(UnsafePath, match="its ACL lets user 65534 write"):
        reach(folder)


def test_a_default_acl_that_would_let_another_user_write_what_is_made_inside_is_refused(machine):
    shared, _ = machine
    folder = _acl_folder(shared.parent, "tier", default=True)
    with pytest.raises(UnsafePath, match=r"its default ACL \(on what is made in it\) lets user 65534 write"):
        DirTier(folder)


def test_an_acl_granting_this_user_alone_is_no_other_writer(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir(mode=0o700)
    grant_write(folder, os.geteuid())
    DirTier(folder)  # accepted


def test_a_step_folder_with_an_acl_for_another_user_is_refused(machine):
    shared, victims = machine
    tier = DirTier(shared.parent / "t")
    (tier.root / "step_00000001").mkdir(mode=0o700)
    grant_write(tier.root / "step_00000001")
    with pytest.raises(UnsafePath, match="its ACL lets user 65534 write"):
        with tier.open_write("step_00000001/rank0.pt") as sink:
            sink.write(b"x")


def test_a_tier_folder_others_can_write_is_refused_even_with_the_sticky_bit(machine):
    """7: in a sticky tier another user could make ``step_<N>`` (or a lock file) before the run
    did and block it mid-run: such a folder is refused before anything is written."""
    shared, _ = machine
    with pytest.raises(UnsafePath, match=r"shm is writable by other users \(mode 1777, sticky\): they could take "
                                         "the names the tool makes there"):
        DirTier(shared)
    tier = DirTier(shared / "mine")  # a folder of its own inside: accepted
    assert oct(os.stat(tier.root).st_mode & 0o777) == "0o700"


def test_an_output_file_may_go_into_a_sticky_shared_folder(machine):
    """An output is renamed into its folder, never opened there by name: /tmp itself is fine."""
    from tiers.safepath import write_file
    shared, victims = machine
    plant_link(shared / "plot.png", victims / "secret")
    before = snapshot(victims)
    write_file(shared / "plot.png", b"png")
    assert snapshot(victims) == before and (shared / "plot.png").read_bytes() == b"png"


def _flip(folder: str, victim: str, seconds: float) -> None:
    """As the second user: swap ``folder/t`` between a folder and a link to ``victim`` (whatever is
    at ``t``, root's folder included, is moved aside first), in a loop."""
    t, spare = os.path.join(folder, "t"), os.path.join(folder, "t.spare")
    end, n = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        for make in (lambda: os.mkdir(spare), lambda: os.symlink(victim, spare)):
            n += 1
            try:
                make()
                if os.path.lexists(t):
                    os.rename(t, os.path.join(folder, f"gone{n}"))
                os.rename(spare, t)
            except OSError:
                pass


def test_writes_beside_a_loop_that_swaps_a_folder_for_a_link_in_an_acl_folder_never_land_outside(machine):
    """The race of 2, in process: while the second user swaps ``t`` between a folder and a link to a
    root-only folder in a folder an ACL lets them write, every attempt to use ``t`` as a tier is
    refused, and the root-only folder is unchanged."""
    shared, victims = machine
    folder = _acl_folder(shared.parent, "acl")
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the second user's loop
        try:
            os.setgroups([])
            os.setgid(OTHER_UID)
            os.setuid(OTHER_UID)
            _flip(str(folder), str(victims / "tree"), 3.0)
        finally:
            os._exit(0)
    before = snapshot(victims)
    refused = tried = 0
    try:
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            tried += 1
            try:
                tier = DirTier(folder / "t")
                with tier.open_write("step_00000001/rank0.pt") as sink:
                    sink.write(b"root's checkpoint")
            except (UnsafePath, OSError):
                refused += 1
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert snapshot(victims) == before
    assert refused == tried, f"{tried - refused} of {tried} attempts used a folder another user can write"


def test_planting_helpers_see_the_acl_as_the_kernel_does(machine):
    """The ACL really lets the second user write (so the tests above test what they say)."""
    shared, _ = machine
    folder = _acl_folder(shared.parent, "granted")
    as_other_user(os.mkdir, str(folder / "theirs"))
    assert (folder / "theirs").stat().st_uid == OTHER_UID
