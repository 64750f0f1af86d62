"""A drain's checksum read-back comes after its copy, at the global tier's read rate: the drain's
phase anchor (a late-scheduled rank's copy books from the phase start) must not book the read-back
as if it had run beside the copy, which made it free."""
from __future__ import annotations

import asyncio
import os
import time

import pytest
from durations import assert_paced

from emulator.checkpoint.drainer import Drainer
from emulator.checkpoint.integrity import crc_of_stream
from emulator.checkpoint.layout import FileEntry
from tiers.base import TierWrapper
from tiers.directory import DirTier
from tiers import paced
from tiers.emulated import EmulatedTier, anchored_at, counted_as

MIB = 1 << 20


def _files(local: DirTier, count: int, size: int) -> list[FileEntry]:
    entries = []
    for i in range(count):
        key = f"step_00000001/r{i}.pt"
        asyncio.run(local.put(key, os.urandom(size)))
        with open(local.local_path(key), "rb") as fh:
            crc, n = crc_of_stream(fh, bytearray(MIB))
        entries.append(FileEntry(key, i, n, crc))
    return entries


def test_the_read_back_follows_the_copy_at_the_read_rate(tmp_path):
    """8 MiB copied at 16 MiB/s (0.5 s), then read back at 16 MiB/s (0.5 s): at least 1 s (it took
    0.5 s when the read-back was booked from the phase's start)."""
    local = DirTier(tmp_path / "local")
    data = os.urandom(8 * MIB)
    asyncio.run(local.put("step_00000001/r0.pt", data))
    with open(local.local_path("step_00000001/r0.pt"), "rb") as fh:
        crc, size = crc_of_stream(fh, bytearray(MIB))
    glob = EmulatedTier(DirTier(tmp_path / "global"), write_bps=16 * MIB, read_bps=16 * MIB)
    drainer = Drainer(local, glob, verify="checksum")
    t = time.perf_counter()
    with counted_as("drain"), anchored_at(time.time()):  # as the checkpointer runs a drain
        result = asyncio.run(drainer.drain([FileEntry("step_00000001/r0.pt", 0, size, crc)]))
    elapsed = time.perf_counter() - t
    assert result.ok, result.error
    assert_paced(elapsed, 2 * (8 * MIB) / (16 * MIB), "copy then read-back")


class _SlowUploads(TierWrapper):
    """A host that spends ``seconds`` on every upload before its bytes move (a request's own costs)."""

    def __init__(self, inner, seconds: float):
        super().__init__(inner)
        self.seconds = seconds

    def request_delay(self, what: str) -> float:
        return self.seconds if what.startswith("upload") else 0.0


def test_a_host_too_slow_for_the_pacing_shows_as_the_hosts_time(tmp_path):
    """8 files of 1 MiB, 4 at a time, at 8 MiB/s each way: the devices need 1 s of copies and the last
    file's read-back (1/8 s), 1.125 s. A host that spends 0.6 s on each upload takes at least 1.325 s
    (each slot uploads twice, then a read-back): the paced part stays 1.125 s and the rest is the host's
    (the read-backs and copies queued behind the late uploads made their spans cover all but 0.35 s)."""
    local = DirTier(tmp_path / "local")
    entries = _files(local, 8, MIB)
    glob = EmulatedTier(_SlowUploads(DirTier(tmp_path / "global"), 0.6), write_bps=8 * MIB, read_bps=8 * MIB,
                        shared_by="rank")
    drainer = Drainer(local, glob, verify="checksum", concurrency=4)
    assert drainer.floor_seconds([e.size for e in entries]) == 1.125
    with counted_as("drain"), anchored_at(time.time()):
        result = asyncio.run(drainer.drain(entries))
    assert result.ok, result.error
    assert_paced(result.seconds, 1.325, "two uploads a slot, then a read-back")
    assert drainer.paced_seconds("drain", result, [e.size for e in entries]) <= 1.125


@pytest.mark.alone  # a loaded host does not keep up: its delays leave gaps between the paced spans (1.094 s of 1.125)
def test_a_host_that_keeps_up_is_paced_throughout(tmp_path):
    """The same drain on a host with no upload costs: its paced part is the devices' whole 1.125 s,
    and the drain took at least that (what the host adds under load is not asserted: a wall-clock bound)."""
    local = DirTier(tmp_path / "local")
    entries = _files(local, 8, MIB)
    glob = EmulatedTier(DirTier(tmp_path / "global"), write_bps=8 * MIB, read_bps=8 * MIB, shared_by="rank")
    drainer = Drainer(local, glob, verify="checksum", concurrency=4)
    with counted_as("drain"), anchored_at(time.time()):
        result = asyncio.run(drainer.drain(entries))
    assert result.ok, result.error
    paced_s = drainer.paced_seconds("drain", result, [e.size for e in entries])
    assert paced_s == pytest.approx(1.125, rel=0.02)
    assert_paced(result.seconds, paced_s, "the devices' floor")


