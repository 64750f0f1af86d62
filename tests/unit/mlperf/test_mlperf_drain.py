"""The MLPerf protocol's drain from a local tier without a local path (host memory) to the global tier."""
from __future__ import annotations

import asyncio


def test_a_drain_passes_no_file_bytes_through_asyncio_run(monkeypatch):
    """On CPython 3.11 ``asyncio.run`` in the main thread spends CPU in proportion to a bytes
    result (it formats the task's repr): the drain copies each file inside one coroutine."""
    from emulator.mlperf import protocol as mlperf
    from tiers.memory import MemoryTier

    results = []
    real_run = asyncio.run

    def spying_run(coro, **kw):
        result = real_run(coro, **kw)
        results.append(result)
        return result

    monkeypatch.setattr(asyncio, "run", spying_run)
    rank = object.__new__(mlperf.MlperfRank)  # only the tiers and files the drain uses
    rank.local, rank.global_ = MemoryTier(), MemoryTier()
    rank.files = [mlperf.RankFile("model.pt", ()), mlperf.RankFile("optim.pt", ())]
    data = {mlperf.file_key(3, f): bytes([i]) * (1 << 20) for i, f in enumerate(rank.files)}
    for key, blob in data.items():
        real_run(rank.local.put(key, blob))
    rank._drain(3)
    assert {key: real_run(rank.global_.get(key)) for key in data} == data
    kinds = [type(r).__name__ for r in results]
    assert kinds and not {"bytes", "bytearray", "memoryview"} & set(kinds), kinds
