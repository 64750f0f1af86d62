"""A rank's file is paced as its share of the design's bytes: torch.save's structure (a zip entry
and pickle record per tensor, ~280 bytes each) does not shrink with run.scale.

design-llama70-128-nvme-s3 at its scale 0.005 writes 489 tensors a rank, 4.92 MB in a file for
4.78 MB of state: paced as file bytes, its write, drain and restore read 2.6-2.9 % over their
closed forms at full size (the structure's 136 KB x 1/scale); at scale 0.001, 14 %.
"""
from __future__ import annotations

import io

import pytest
from fakeclock import FakeClock
from rundesign import rank_state

from emulator.checkpoint.rank_file import design_bytes_weight, save_rank_file, serialized_size
from emulator.config import load_config
from emulator.workload.state import RankState
from tiers.base import TierScope
from tiers.emulated import EmulatedTier
from tiers.memory import MemoryTier

RATE = 100 * (1 << 20)


def _state(scale: float) -> RankState:
    cfg = load_config("design-llama70-128-nvme-s3", [f"run.scale={scale}"])
    return rank_state(cfg, 0)


def test_the_serialized_size_is_the_files():
    state = _state(0.001)
    buf = io.BytesIO()
    import torch
    torch.save(state.payload(7), buf)
    assert serialized_size(state) == len(buf.getvalue())


def test_a_rank_file_is_paced_as_the_designs_bytes_of_the_rank():
    scale = 0.001
    state = _state(scale)
    weight = design_bytes_weight(state, scale)
    assert weight < 0.9  # the structure is over a tenth of this file: it would read 14 % slow
    clock = FakeClock()
    tier = EmulatedTier(MemoryTier(), write_bps=RATE, read_bps=RATE, clock=clock, sleep=clock.sleep,
                        scope=TierScope(bytes_weight=weight))
    t0 = clock()
    size, _ = save_rank_file(state, tier, "rank0", step=7)
    design = state.emulated_bytes * scale
    assert clock() - t0 == pytest.approx(design / RATE, rel=0.005)
    t0 = clock()
    with tier.open_read("rank0") as fh:
        while fh.read(1 << 20):
            pass
    assert clock() - t0 == pytest.approx(design / RATE, rel=0.005)
    assert size > 1.1 * design

