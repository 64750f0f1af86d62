"""What an emulated tier counts: the seconds its transfers waited on the emulated device beyond
their real I/O, per phase the caller names (``counted_as``) and per direction, for the report's
"which phases waited on which device"."""
from __future__ import annotations

import asyncio
import os

import pytest

from tiers.emulated import EmulatedTier, counted_as, device_waits
from tiers.faulty import FaultyTier
from tiers.memory import MemoryTier

GIB, MIB = 1 << 30, 1 << 20


def test_waits_are_counted_per_phase_and_direction():
    rate, n = 0.25 * GIB, 16 * MIB
    tier = EmulatedTier(MemoryTier(), write_bps=rate, read_bps=rate, shared_by="rank", duplex=False)
    with counted_as("local_write"):
        asyncio.run(tier.put("a/x.pt", os.urandom(n)))
    with counted_as("restore"):
        with tier.open_read("a/x.pt") as fh:
            while fh.read(MIB):
                pass
    waits = device_waits(tier)
    assert waits["shared"] is True
    # a memory tier's real I/O is next to nothing: each transfer waited about n / rate
    assert waits["waits"]["local_write"]["write"] == pytest.approx(n / rate, rel=0.3)
    assert waits["waits"]["restore"]["read"] == pytest.approx(n / rate, rel=0.3)
    assert set(waits["waits"]) == {"local_write", "restore"}


def test_a_sink_counts_its_wait_at_commit_and_wrappers_are_seen_through():
    rate, n = 0.25 * GIB, 8 * MIB
    tier = EmulatedTier(MemoryTier(), write_bps=rate, duplex=True)
    with counted_as("drain"):
        with tier.open_write("a/y.pt") as sink:
            sink.write(os.urandom(n))
    waits = device_waits(FaultyTier(tier))  # found behind another wrapper
    assert waits["shared"] is False
    assert waits["waits"]["drain"]["write"] == pytest.approx(n / rate, rel=0.3)


def test_a_tier_that_emulates_nothing_has_no_waits():
    assert device_waits(MemoryTier()) is None

