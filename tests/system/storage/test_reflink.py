"""Drains must move real bytes on filesystems that can clone (XFS with reflink, btrfs).

``os.copy_file_range`` within one such filesystem shares extents instead of
copying: a "drain" then takes milliseconds and uses no space, and every figure
built on it (drain time, overlap, deadline misses, sync stall) collapses. These
tests loop-mount real XFS and btrfs images (root only; they skip, saying why,
elsewhere), put the local and global tiers on the same filesystem, and check
that a drain grows the used space by the file's size and that ``filefrag -v``
shows no shared extent. A control first shows that cloning really happens on
the image, so the checks cannot pass for the wrong reason.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from emulator.checkpoint.drainer import Drainer
from emulator.checkpoint.integrity import crc_of_stream
from emulator.checkpoint.layout import FileEntry
from tiers.directory import DirTier

MIB = 1 << 20
FILE_BYTES = 192 * MIB

FILESYSTEMS = {
    "xfs": (["mkfs.xfs", "-q", "-f", "-m", "reflink=1"], 1024),
    "btrfs": (["mkfs.btrfs", "-q", "-f"], 1024),
}


def _why_not(fs: str) -> str | None:
    if os.geteuid() != 0:
        return "needs root for loop mounts"
    for tool in (FILESYSTEMS[fs][0][0], "losetup", "mount", "filefrag"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (Debian: xfsprogs / btrfs-progs / e2fsprogs)"
    return None


@pytest.fixture(params=sorted(FILESYSTEMS))
def mounted(request, tmp_path):
    """A freshly made filesystem image, loop-mounted at tmp_path/mnt."""
    fs = request.param
    reason = _why_not(fs)
    if reason:
        print(f"skipping {fs}: {reason}")
        pytest.skip(reason)
    mkfs, size_mib = FILESYSTEMS[fs]
    image, mnt = tmp_path / f"{fs}.img", tmp_path / "mnt"
    with open(image, "wb") as fh:
        fh.truncate(size_mib * MIB)
    subprocess.run([*mkfs, str(image)], check=True, capture_output=True)
    mnt.mkdir()
    proc = subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot loop-mount {fs}: {proc.stderr.strip()}")
    try:
        yield fs, mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def used_bytes(path: Path) -> int:
    os.sync()
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def shared_extents(path: Path) -> int:
    out = subprocess.run(["filefrag", "-v", str(path)], capture_output=True, text=True, check=True).stdout
    return sum("shared" in line for line in out.splitlines())


def write_random(path: Path, nbytes: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        for _ in range(nbytes // (16 * MIB)):
            fh.write(os.urandom(16 * MIB))
        fh.flush()
        os.fsync(fh.fileno())


def test_control_copy_file_range_clones_on_this_filesystem(mounted):
    """Without this, the tests below could pass because the image never clones at all."""
    _, mnt = mounted
    src, dst = mnt / "a.bin", mnt / "b.bin"
    write_random(src, FILE_BYTES)
    before = used_bytes(mnt)
    with open(src, "rb") as s, open(dst, "wb") as d:
        done = 0
        while done < FILE_BYTES:
            done += os.copy_file_range(s.fileno(), d.fileno(), FILE_BYTES - done)
    assert used_bytes(mnt) - before < FILE_BYTES // 4  # cloned: almost no new space
    assert shared_extents(dst) > 0


def test_drain_on_one_filesystem_moves_real_bytes(mounted):
    _, mnt = mounted
    local, glob = DirTier(mnt / "local"), DirTier(mnt / "global")
    key = "step_00000001/rank0.pt"
    write_random(local.local_path(key), FILE_BYTES)
    before = used_bytes(mnt)
    with open(local.local_path(key), "rb") as fh:
        crc = crc_of_stream(fh)[0]
    result = asyncio.run(Drainer(local, glob).drain([FileEntry(key, 0, FILE_BYTES, crc)]))
    assert result.ok, result.error
    grown = used_bytes(mnt) - before
    assert grown >= 0.95 * FILE_BYTES, f"drain grew used space by {grown} of {FILE_BYTES} bytes: cloned"
    assert shared_extents(glob.local_path(key)) == 0
    assert glob.local_path(key).read_bytes() == local.local_path(key).read_bytes()


def test_put_file_and_get_file_move_real_bytes(mounted):
    _, mnt = mounted
    tier = DirTier(mnt / "tier")
    src = mnt / "outside" / "src.bin"
    write_random(src, FILE_BYTES)
    before = used_bytes(mnt)
    asyncio.run(tier.put_file("obj", src))
    asyncio.run(tier.get_file("obj", mnt / "restored.bin"))
    assert used_bytes(mnt) - before >= 2 * 0.95 * FILE_BYTES
    assert shared_extents(tier.local_path("obj")) == 0 and shared_extents(mnt / "restored.bin") == 0


def test_a_run_with_both_tiers_on_one_filesystem_writes_every_global_byte(mounted, tmp_path):
    """The whole path, through the CLI: no global file shares an extent with a local one."""
    from emu import ckpt_emu, results, small_config
    _, mnt = mounted
    cfg = small_config(tmp_path, ranks=2, checkpoint={"saves": 2, "loads": 1},
                       tiers={"local": {"backend": "dir", "path": str(mnt / "local" / "node{node}")},
                              "global": {"backend": "dir", "path": str(mnt / "global")}})
    ckpt_emu("run", cfg, "--quiet", check=True)
    res = results(tmp_path / "out")
    assert all(m["incomplete"] == 0 for m in res["modes"].values())
    files = [p for p in (mnt / "global").rglob("*.pt")]
    assert files and all(shared_extents(p) == 0 for p in files)
