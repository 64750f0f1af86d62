"""What a checkpoint's stall is made of: the job's own work, never the emulator's bookkeeping.

The rank journals each checkpoint as it starts and once it is over (so a killed attempt's
checkpoints are counted). Those appends are the tool's, not the training job's: on a slow
results folder the start line inflated the async stall and was reported as a wait for the
previous checkpoint, which the simulator's calibration then subtracted as queueing it would
model itself; the end line, written inside the pipeline, was a sync checkpoint's stall.
"""
from __future__ import annotations

import threading
import time

import pytest
from rundesign import rank_state

from emulator.checkpoint.checkpointer import Checkpointer
from emulator.config import load_config
from emulator.rank.comm import SoloComm
from tiers.directory import DirTier

JOURNAL_S = 0.2  # a results folder on a slow shared filesystem
HELD_S = 5.0  # how long a held journal line waits to be let go before it gives up


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_journaling_a_checkpoint_is_not_part_of_its_stall(tmp_path, mode):
    """The stall's clock starts once the journal has the checkpoint's start, and stops before the
    journal has its end (written beside the loop): an order of events, not a bound on wall time
    (the journal is slow, so either mistake would put its 0.2 s inside the stall)."""
    cfg = load_config("llama3-8b", ["run.scale=0.0002", "parallelism.ranks=1"])
    state = rank_state(cfg, 0)
    journaled = {}

    def slow_journal(rec, event):
        began = time.time()
        time.sleep(JOURNAL_S)
        journaled[rec.step, event] = (began, time.time())

    ckpt = Checkpointer(state, DirTier(tmp_path / "l"), DirTier(tmp_path / "g"), SoloComm(), keep=2,
                        on_record=slow_journal)
    try:
        first = ckpt.checkpoint(1, mode)
        ckpt.finish()  # the previous checkpoint is over before the next one starts: nothing to wait for
        second = ckpt.checkpoint(2, mode)
        ckpt.finish()
    finally:
        ckpt.close()
    for rec in (first, second):
        started, finished = journaled[rec.step, "started"], journaled[rec.step, "finished"]
        assert not rec.missed, rec
        assert rec.start >= started[1], "the stall's clock started before the journal had its line"
        assert rec.start + rec.stall_s < finished[1], "the stall holds the journal of the checkpoint's end"
        assert rec.wait_s <= rec.stall_s


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_loop_goes_on_while_a_checkpoints_end_is_journaled(tmp_path, mode):
    """Held "finished" lines: a sync checkpoint returns, and the next async checkpoint stops waiting
    for the previous one, while the journal still writes the end of it; its "started" line is in
    before any write. The journal lets go once the loop has gone on, or gives up after HELD_S."""
    cfg = load_config("llama3-8b", ["run.scale=0.0002", "parallelism.ranks=1"])
    state = rank_state(cfg, 0)
    local = DirTier(tmp_path / "l")
    go_on, journaled, files_at_start = threading.Event(), {}, {}

    def held_journal(rec, event):
        if event == "started":
            files_at_start[rec.step] = sorted(p.name for p in (tmp_path / "l").rglob("*") if p.is_file())
        else:
            journaled[rec.step] = go_on.wait(HELD_S)  # True: let go by the loop, not given up

    ckpt = Checkpointer(state, local, DirTier(tmp_path / "g"), SoloComm(), keep=3, on_record=held_journal)
    try:
        ckpt.checkpoint(1, mode)
        ckpt.checkpoint(2, mode)  # async: waits for the first checkpoint's pipeline, not its journal line
        go_on.set()
        ckpt.finish()
    finally:
        ckpt.close()
    assert journaled == {1: True, 2: True}, "the loop waited for the journal of a checkpoint's end"
    assert files_at_start[1] == [] and not any("step_00000002" in f for f in files_at_start[2]), files_at_start
