"""checkpoint.async_waits_for: local_write: the next async checkpoint waits only for the previous
one's local write, while that one's drain runs on; drains and global commits stay in order, and a
tier still holds at most keep + 1 checkpoints."""
from __future__ import annotations

import asyncio
import os

import pytest
from emu import refused
from rundesign import rank_state

from emulator.checkpoint.checkpointer import Checkpointer
from emulator.config import load_config
from emulator.rank.comm import SoloComm
from tiers.base import TierWrapper, unwrap
from tiers.directory import DirTier
from tiers.emulated import EmulatedTier

GIB = 1 << 30


def _state():
    cfg = load_config("llama3-8b", ["run.scale=0.0002", "parallelism.ranks=1"])  # 2.7 MiB
    return rank_state(cfg, 0)


def _run(ckpt, steps):
    try:
        return [ckpt.checkpoint(step, "async") for step in steps], ckpt.finish()
    finally:
        ckpt.close()


@pytest.mark.parametrize("waits_for", ["complete", "local_write"])
def test_the_next_checkpoint_waits_for_the_drain_only_when_told(tmp_path, waits_for):
    state = _state()
    glob = EmulatedTier(DirTier(tmp_path / "g"), write_bps=0.01 * GIB)  # a drain of ~0.26 s
    drain_s = state.nbytes / (0.01 * GIB)
    ckpt = Checkpointer(state, DirTier(tmp_path / "l"), glob, SoloComm(), keep=3, async_waits_for=waits_for)
    recs, _ = _run(ckpt, [1, 2, 3])
    assert all(r.global_complete for r in recs), [r.error for r in recs]
    assert recs[1].missed  # the drain of 1 was running when 2 was due, either way
    if waits_for == "complete":
        assert recs[1].wait_s > 0.8 * drain_s, recs[1]
    else:  # in order, not by duration (a loaded host slows the wait's own work too)
        waited_until = [r.start + r.wait_s for r in recs]
        assert waited_until[1] < recs[0].durable_at, recs[:2]  # 2 went on while 1 drained
        # 3 waits for 1 to be complete (one drain behind at most), not for 2
        assert recs[0].durable_at <= waited_until[2] < recs[1].durable_at, recs
    durable = [r.durable_at for r in recs]
    assert durable == sorted(durable) and durable[0] > 0  # global commits in checkpoint order
    drains = sorted((e.start, e.end) for e in ckpt.events if e.kind == "drain")
    assert all(a[1] <= b[0] for a, b in zip(drains, drains[1:])), drains  # one drain at a time


class _CountsSteps(TierWrapper):
    """Records, at each file's write, how many other checkpoints the directory holds."""

    def __init__(self, inner, seen):
        super().__init__(inner)
        self.seen = seen

    def open_write(self, key):
        step = key.split("/")[0]
        others = [d for d in os.listdir(unwrap(self.inner).root) if d.startswith("step_") and d != step]
        if not key.endswith("manifest.json"):
            self.seen.append(len(others))
        return self.inner.open_write(key)


def test_an_overlapped_write_keeps_the_local_tier_within_keep_plus_one(tmp_path):
    """A slow local write, a quick drain: the drain of N ends (and its retention runs) while N + 1 is
    written, before N + 1 is complete locally; the write of N + 2 must not find keep + 1 others."""
    seen = []
    local = _CountsSteps(EmulatedTier(DirTier(tmp_path / "l"), write_bps=0.02 * GIB), seen)
    ckpt = Checkpointer(_state(), local, DirTier(tmp_path / "g"), SoloComm(), keep=1,
                        async_waits_for="local_write")
    recs, _ = _run(ckpt, [1, 2, 3, 4, 5])
    assert all(r.global_complete for r in recs)
    assert len(seen) == 5 and max(seen) <= 1, seen


class _SlowDeletes(TierWrapper):
    """Deletes nothing while ``hold``; then each delete takes a while, and records which task made it."""

    def __init__(self, inner):
        super().__init__(inner)
        self.hold, self.deletes = True, []

    async def delete(self, key):
        if self.hold:
            return
        task = asyncio.current_task()
        self.deletes.append(("begin", task))
        await asyncio.sleep(0.02)
        await self.inner.delete(key)
        self.deletes.append(("end", task))


def test_retentions_on_one_node_run_one_at_a_time(tmp_path):
    """The housekeeping of checkpoint N and the write stage of N + 2 may both apply the local
    retention. Interleaved, one finds the folder of the step the other is deleting already empty
    and returns while that folder is still there: the write of N + 2 then finds keep + 1 others."""
    local = _SlowDeletes(DirTier(tmp_path / "l"))
    ckpt = Checkpointer(_state(), local, DirTier(tmp_path / "g"), SoloComm(), keep=1)
    try:
        for step in (1, 2):
            ckpt.checkpoint(step, "sync")
        ckpt.finish()
        local.hold = False
        ckpt.ctx.node_steps["local"] = {1, 2}

        async def retain_and_look():
            await ckpt.retention.node_tiers()
            return "step_00000001" in os.listdir(tmp_path / "l")

        async def twice():
            return await asyncio.gather(retain_and_look(), retain_and_look())
        still_there = ckpt.loop.run(twice())
    finally:
        ckpt.close()
    assert still_there == [False, False]  # when either returns, the step it deleted is gone
    tasks = [task for _, task in local.deletes]
    assert tasks and tasks == sorted(tasks, key=tasks.index), [k for k, _ in local.deletes]  # not interleaved


def test_an_unknown_wait_is_one_line_naming_the_key(tmp_path, capsys):
    line = refused(capsys, "run", "llama3-8b", "--set", "checkpoint.async_waits_for=drain", "--out", tmp_path / "out")
    assert "checkpoint.async_waits_for" in line and not (tmp_path / "out").exists()


# ------------------------------------------------------------------ real runs
