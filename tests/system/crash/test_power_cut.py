"""Power cut: lose everything that was not made durable, mid-checkpoint, and check that every tier
then holds only complete, verifying checkpoints.

SIGKILL keeps the page cache, so kill tests never exercise fsync ordering. Here the tiers live
on an ext4 loop image whose writes reach the (emulated) disk only when the code makes them
durable: the kernel's periodic writeback is off for the test, the filesystem is mounted with
``commit=600`` (no timed journal commits) and ``noauto_da_alloc`` (no implicit flush on
rename). At several seeded instants every process of the run is SIGSTOPped (a process in the
middle of an fsync stops once it returns), the loop device is read with O_DIRECT (past the
filesystem's and the block device's caches: exactly what was submitted to the device), and the
run continues. Each copy is then fsck'd (journal replay), mounted read-only and checked.

Root only (loop mounts, sysctls); skips, saying why, elsewhere. The model is a disk that loses
nothing it was sent; a device whose own volatile cache drops acknowledged writes is not modelled.
"""
from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from crashcheck import descendants, verify_dir_tier
from emu import small_config

pytestmark = pytest.mark.large

MIB = 1 << 20
IMAGE_MIB = 1024
SYSCTLS = {"/proc/sys/vm/dirty_writeback_centisecs": "0", "/proc/sys/vm/dirty_expire_centisecs": "360000"}
SEED = int(os.environ.get("CKPT_EMU_POWER_CUT_SEED", "4242"))


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root (loop mounts, vm sysctls)"
    for tool in ("mkfs.ext4", "e2fsck", "losetup", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} not installed"
    return None


def _sh(*cmd, ok=(0,)) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode in ok, f"{cmd}: {proc.returncode} {proc.stderr}"
    return proc


@pytest.fixture
def quiet_disk(tmp_path):
    """An ext4 image loop-mounted at tmp_path/mnt, writeback only by fsync; yields (mnt, loopdev)."""
    reason = _why_not()
    if reason:
        print(f"skipping the power-cut test: {reason}")
        pytest.skip(reason)
    image, mnt = tmp_path / "disk.img", tmp_path / "mnt"
    with open(image, "wb") as fh:
        fh.truncate(IMAGE_MIB * MIB)
    _sh("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", str(image))
    dev = _sh("losetup", "--find", "--show", str(image)).stdout.strip()
    mnt.mkdir()
    saved = {path: Path(path).read_text() for path in SYSCTLS}
    try:
        _sh("mount", "-o", "commit=600,noauto_da_alloc", dev, str(mnt))
        for path, value in SYSCTLS.items():
            Path(path).write_text(value)
        yield mnt, dev
    finally:
        for path, value in saved.items():
            Path(path).write_text(value)
        subprocess.run(["umount", str(mnt)], capture_output=True)
        subprocess.run(["losetup", "-d", dev], capture_output=True)


def _threads_stopped(pid: int) -> bool:
    try:
        states = [Path(f"/proc/{pid}/task/{t}/stat").read_text().rsplit(")", 1)[1].split()[0]
                  for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return True  # gone
    return all(s in ("T", "t", "Z", "X") for s in states)


def _cut(run: subprocess.Popen, dev: str, copy: Path) -> None:
    """Freeze every process of the run, copy what the device holds, let the run go on."""
    pids = [run.pid, *descendants(run.pid)]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    deadline = time.time() + 30
    while not all(_threads_stopped(p) for p in pids):  # in-flight fsyncs return first
        assert time.time() < deadline, "processes did not stop"
        time.sleep(0.01)
    try:
        _sh("dd", f"if={dev}", f"of={copy}", "bs=16M", "iflag=direct", "conv=sparse", "status=none")
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


def _check(copy: Path, mnt: Path, ranks: int) -> list[int]:
    """fsck (journal replay) and mount the copy; the crash invariants on both tiers; global steps."""
    _sh("e2fsck", "-fy", str(copy), ok=(0, 1))
    mnt.mkdir()
    _sh("mount", "-o", "loop,ro", str(copy), str(mnt))
    try:
        verify_dir_tier(mnt / "local" / "node0")
        return verify_dir_tier(mnt / "global", ranks=ranks)
    finally:
        _sh("umount", str(mnt))


def test_a_power_cut_at_any_instant_leaves_only_complete_verifying_checkpoints(quiet_disk, tmp_path):
    mnt, dev = quiet_disk
    cfg = small_config(tmp_path, ranks=2, run={"scale": 0.002, "out": str(tmp_path / "out")},
                       training={"step_seconds": 0.05},
                       checkpoint={"interval_steps": 2, "saves": 12, "loads": 0, "keep": 2},
                       tiers={"local": {"backend": "dir", "path": str(mnt / "local" / "node{node}")},
                              "global": {"backend": "dir", "path": str(mnt / "global")}})
    run = subprocess.Popen([sys.executable, "-m", "emulator.cli", "run", str(cfg), "--quiet"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rng, copies = random.Random(SEED), []
    status = tmp_path / "out" / "status.json"
    while not status.exists():
        assert run.poll() is None, run.communicate()
        time.sleep(0.05)
    print(f"CKPT_EMU_POWER_CUT_SEED={SEED}")
    for i in range(5):
        time.sleep(rng.uniform(0.2, 1.5))
        if run.poll() is not None:
            break
        copies.append(tmp_path / f"cut{i}.img")
        _cut(run, dev, copies[-1])
    out, err = run.communicate(timeout=300)
    assert run.returncode == 0, err
    assert len(copies) >= 3, "the run ended before the cuts: make it longer"
    complete = [_check(c, tmp_path / f"m{i}", ranks=2) for i, c in enumerate(copies)]
    assert any(complete), "no cut found a complete checkpoint: the test would prove nothing"
    live = verify_dir_tier(mnt / "global", ranks=2)
    assert live  # and the run itself ended with complete checkpoints
