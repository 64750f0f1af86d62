"""A rank's snapshot: a paced one on the CPU swaps the live and staging buffers (the design's copy is
a DMA the emulator paces; a memmove on this host's cores set the run's dilation at x50-125 on 2
cores for the documented 48 GiB/s per accelerator), and every checkpoint's bytes stay fresh."""
from __future__ import annotations

import dataclasses
import zlib

import torch

from rundesign import run_design

from emulator.config import load_config
from emulator.workload.content import BLOCK
from emulator.workload.state import RankState

INTERVAL = 4


def _state() -> RankState:
    cfg = load_config(None, ["run.scale=0.0002"])
    return RankState(cfg.model, cfg.parallelism, rank=0, scale=0.0002, update_slices=INTERVAL)


def _bytes(state, which: str) -> bytes:
    return b"".join(t.view(-1).view(torch.uint8).numpy().tobytes() for t in state.tensors(which))


def _blocks(data: bytes) -> set:
    return {data[i:i + BLOCK] for i in range(0, len(data) - BLOCK + 1, BLOCK)}


def test_a_paced_snapshot_on_the_cpu_swaps_the_buffers_without_copying():
    state = _state()
    assert _bytes(state, "staging") == _bytes(state, "live")  # filled at start (Stager.host_buffers)
    live = [t.data_ptr() for t in state.tensors("live")]
    before = _bytes(state, "live")
    timing = state.snapshot(paced=True)
    assert [t.data_ptr() for t in state.tensors("staging")] == live and timing.seconds == 0.0
    assert _bytes(state, "staging") == before


def test_an_unpaced_snapshot_copies():
    state = _state()
    staging = [t.data_ptr() for t in state.tensors("staging")]
    state.mutate(1)
    state.snapshot()
    assert [t.data_ptr() for t in state.tensors("staging")] == staging
    assert _bytes(state, "staging") == _bytes(state, "live")


def test_every_checkpoint_of_swapped_buffers_is_fresh_bytes():
    """Training re-keys every slice of the older live buffer before the next snapshot: no block of a
    checkpoint repeats one of an earlier checkpoint's, nor any other of its own, and none compresses."""
    state, seen, step = _state(), set(), 0
    for _ in range(4):
        for _ in range(INTERVAL):
            step += 1
            state.mutate(step)
        state.snapshot(paced=True)
        data = _bytes(state, "staging")
        blocks = _blocks(data)
        assert len(blocks) == len(data) // BLOCK and not blocks & seen
        assert len(zlib.compress(data, 1)) > 0.99 * len(data)  # nothing for a compressing store either
        seen |= blocks


def test_a_checkpoint_of_swapped_buffers_holds_its_steps_state():
    """A checkpoint's bytes are the state at its step, as a rank that never swapped has it (a test
    compares restored files with that replay: the XOR re-keying of before made the swapped buffer's
    bytes depend on its own history, and the S3 design's restored files differed from it)."""
    swapped, copied, step = _state(), _state(), 0
    for _ in range(3):
        for _ in range(INTERVAL):
            step += 1
            swapped.mutate(step)
            copied.mutate(step)
        swapped.snapshot(paced=True)
        assert _bytes(swapped, "staging") == _bytes(copied, "live")


def test_a_runs_state_is_rekeyed_whole_over_the_designs_interval_not_the_configs():
    """A run's state takes its interval from the run's design (design.json), not from the config:
    over the design's interval every block is re-keyed, so its next checkpoint repeats none of the
    last one's (re-keyed over the config's 8 steps, half of them would repeat)."""
    cfg = load_config(None, ["run.scale=0.0002", "checkpoint.interval_steps=8"])
    design = dataclasses.replace(run_design(cfg), interval_steps=INTERVAL)
    state = RankState.of_run(cfg, design, 0)
    before = _blocks(_bytes(state, "live"))
    for step in range(1, INTERVAL + 1):
        state.mutate(step)
    repeated = len(_blocks(_bytes(state, "live")) & before)
    assert repeated == 0, f"{repeated} of {len(before)} blocks of the last checkpoint repeat"
