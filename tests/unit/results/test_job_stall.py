"""The job's total stall: per checkpoint the slowest rank's stall, summed over checkpoints.

Training is synchronous: at every checkpoint each rank waits (in the next step's collective)
for the slowest, so the job loses the worst rank's stall at each one. Taking each rank's sum
and then the largest understates it whenever different ranks are slowest at different
checkpoints, which understated the overhead and overstated interference by the same amount.
Synthetic rank results (no torchrun): rank 0 stalls 1.0 s then 0.1 s, rank 1 0.1 s then 1.0 s.
"""
from __future__ import annotations

import pytest
from rankresults import loop, rank_result

from rundesign import run_of

from emulator.checkpoint.records import CkptRecord
from emulator.config import load_config
from emulator.results.report import format_table
from emulator.results.summary import build_results
from emulator.units import GIB

STEPS, STEP_S = 10, 1.0
STALLS = {0: (1.0, 0.1), 1: (0.1, 1.0)}  # rank -> its stall at checkpoints 1 and 2
JOB_STALL = sum(max(s[i] for s in STALLS.values()) for i in range(2))  # 2.0, not max(1.1, 1.1)
SYNC_WALL = STEPS * STEP_S + JOB_STALL  # the steps, plus the job's stall (each rank waits for the slowest)


def _rank(rank: int) -> dict:
    recs = [CkptRecord(step=5 * (i + 1), mode="sync", rank=rank, node=0, start=5.0 * (i + 1), stall_s=stall,
                       snapshot_s=0.01, local_write_s=stall / 2, file_bytes=GIB, global_complete=True).to_dict()
            for i, stall in enumerate(STALLS[rank])]
    return rank_result(rank, recs, {"none": loop(STEPS * STEP_S, STEPS, STEP_S),
                                    "sync": loop(SYNC_WALL, STEPS, STEP_S)})


@pytest.fixture(scope="module")
def results():
    cfg = load_config(None, ["checkpoint.modes=[sync]", "checkpoint.baseline=true", "parallelism.ranks=2"])
    return build_results(cfg, *run_of(cfg), [_rank(r) for r in STALLS])


def test_the_jobs_total_stall_is_the_sum_of_each_checkpoints_worst_rank(results):
    m = results["modes"]["sync"]
    assert m["stall_total_s"] == pytest.approx(JOB_STALL)  # 2.0, not the largest per-rank sum 1.1
    assert m["stall_total_s"] == pytest.approx(m["stall_mean_s"] * m["checkpoints"])
    # at full size each worst stall's phases (the snapshot, the write: nothing paced them, so this
    # host's throughput) scale with the bytes, the rest of the stall (the software's) counts once
    phases = 0.01 + 1.0 / 2
    worst = phases / results["scale"] + (1.0 - phases)
    assert m["full_size"]["stall_total_s"] == pytest.approx(2 * worst)


def test_overhead_and_interference_follow_the_jobs_stall(results):
    m = results["modes"]["sync"]
    assert m["overhead_ratio"] == pytest.approx(JOB_STALL / SYNC_WALL)
    assert m["slowdown_ratio"] == pytest.approx(SYNC_WALL / (STEPS * STEP_S) - 1)
    assert m["stall_share_ratio"] == pytest.approx(JOB_STALL / STEPS / STEP_S)
    # the loop's extra time is all stall: nothing is left over for interference
    assert m["interference_ratio"] == pytest.approx(m["slowdown_ratio"] - m["stall_share_ratio"])
    assert m["interference_ratio"] == pytest.approx(0.0, abs=1e-9)
    row = next(line for line in format_table(results).splitlines() if line.startswith("overhead (stall/train)"))
    assert f"{JOB_STALL / SYNC_WALL * 100:.1f} %" in row, row


def test_recovery_per_tier_is_the_slowest_ranks():
    """A restart waits for its slowest rank: recovery per tier is, per load, the slowest rank served
    by that tier, averaged over loads (it was the mean over every rank-load: 0.6 s here, not 1.0)."""
    from emulator.results.summary import summarize_loads

    def load(seconds, tier="local"):
        return {"seconds": seconds, "bytes": 1 << 20, "tier": tier, "fallbacks": [], "ok": True}
    ranks = [{"loads": [load(1.0), load(0.4)], "page_cache_dropped": True},
             {"loads": [load(0.2), load(0.6)], "page_cache_dropped": True}]
    got = summarize_loads(ranks)["recovery_mean_s_by_tier"]
    assert got == {"local": pytest.approx((1.0 + 0.6) / 2)}


def test_recovery_per_tier_is_also_given_at_full_size():
    """A dilated run's recovery line read 1.49 s (wall time here) beside a load line giving 52.8 s at
    full size: the recovery is given on the design's clock too, the slowest rank's at full size."""
    from emulator.results.report import _fault_lines
    from emulator.results.summary import summarize_loads

    def load(seconds, paced):  # paced at a time factor of 0.04 (scale 0.001 x dilation 40)
        return {"seconds": seconds, "paced_s": paced, "bytes": 1 << 20, "tier": "global", "fallbacks": [], "ok": True}
    ranks = [{"loads": [load(1.5, 1.4)], "page_cache_dropped": True},
             {"loads": [load(1.0, 0.9)], "page_cache_dropped": True}]
    ld = summarize_loads(ranks, time_factor=0.04, scale=0.001)
    assert ld["recovery_mean_s_by_tier"] == {"global": pytest.approx(1.5)}
    assert ld["recovery_full_size_s_by_tier"] == {"global": pytest.approx(1.4 / 0.04 + 0.1)}
    results = {"load": ld, "failure": {"kind": "lose_local", "node": 0, "after_checkpoint": 7}}
    line = _fault_lines(results)[-1]
    assert line.endswith("recovery per tier: global 1.50 s (35.10 s at full size)"), line
