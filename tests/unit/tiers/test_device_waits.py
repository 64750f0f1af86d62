"""What an emulated tier counts: the seconds its transfers waited on the emulated device beyond
their real I/O, per phase the caller names (``counted_as``) and per direction, for the report's
"which phases waited on which device"."""
from __future__ import annotations

import asyncio
import os

import pytest
from fakeclock import FakeClock

from tiers.emulated import EmulatedTier, counted_as, device_waits
from tiers.faulty import FaultyTier
from tiers.memory import MemoryTier

GIB, MIB = 1 << 30, 1 << 20


def _on_a_fake_clock(**kw) -> EmulatedTier:
    """An emulated memory tier on virtual time: its real I/O takes none, so each transfer waits
    exactly its paced n / rate (on the real clock, a copy slowed by another worker's load waited less)."""
    clock = FakeClock()

    async def async_sleep(delay: float) -> None:
        clock.sleep(delay)
    return EmulatedTier(MemoryTier(), clock=clock, sleep=clock.sleep, async_sleep=async_sleep, **kw)


def test_waits_are_counted_per_phase_and_direction():
    rate, n = 0.05 * GIB, 16 * MIB
    tier = _on_a_fake_clock(write_bps=rate, read_bps=rate, shared_by="rank", duplex=False)
    with counted_as("local_write"):
        asyncio.run(tier.put("a/x.pt", os.urandom(n)))
    with counted_as("restore"):
        with tier.open_read("a/x.pt") as fh:
            while fh.read(MIB):
                pass
    waits = device_waits(tier)
    assert waits["shared"] is True
    for phase, direction in (("local_write", "write"), ("restore", "read")):
        assert waits["waits"][phase][direction] == pytest.approx(n / rate), waits
    assert set(waits["waits"]) == {"local_write", "restore"}


def test_a_sink_counts_its_wait_at_commit_and_wrappers_are_seen_through():
    rate, n = 0.05 * GIB, 8 * MIB
    tier = _on_a_fake_clock(write_bps=rate, duplex=True)
    with counted_as("drain"):
        with tier.open_write("a/y.pt") as sink:
            sink.write(os.urandom(n))
    waits = device_waits(FaultyTier(tier))  # found behind another wrapper
    assert waits["shared"] is False
    assert waits["waits"]["drain"]["write"] == pytest.approx(n / rate), waits


def test_a_tier_that_emulates_nothing_has_no_waits():
    assert device_waits(MemoryTier()) is None



def test_the_report_says_which_phases_waited_on_which_device():
    from emulator.results.report import _device_wait_lines
    from emulator.results.summary import device_wait_summary
    ranks = [{"device_waits": {"local": {"shared": True, "waits": {"drain": {"read": 0.5},
                                                                   "local_write": {"write": 1.0}}},
                               "global": None}},
             {"device_waits": {"local": {"shared": True, "waits": {"local_write": {"write": 2.0}}},
                               "global": {"shared": False, "waits": {"drain": {"write": 3.0}}}}}]
    summary = device_wait_summary(ranks)
    assert summary["local"]["waits"] == {"local_write": {"write": 2.0}, "drain": {"read": 0.5}}  # worst rank
    lines = _device_wait_lines({"device_waits": summary})
    rows = [line.split() for line in lines[3:]]
    assert rows == [["local", "write", "write", "local", "device", "2.00", "s", "yes"],
                    ["drain", "read", "local", "device", "500.0", "ms", "yes"],
                    ["drain", "write", "global", "share", "3.00", "s", "no"]], lines
