"""The MLPerf Storage protocol (checkpoint.protocol: mlperf) and its DLIO-compatible folder.

One 8-rank run at a tiny scale under strace (when present) checks the files, their names and
sizes, the fsync of every file, the reads and the cache rule; two nodes of 4 ranks check the
rank shift and the drain of a local tier; a write run then separate read runs check the 30 s
rule and the strict JSON of a read-only run. DLIO's figures are recomputed here by hand.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest
from emu import refused, small_config
from mlperf_runs import SAVES, mlperf_config  # noqa: F401 - helpers and fixtures shared with tests/system/

GIB = 1 << 30


@pytest.mark.parametrize("args, msg", [
    (["--phase", "sideways"], "invalid choice"),
    (["--set", "checkpoint.loads=4"], "4 reads but only 3 checkpoints written"),
    (["--set", "checkpoint.protocol=dlio"], "checkpoint.protocol: must be"),
])
def test_bad_mlperf_input_is_one_line(tmp_path, capsys, args, msg):
    assert msg in refused(capsys, "run", mlperf_config(tmp_path, ranks=2), *args)
    assert not (tmp_path / "out").exists()


def test_phase_needs_the_mlperf_protocol(tmp_path, capsys):
    assert "only with checkpoint.protocol: mlperf" in refused(capsys, "run", small_config(tmp_path), "--phase", "write")


# --------------------------------------------------------------------------- pure parts

def test_file_names_follow_dlio_for_each_zero_stage():
    from emulator.config import load_config
    from emulator.mlperf.protocol import rank_files
    cfg = load_config("mlperf-llama3-405b-subset", ["run.scale=0.00001"])  # TP8 PP32 DP2, ZeRO-1
    names = [f.name for f in rank_files(cfg, 3)]
    assert names[-1] == "zero_pp_rank_0_mp_rank_3_optim_states.pt"
    # pipeline stage 0 of 32 holds the embedding (layer 0) and transformer layers 1..4
    assert names[:-1] == [f"layer_{i}-model_3_model_states.pt" for i in range(0, 5)]
    last = rank_files(cfg, 511)  # last stage, DP rank 1: no model file under ZeRO-1
    assert [f.name for f in last] == ["zero_pp_rank_1_mp_rank_255_optim_states.pt"]
    cfg1 = load_config("mlperf-llama3-8b", ["parallelism.zero_stage=1", "run.scale=0.0001"])
    assert [f.name for f in rank_files(cfg1, 0)] == ["model_0_model_states.pt", "zero_pp_rank_0_mp_rank_0_optim_states.pt"]
    assert [f.name for f in rank_files(cfg1, 5)] == ["zero_pp_rank_5_mp_rank_0_optim_states.pt"]


def test_last_stage_files_hold_lm_head_and_final_norm():
    from emulator.config import load_config
    from emulator.mlperf.protocol import rank_files
    cfg = load_config("mlperf-llama3-405b", ["run.scale=0.00001"])
    files = rank_files(cfg, 31 * 8)  # TP 0 of stage 31, DP 0
    assert [f.name for f in files[-3:-1]] == ["layer_127-model_248_model_states.pt", "layer_128-model_248_model_states.pt"]
    assert [s.name for s in files[-3].specs] == ["lm_head.weight"]


def test_shifted_rank_and_cache_decision():
    from emulator.mlperf.protocol import cache_decision, shifted_rank
    assert [shifted_rank(r, 4, 8) for r in range(8)] == [4, 5, 6, 7, 0, 1, 2, 3]
    assert [shifted_rank(r, 8, 8) for r in range(8)] == list(range(8))
    calls = []
    drop = lambda: calls.append(1) or True  # noqa: E731
    assert cache_decision(10, 100, True, drop)["dropped"] and calls == [1]
    big = cache_decision(300, 100, True, drop)
    assert not big["needed"] and not big["dropped"] and "not needed" in big["why"] and calls == [1]
    refused = cache_decision(10, 100, True, lambda: False)
    assert refused["needed"] and not refused["dropped"] and "not permitted" in refused["why"]
    assert "drop_page_cache: false" in cache_decision(10, 100, False, drop)["why"]


def test_figures_by_hand_when_rank_0_finishes_early():
    from emulator.mlperf.figures import figures
    t0 = 1_700_000_000.0
    def rank(r, dur):
        return {"rank": r, "node": 0, "tensor_bytes": GIB, "start": t0, "end": t0 + 10, "loads": [],
                "saves": [{"index": 1, "start": t0, "end": t0 + dur, "bytes": GIB}]}
    figs = figures([rank(0, 1.0), rank(1, 4.0)])
    save = figs["save"]
    assert figs["checkpoint_size_gib"] == 2 and figs["load"] is None
    assert math.isclose(save["dlio_exact"]["gib_s_mean"], 2.0)      # 2 GiB over rank 0's 1 s
    assert math.isclose(save["corrected"]["gib_s_mean"], 0.5)       # 2 GiB over 4 s, first start to last end
    assert math.isclose(save["corrected"]["duration_mean_s"], 4.0)  # the slowest rank
    assert math.isclose(save["exact_over_corrected"], 4.0)


# --------------------------------------------------------------------------- compare


@pytest.mark.parametrize("make, msg", [
    (lambda p: p / "absent", "no such file or folder"),
    (lambda p: (p / "empty").mkdir() or p / "empty", "no results.json (ours) or summary.json (DLIO)"),
    (lambda p: (p / "x.json").write_text('{"hello": 1}') and p / "x.json", "neither our results.json nor DLIO"),
    (lambda p: (p / "summary.json").write_text("{not json") and p / "summary.json", "not valid JSON"),
    (lambda p: (p / "summary.json").write_text('{"metric": {}}') and p / "summary.json",
     "without checkpoint figures"),
])
def test_compare_bad_input_is_one_line(tmp_path, capsys, make, msg):
    """In this process (``emu.refused``: docs/testing.md), not a process per case; nothing on stdout."""
    assert msg in refused(capsys, "compare", make(tmp_path))


def test_a_read_keeps_no_second_copy_of_the_file_in_memory(tmp_path):
    """At full size a rank file is several GiB: reading it whole before ``torch.load`` would
    double the reader's memory. Python-side allocations stay far below the file's size."""
    import tracemalloc

    import torch

    from emulator.mlperf import protocol as mlperf
    from tiers.directory import DirTier

    tier = DirTier(tmp_path / "t")
    specs = tuple(type("Spec", (), {"name": f"t{i}"})() for i in range(4))
    f = mlperf.RankFile("f.pt", specs)
    mlperf.save_files(tier, 1, [f], {s.name: torch.ones(8 << 20) for s in specs})  # 4 x 32 MiB
    tracemalloc.start()
    try:
        nbytes = mlperf.load_files(tier, 1, [f])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert nbytes > 128 << 20
    assert peak < nbytes / 8, peak


def _record_torch_load(monkeypatch):
    import torch

    seen = []
    real = torch.load

    def load(f, *args, **kwargs):
        seen.append(f)
        return real(f, *args, **kwargs)
    monkeypatch.setattr(torch, "load", load)
    return seen


def _one_file(tmp_path, tier):
    import torch

    from emulator.mlperf import protocol as mlperf
    specs = tuple(type("Spec", (), {"name": f"t{i}"})() for i in range(2))
    f = mlperf.RankFile("f.pt", specs)
    mlperf.save_files(tier, 1, [f], {s.name: torch.ones(1 << 16) for s in specs})
    return mlperf, f


def test_a_directory_tier_is_read_with_the_call_dlio_makes(tmp_path, monkeypatch):
    """DLIO loads a file system checkpoint with ``torch.load(path)``: torch's own file reader, not a
    Python file object (which ran about 1.3x slower on the same bytes)."""
    from tiers.directory import DirTier
    tier = DirTier(tmp_path / "t")
    mlperf, f = _one_file(tmp_path, tier)
    seen = _record_torch_load(monkeypatch)
    nbytes = mlperf.load_files(tier, 1, [f])
    assert len(seen) == 1 and isinstance(seen[0], str) and seen[0] == str(tier.local_path(mlperf.file_key(1, f)))
    assert nbytes == tier.local_path(mlperf.file_key(1, f)).stat().st_size


def test_an_emulated_tier_is_still_read_through_its_pacing(tmp_path, monkeypatch):
    """A path would bypass the emulated read rate: an emulated tier is read through its reader."""
    from tiers.directory import DirTier
    from tiers.emulated import EmulatedTier
    tier = EmulatedTier(DirTier(tmp_path / "t"), read_bps=1 << 40)
    mlperf, f = _one_file(tmp_path, tier)
    seen = _record_torch_load(monkeypatch)
    mlperf.load_files(tier, 1, [f])
    assert len(seen) == 1 and not isinstance(seen[0], (str, Path))
