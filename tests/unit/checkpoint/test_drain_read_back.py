"""A drain's checksum read-back comes after its copy, at the global tier's read rate: the drain's
phase anchor (a late-scheduled rank's copy books from the phase start) must not book the read-back
as if it had run beside the copy, which made it free."""
from __future__ import annotations

import asyncio
import os
import time

from durations import assert_paced

from emulator.checkpoint.drainer import Drainer
from emulator.checkpoint.integrity import crc_of_stream
from emulator.checkpoint.layout import FileEntry
from tiers.directory import DirTier
from tiers.emulated import EmulatedTier, anchored_at, counted_as

MIB = 1 << 20


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
