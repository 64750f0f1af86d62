"""The local device as one device: a drain reads it through its emulated read rate and latency, and
unless it is duplex, that read shares the device with the next checkpoint's write."""
from __future__ import annotations

import asyncio
import os
import time


from emulator.checkpoint.drainer import Drainer
from emulator.checkpoint.integrity import crc_of_stream
from emulator.checkpoint.layout import FileEntry
from tiers.directory import DirTier
from tiers.emulated import EmulatedTier
from tiers.memory import MemoryTier

GIB, MIB = 1 << 30, 1 << 20


def test_a_drain_reads_the_local_tier_at_its_emulated_rate(tmp_path):
    """16 MiB from a local tier emulated at 0.05 GiB/s with 50 ms per request: at least 0.36 s
    (it took 0.014 s when the drain read the file behind the emulation's back)."""
    local = EmulatedTier(DirTier(tmp_path / "local"), read_bps=0.05 * GIB, latency_s=0.05)
    data = os.urandom(16 * MIB)
    asyncio.run(local.inner.put("step_00000001/r0.pt", data))
    with open(local.local_path("step_00000001/r0.pt"), "rb") as fh:
        crc, size = crc_of_stream(fh, bytearray(MIB))
    entry = FileEntry("step_00000001/r0.pt", 0, size, crc)
    drainer = Drainer(local, DirTier(tmp_path / "global"), verify="size")
    t = time.perf_counter()
    result = asyncio.run(drainer.drain([entry]))
    elapsed = time.perf_counter() - t
    assert result.ok, result.error
    expected = 16 * MIB / (0.05 * GIB) + 0.05
    assert elapsed >= expected * 0.95, elapsed  # paced: never faster than the emulated rate


def _write_while_reading(tier, n: int) -> tuple[float, float]:
    """Seconds a put of n bytes and a drain-style read of n bytes take when they run together."""
    payload = os.urandom(n)

    async def timed(coro):
        t = time.perf_counter()
        await coro
        return time.perf_counter() - t

    async def both():
        return await asyncio.gather(timed(tier.put("next/w.pt", payload)), timed(tier.read_from_path("old/r.pt", n)))
    return tuple(asyncio.run(both()))


def test_a_shared_device_slows_a_write_and_a_read_that_overlap():
    """0.5 GiB/s each way: alone, 64 MiB takes B/rate; a write and a read together on one device take
    2B/rate each (the device's time is shared); a duplex device gives each its own path. Pacing
    guarantees the lower bounds; duplex against shared is a ratio of two times measured here."""
    rate, n = 0.5 * GIB, 64 * MIB
    alone = n / rate

    def slowest(duplex: bool) -> float:
        tier = EmulatedTier(MemoryTier(), write_bps=rate, read_bps=rate, shared_by="rank", duplex=duplex)
        return max(_write_while_reading(tier, n))
    shared, duplex = slowest(False), slowest(True)
    assert shared >= 0.95 * 2 * alone, shared
    assert duplex >= 0.95 * alone, duplex
    assert shared >= 1.5 * duplex, (shared, duplex)  # 2x when nothing else runs


def test_the_design_makes_the_local_device_shared_unless_duplex(tmp_path):
    import yaml

    from emulator.config import load_config
    from emulator.design import run_emulation
    cfg = {"extends": "llama3-8b", "tiers": {"local": {"backend": "dir", "path": str(tmp_path / "l")},
                                             "global": {"backend": "dir", "path": str(tmp_path / "g")}},
           "design": {"node": {"local": {"write": "2GB/s", "read": "2GB/s"}}, "global": {"write": "1GB/s"}}}
    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert run_emulation(load_config(str(path)), "local").duplex is False
    assert run_emulation(load_config(str(path), ["design.node.local.duplex=true"]), "local").duplex is True
