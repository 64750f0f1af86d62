"""An emulated write takes max(real time of write + commit, bytes/rate + latency), on every path.

The emulated device's time (its bandwidth and its request latency) and the real
backend's own time (a DirTier's fsync, an upload) overlap; neither adds to the other.
Before, a sink was paced write by write and only then paid the real commit, so
64 MiB at 0.5 GiB/s with a 0.2 s commit took 0.325 s instead of 0.2 s.
"""
import asyncio
import statistics
import time

import pytest
from fakeclock import FakeClock

from tiers.base import Sink
from tiers.emulated import GIB, MIB, EmulatedTier
from tiers.memory import MemoryTier

NBYTES = 64 * MIB
CHUNK = 4 * MIB


class SlowCommitSink(Sink):
    """Discards its bytes; the commit takes ``real_s`` (a backend's fsync or upload)."""

    def __init__(self, sleep, real_s):
        self._sleep, self._real_s = sleep, real_s

    def write(self, data) -> int:
        return memoryview(data).nbytes

    def commit(self) -> None:
        self._sleep(self._real_s)

    def abort(self) -> None:
        pass


class SlowTier(MemoryTier):
    """Every write (put, put_file, a sink's commit) takes ``real_s`` and keeps nothing."""

    def __init__(self, sleep, real_s):
        super().__init__()
        self._sleep, self._real_s = sleep, real_s

    async def put(self, key, data) -> None:
        self._sleep(self._real_s)

    async def put_file(self, key, src) -> None:
        self._sleep(self._real_s)

    def open_write(self, key) -> Sink:
        return SlowCommitSink(self._sleep, self._real_s)


def write(tier: EmulatedTier, path: str, src) -> None:
    """Write NBYTES to ``tier`` through ``path``: put, put_file or a streamed sink."""
    chunk = memoryview(bytes(CHUNK))
    if path == "put":
        asyncio.run(tier.put("k", bytes(NBYTES)))
    elif path == "put_file":
        asyncio.run(tier.put_file("k", src))
    else:
        with tier.open_write("k") as sink:
            for _ in range(NBYTES // CHUNK):
                sink.write(chunk)


@pytest.fixture
def src(tmp_path):
    path = tmp_path / "src"
    with open(path, "wb") as f:
        f.truncate(NBYTES)  # sparse: only its size matters
    return path


PATHS = ["put", "put_file", "sink"]
# (real write+commit s, rate GiB/s, latency s): the real commit dominates, then the pacing does
CASES = [(0.2, 0.5, 0.0), (0.2, 0.5, 0.02), (0.05, 0.25, 0.0), (0.05, 0.25, 0.02), (0.0, 0.5, 0.02)]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("real_s, rate_gib_s, latency_s", CASES)
def test_real_time_and_emulated_time_overlap_on_a_fake_clock(path, real_s, rate_gib_s, latency_s, src):
    clock = FakeClock()
    tier = EmulatedTier(SlowTier(clock.advance, real_s), write_bps=rate_gib_s * GIB, latency_s=latency_s,
                        clock=clock, sleep=clock.sleep)
    write(tier, path, src)
    expected = max(real_s, NBYTES / (rate_gib_s * GIB) + latency_s)
    assert clock.latest == pytest.approx(expected, rel=0.02)


def test_latency_alone_overlaps_the_real_write(src):
    """No rate: a write takes max(real, latency), not their sum."""
    for path in PATHS:
        clock = FakeClock()
        tier = EmulatedTier(SlowTier(clock.advance, 0.05), latency_s=0.02, clock=clock, sleep=clock.sleep)
        write(tier, path, src)
        assert clock.latest == pytest.approx(0.05), path


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("real_s, rate_gib_s", [(0.2, 0.5), (0.08, 0.25)])
def test_real_time_and_emulated_time_overlap_for_real(path, real_s, rate_gib_s, src):
    """The same on the real clock, with a backend whose write really takes ``real_s`` (a real
    DirTier's fsync on this shared disk varies from 0.08 s to 0.5 s run to run: no baseline)."""
    tier = EmulatedTier(SlowTier(time.sleep, real_s), write_bps=rate_gib_s * GIB)

    def once():
        t0 = time.perf_counter()
        write(tier, path, src)
        return time.perf_counter() - t0
    expected = max(real_s, NBYTES / (rate_gib_s * GIB))  # 0.2 s (the commit), then 0.25 s (the pacing)
    assert statistics.median(once() for _ in range(3)) == pytest.approx(expected, rel=0.15)

