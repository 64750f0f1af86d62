"""Ranks that disagree: the job's figures are the slowest rank's at each checkpoint, a deadline miss
is any rank's, and the stall p99 is a p99 over the checkpoints.

Every synthetic record elsewhere has its ranks agree, where "any rank missed" and "every rank
missed" are the same and a p99 over two checkpoints is their largest: a deadline miss counted only
when every rank missed, or a p99 computed as the median, passed every test. Here two ranks take
turns being the slow one over 200 checkpoints, and miss and fail their drains at different ones.
"""
from __future__ import annotations

import math

import pytest
from rankresults import loop, rank_result
from rundesign import run_of

from emulator.checkpoint.records import CkptRecord
from emulator.config import load_config
from emulator.results.levels import level_summary
from emulator.results.report import format_table
from emulator.results.summary import build_results
from emulator.results.verdict import misses
from emulator.units import GIB

CHECKPOINTS, STEP_S = 200, 1.0
STEPS = 5 * CHECKPOINTS
#: the job's stall at checkpoint i: 0.01 (i + 1) s, the slow rank's (rank i % 2); the other's is 1 ms
JOB_STALLS = [0.01 * (i + 1) for i in range(CHECKPOINTS)]
MISSED = {0: {3, 7}, 1: {7, 11}}  # rank -> the checkpoints it found the previous one still in flight
INCOMPLETE = {1: {5}}  # rank -> the checkpoints whose drain it did not complete


def _stall(rank: int, i: int) -> float:
    return JOB_STALLS[i] if i % 2 == rank else 0.001


def _rank(rank: int) -> dict:
    recs = [CkptRecord(step=5 * (i + 1), mode="sync", rank=rank, node=0, start=5.0 * (i + 1),
                       stall_s=_stall(rank, i), file_bytes=GIB, missed=i in MISSED[rank],
                       global_complete=i not in INCOMPLETE.get(rank, ()), local_complete=True).to_dict()
            for i in range(CHECKPOINTS)]
    wall = STEPS * STEP_S + sum(JOB_STALLS)
    return rank_result(rank, recs, {"sync": loop(wall, STEPS, STEP_S)})


def nearest_rank(values: list, q: float) -> float:
    """The q-th percentile by the nearest-rank method, worked out here, not by the code's ``_p``."""
    ordered = sorted(values)
    return ordered[math.ceil(q / 100 * len(ordered)) - 1]


@pytest.fixture(scope="module")
def results():
    cfg = load_config(None, ["checkpoint.modes=[sync]", "checkpoint.baseline=false", "parallelism.ranks=2"])
    return build_results(cfg, *run_of(cfg), [_rank(r) for r in (0, 1)])


def test_a_deadline_miss_is_any_ranks(results):
    m = results["modes"]["sync"]
    assert m["deadline_misses"] == len(MISSED[0] | MISSED[1]) == 3  # not 1 (both ranks), not 4 (per rank)
    assert any("sync: 3 deadline miss(es)" in line for line in misses(results)), misses(results)
    assert m["incomplete"] == 1  # one rank's drain of one checkpoint is enough


def test_the_stall_p99_is_the_p99_of_the_jobs_stall_per_checkpoint(results):
    m = results["modes"]["sync"]
    p99 = nearest_rank(JOB_STALLS, 99)
    assert p99 == pytest.approx(1.98)  # the 198th of 200: not the median (1.00), not the largest (2.00)
    assert m["stall_p99_s"] == pytest.approx(p99)
    assert m["stall_mean_s"] == pytest.approx(sum(JOB_STALLS) / CHECKPOINTS)
    assert m["stall_max_s"] == pytest.approx(max(JOB_STALLS))
    assert m["full_size"]["stall_p99_s"] == pytest.approx(p99)  # nothing paced: the stall counts once
    row = next(line for line in format_table(results).splitlines() if line.startswith("stall / ckpt p99"))
    assert "1.98" in row and "1.0" not in row.replace("1.98", ""), row


def _tier_views(rank: int, i: int) -> dict:
    """Rank ``rank``'s view of checkpoint i on each tier: the slow rank's lags are 10x; rank 1 never
    completes checkpoint 5 on global storage."""
    slow = 10.0 if i % 2 == rank else 1.0
    return {"local": {"complete": True, "lag_s": 0.01 * slow, "seconds": 0.01 * slow},
            "global": {"complete": i not in INCOMPLETE.get(rank, ()), "lag_s": 0.1 * slow, "seconds": 0.05 * slow}}


def test_a_tiers_lag_is_its_slowest_nodes_and_one_nodes_miss_puts_a_checkpoint_at_risk():
    cfg = load_config(None, ["checkpoint.modes=[sync]", "checkpoint.baseline=false", "parallelism.ranks=2",
                             "run.dilation=1"])
    ranks = []
    for rank in (0, 1):
        recs = [CkptRecord(step=5 * (i + 1), mode="sync", rank=rank, node=rank, start=5.0 * (i + 1),
                           file_bytes=GIB, due=["local", "global"], written_to="local", local_write_s=0.01,
                           tiers=_tier_views(rank, i)).to_dict() for i in range(10)]
        ranks.append(rank_result(rank, recs, {"sync": loop(60.0, 50, 1.0)}, node=rank))
    levels = level_summary(*run_of(cfg), ranks)
    assert (levels["global"]["due"], levels["global"]["complete"], levels["global"]["at_risk"]) == (10, 9, 1)
    assert levels["local"]["at_risk"] == 0
    assert levels["global"]["lag_mean_s"] == pytest.approx(1.0) and levels["global"]["lag_max_s"] == pytest.approx(1.0)
    assert levels["local"]["lag_mean_s"] == pytest.approx(0.1)  # the slow node's, at every checkpoint
