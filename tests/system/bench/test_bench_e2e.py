"""The bench suite's pairs that start ranks: a real in-process pair of memory tiers."""
from __future__ import annotations

import math

from bench.common import Params
from bench.worker import run as run_in_process
from tiers import copycrc

KEYS = ("ratio", "ours", "baseline", "unit", "min", "max", "pairs", "target", "met", "better", "ratio_is")


TINY = dict(pairs=1, warmup=0, rank_gib=0.004, quick=True)


def test_memory_tiers_pair_in_process(tmp_path):
    res = run_in_process("memory_tiers", Params(workdir=str(tmp_path), **TINY))
    assert list(res) == ["memory_save", "peer_send", "memory_rss"]
    save = res["memory_save"]
    assert "error" not in save and all(k in save for k in KEYS)
    assert save["pairs"] == 1 and save["unit"] == "s" and save["better"] == "lower" and save["target"] == 1.2
    # a time ratio of the same round: our save's seconds over the memcpy's, on the staged tensors
    assert save["ours"] > 0 and save["baseline"] > 0 and isinstance(save["met"], bool)
    assert math.isclose(save["ratio"], save["ours"] / save["baseline"], rel_tol=1e-6)
    assert "/dev/shm" in save["ours_is"] and save["bytes"] >= save["memcpy_bytes"] > 0
    assert math.isclose(save["ratio_vs_tmpfs_write"], save["ours"] / save["tmpfs_write_s"], rel_tol=1e-6)
    assert save["cpu_ratio"] > 0 and save["cpu_ratio_samples"] == [save["cpu_ratio"]]  # process CPU, same round
    assert "glibc memmove" in save["baseline_is"] and save["torch_copy_s"] > 0  # the faster memcpy is the floor
    assert save["fused_copy"] is copycrc.FUSED and ("tiers._copycrc" in save["ours_is"]) is copycrc.FUSED
    send = res["peer_send"]
    assert "error" not in send and all(k in send for k in KEYS)
    assert send["pairs"] == 1 and send["unit"] == "GiB/s" and send["better"] == "higher"
    assert math.isclose(send["ratio"], send["ours"] / send["baseline"], rel_tol=1e-6)
    assert send["target"] == 0.9 and isinstance(send["met"], bool) and send["bytes"] == 4 << 20
    rss = res["memory_rss"]  # a real run: the rank's peak RSS + the memory tier's peak over the budget
    assert "error" not in rss and all(k in rss for k in KEYS)
    assert rss["unit"] == "GiB" and rss["better"] == "lower" and rss["target"] == 1.1 and rss["tier_copies"] == 2
    assert rss["tier_peak_bytes"] > 0 and rss["rank_peak_rss_bytes"] > rss["import_floor_bytes"] > 0
    # the tier pages the rank kept mapped are in its VmHWM and in the tier's peak: counted once
    assert rss["mapped_tier_peak_bytes"] > 0
    used = rss["rank_peak_rss_bytes"] - rss["mapped_tier_peak_bytes"] + rss["tier_peak_bytes"]
    assert math.isclose(rss["ratio"], used / rss["expected_bytes"], rel_tol=1e-6)
    assert math.isclose(rss["ratio_without_floor"], (used - rss["import_floor_bytes"]) / rss["expected_bytes"],
                        rel_tol=1e-6)