def test_no_floor_where_another_transfer_may_share_the_devices(tmp_path):
    """A NIC the peer copies also cross, or a bucket per call: the drain's floor is unknown (None), and
    its paced part is its spans'."""
    local = DirTier(tmp_path / "local")
    with_nic = EmulatedTier(DirTier(tmp_path / "g1"), write_bps=8 * MIB, read_bps=8 * MIB, shared_by="rank",
                            nic_bps=16 * MIB)
    per_call = EmulatedTier(DirTier(tmp_path / "g2"), write_bps=8 * MIB, read_bps=8 * MIB, shared_by="none")
    for dest in (with_nic, per_call):
        assert Drainer(local, dest, verify="checksum", concurrency=4).floor_seconds([MIB] * 8) is None


def test_a_write_sharing_the_source_device_during_the_drain_is_the_designs_time(tmp_path):
    """The slow host's drain again, its files read from a device that reads and writes share (not
    duplex): with no write on it meanwhile the paced part is the devices' floor; where the next
    checkpoint's write used the device during the drain, the drain's extra time may be the design's
    own sharing, and all of its paced spans count."""
    src = EmulatedTier(DirTier(tmp_path / "local"), write_bps=64 * MIB, read_bps=64 * MIB, shared_by="rank",
                       duplex=False)
    entries = _files(src.inner, 8, MIB)
    glob = EmulatedTier(_SlowUploads(DirTier(tmp_path / "global"), 0.6), write_bps=8 * MIB, read_bps=8 * MIB,
                        shared_by="rank")
    drainer = Drainer(src, glob, verify="checksum", concurrency=4)
    with counted_as("drain"), anchored_at(time.time()):
        result = asyncio.run(drainer.drain(entries))
    sizes = [e.size for e in entries]
    floor = drainer.floor_seconds(sizes)
    assert drainer.paced_seconds("drain", result, sizes) == floor
    paced.record("local_write", result.start + 0.1, result.start + 0.2)  # the next checkpoint's write
    assert drainer.paced_seconds("drain", result, sizes) > floor


# --------------------------------------------------------------------------- a bare directory: read back while copying

class _CountsReads(DirTier):
    """A bare directory tier that counts the objects opened to read."""

    opened = 0

    def open_read(self, key):
        type(self).opened += 1
        return super().open_read(key)


def test_a_directory_copy_is_read_back_while_it_is_copied_not_after(tmp_path):
    """A bare directory tier reads its copy back a chunk behind the copy, on its own thread (issue 58:
    the read-back after the copy cost 1.13x the drain); the drain opens no reader after it."""
    local, glob = DirTier(tmp_path / "local"), _CountsReads(tmp_path / "global")
    entries = _files(local, 3, 3 * MIB + 5)
    result = asyncio.run(Drainer(local, glob, verify="checksum", concurrency=2).drain(entries))
    assert result.ok, result.error
    assert _CountsReads.opened == 0
    for e in entries:
        assert glob.local_path(e.key).read_bytes() == local.local_path(e.key).read_bytes()


def test_the_overlapped_read_back_reads_the_copy_not_the_source(tmp_path, monkeypatch):
    """A copy whose destination holds a wrong byte (the same size) is caught by the read-back that runs
    beside it, retried, and abandoned: the read-back reads what the destination holds."""
    from emulator.checkpoint.retry import RetryPolicy
    from tiers import fileops
    flips = []

    def flipping(method):
        def copy(src_fd, dst_fd, n):  # moves the chunk, then one byte of it is wrong
            done = method(src_fd, dst_fd, n)
            at = os.lseek(dst_fd, 0, os.SEEK_CUR) - done // 2 - 1
            os.pwrite(dst_fd, bytes([os.pread(dst_fd, 1, at)[0] ^ 1]), at)
            flips.append(at)
            return done
        return copy

    for name in ("_copy_file_range", "_sendfile", "_read_write"):
        monkeypatch.setattr(fileops, name, flipping(getattr(fileops, name)))
    local, glob = DirTier(tmp_path / "local"), DirTier(tmp_path / "global")
    entries = _files(local, 1, 2 * MIB)
    drainer = Drainer(local, glob, verify="checksum", policy=RetryPolicy(retries=1, backoff_s=0.0))
    result = asyncio.run(drainer.drain(entries))
    assert not result.ok and "checksum" in result.error and result.retries == 1 and flips
