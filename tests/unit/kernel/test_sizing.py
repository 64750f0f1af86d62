"""MLPerf Storage v2.0 / DLIO checkpoint sizing, from model dimensions and parallelism."""
import json
import subprocess
import sys

import pytest

from emulator import sizing
from emulator.config import load_config

GIB = 1 << 30


@pytest.mark.parametrize("preset,total_gib,world,params_b", [
    ("llama3-8b", 104.7, 8, 8.03),
    ("llama3-70b", 911.0, 64, 69.9),
    ("llama3-405b", 5292.0, 512, 405.9),
    ("llama3-1t", 15427.0, 1024, 1183.0),
])
def test_published_totals(preset, total_gib, world, params_b):
    cfg = load_config(preset)
    size = sizing.checkpoint_size(cfg.model, cfg.parallelism)
    assert size.world_size == world
    assert size.total_bytes / GIB == pytest.approx(total_gib, rel=0.002)
    assert size.params / 1e9 == pytest.approx(params_b, rel=0.002)


H, F, HEADS, KV, LAYERS, VOCAB = 4096, 14336, 32, 8, 32, 128256


def _8b_by_hand() -> tuple[int, int]:
    """Llama-3 8B's parameters per layer and in all, from its shape."""
    dkv = (H // HEADS) * KV
    per_layer = 2 * H + H * (H + 2 * dkv) + H * H + 3 * H * F
    return per_layer, 2 * VOCAB * H + LAYERS * per_layer + H


def _8b_rank_bytes() -> tuple[int, int]:
    """(weights, optimizer) bytes one of 8 ZeRO-3 ranks writes (TP1 PP1): an eighth of the bf16
    weights, and of the three fp32 optimizer states with their padding."""
    _, n = _8b_by_hand()
    return n // 8 * 2, 3 * (n // 8 + 5 * H) * 4


def test_8b_by_hand():
    cfg = load_config("llama3-8b")
    per_layer, n = _8b_by_hand()
    assert sizing.layer_params(cfg.model) == per_layer == 218_112_000
    assert sizing.total_params(cfg.model) == n
    s0 = sizing.rank_size(cfg.model, cfg.parallelism, 0)
    # ZeRO-3, TP1 PP1: stage 0 is also the last stage; the model is divided by DP
    assert (s0.model_bytes, s0.optimizer_bytes) == _8b_rank_bytes()


def test_rank_layout_follows_dlio():
    c = sizing.rank_coords(13, tp=8, pp=32, dp=2)
    assert (c.tp, c.pp, c.dp) == (5, 1, 0)
    c = sizing.rank_coords(8 * 32 + 3, tp=8, pp=32, dp=2)
    assert (c.tp, c.pp, c.dp) == (3, 0, 1)


def test_zero1_only_dp0_writes_model():
    cfg = load_config("llama3-405b")
    par = cfg.parallelism
    first = sizing.rank_size(cfg.model, par, 0)
    replica = sizing.rank_size(cfg.model, par, par.tp * par.pp)  # dp rank 1, same tp/pp
    assert first.model_bytes > 0 and replica.model_bytes == 0
    assert first.optimizer_bytes == replica.optimizer_bytes


def test_pipeline_stages_get_extra_layers_first():
    assert [sizing.layers_on_stage(126, 32, s) for s in (0, 29, 30, 31)] == [4, 4, 3, 3]
    assert sum(sizing.layers_on_stage(126, 32, s) for s in range(32)) == 126


def test_subset_mode_writes_first_eight_ranks():
    cfg = load_config("llama3-405b-subset")
    size = sizing.checkpoint_size(cfg.model, cfg.parallelism)
    assert len(size.ranks) == 8 and [r.rank for r in size.ranks] == list(range(8))
    assert size.total_bytes / GIB == pytest.approx(5292.0, rel=0.002)  # the job's checkpoint is unchanged
    assert size.run_bytes < size.total_bytes / 50


def test_sizes_cli_json():
    out = subprocess.run([sys.executable, "-m", "emulator.cli", "sizes", "llama3-405b", "--json"],
                         capture_output=True, text=True, check=True).stdout
    obj = json.loads(out)
    for key in ("params", "model_bytes", "optimizer_bytes", "total_bytes", "ranks", "per_rank_bytes"):
        assert key in obj
    assert obj["ranks"] == 512 and len(obj["per_rank_bytes"]) == 512
    assert sum(obj["per_rank_bytes"]) == obj["total_bytes"] == obj["model_bytes"] + obj["optimizer_bytes"]
    assert obj["total_bytes"] / GIB == pytest.approx(5292, rel=0.002)


def test_scaled_state_matches_sizing():
    """A rank's live state: rank 3's bytes worked out by hand (not by the sizing the state calls),
    and its tensors at 0.001 of them."""
    from emulator.workload.state import RankState
    cfg = load_config("llama3-8b")
    st = RankState(cfg.model, cfg.parallelism, rank=3, scale=0.001)
    by_hand = sum(_8b_rank_bytes())
    assert st.emulated_bytes == by_hand == 14_053_202_944
    assert st.nbytes == pytest.approx(by_hand * 0.001, rel=0.01)