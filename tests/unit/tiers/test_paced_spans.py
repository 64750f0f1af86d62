"""Paced spans: the part of a phase's time that is the emulated device's (tiers/paced.py), counted
once where several ranks' spans overlap, and including the device's time for bytes the host read
after they were due."""
from __future__ import annotations

import asyncio
import time

import pytest

from tiers import paced as spans
from tiers.emulated import EmulatedTier, anchored_at, counted_as
from tiers.memory import MemoryTier

MB = 1_000_000


def test_bytes_a_host_read_after_they_were_due_are_still_the_devices_time():
    """A restore reads many small tensors: the host's work between them can leave a read later than
    the device, streaming from the anchor, would have delivered its bytes. Those bytes were still
    the device's time (1 MB at 10 MB/s: 0.1 s from the anchor); before, such a read logged no span,
    and the design's time was counted as this host's, once."""
    inner = MemoryTier()
    asyncio.run(inner.put("k", b"x" * MB))
    tier = EmulatedTier(inner, read_bps=10 * MB, shared_by="rank")
    spans.clear()
    t0 = time.time()
    with counted_as("restore"), anchored_at(t0):
        time.sleep(0.25)  # the host's own work, longer than the device needs for the bytes
        with tier.open_read("k") as fh:
            assert len(fh.read()) == MB
    assert spans.seconds("restore", t0, time.time()) == pytest.approx(0.1, abs=0.02)
    spans.clear()


def test_the_spans_of_ranks_sharing_a_device_are_counted_once():
    """Two ranks' reads on one node's device: the union of their spans, merged per rank first."""
    spans.clear()
    t = time.time()
    spans.record("restore", t, t + 0.1)
    spans.record("restore", t + 0.05, t + 0.2)
    mine = spans.spans("restore", t, t + 1)
    assert mine == [(t, t + 0.2)]
    other = [(t + 0.3, t + 0.4)]
    assert spans.covered(mine + other, t, t + 1) == pytest.approx(0.3)
    assert spans.covered(mine + other, t + 0.1, t + 0.35) == pytest.approx(0.15)
    spans.clear()


@pytest.mark.parametrize("late_s", [0.05, 0.25])
def test_a_whole_object_put_late_in_its_phase_is_still_the_devices_time(late_s):
    """A drain's copy (a put) this host began ``late_s`` after its phase's anchor: the device, streaming
    from the anchor, had its 1 MB at 10 MB/s 0.1 s after it, and those 0.1 s are the device's. Before,
    the span began when the put did (0.05 s of 0.1; none where the put ended past its due time), and a
    drain under load reported a full-size time below the design's (14.5 s against 16.5 s)."""
    tier = EmulatedTier(MemoryTier(), write_bps=10 * MB, shared_by="rank")
    spans.clear()
    t0 = time.time()
    with counted_as("drain"), anchored_at(t0):
        time.sleep(late_s)  # the host's own work before the copy began
        asyncio.run(tier.put("k", b"x" * MB))
    assert spans.seconds("drain", t0, time.time()) == pytest.approx(0.1, abs=0.02)
    spans.clear()
