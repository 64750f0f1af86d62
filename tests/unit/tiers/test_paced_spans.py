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
