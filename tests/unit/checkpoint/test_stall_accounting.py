"""What a checkpoint's stall is made of: the job's own work, never the emulator's bookkeeping.

The rank journals each checkpoint as it starts (so a killed attempt's checkpoints are
counted). That append is the tool's, not the training job's: on a slow results folder it
inflated the async stall and was reported as a wait for the previous checkpoint, which
the simulator's calibration then subtracted as queueing it would model itself.
"""
from __future__ import annotations

import time

from emulator.checkpoint.checkpointer import Checkpointer
from emulator.config import load_config
from emulator.rank.comm import SoloComm
from emulator.workload.state import RankState
from tiers.directory import DirTier

JOURNAL_S = 0.2  # a results folder on a slow shared filesystem


def test_journaling_a_checkpoint_is_not_part_of_its_stall(tmp_path):
    cfg = load_config("llama3-8b", ["run.scale=0.0002", "parallelism.ranks=1"])
    state = RankState.from_config(cfg, 0)

    def slow_journal(rec, event):
        time.sleep(JOURNAL_S)

    ckpt = Checkpointer(state, DirTier(tmp_path / "l"), DirTier(tmp_path / "g"), SoloComm(), keep=2,
                        on_record=slow_journal)
    try:
        first = ckpt.checkpoint(1, "async")
        ckpt.finish()  # the previous checkpoint is over before the next one starts: nothing to wait for
        second = ckpt.checkpoint(2, "async")
    finally:
        ckpt.close()
    for rec in (first, second):
        assert not rec.missed
        assert rec.wait_s < JOURNAL_S / 2, rec
        assert rec.stall_s < JOURNAL_S / 2 + rec.snapshot_s, rec
