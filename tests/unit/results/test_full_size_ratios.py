"""A dilated run's ratios on the design's clock: overhead, slowdown, goodput and drain overlap.

Here a second of the design takes k = scale x D seconds, except this host's own time (its
software, counted once). Ratios of wall time here weigh that host time 1/k times too much: at
D 8 the embedded default read 16.9 % overhead where its full-size figures give 14.7 %. So a mode's
``full_size`` carries the ratios recomputed from the full-size stall and drains, the steps' paced
time over k and the host's time past it once. Synthetic ranks: 10 steps of the paced 0.625 s here
(62.5 s at k = 0.01), two sync checkpoints, each stalling 0.3 s of which 0.2 s paced and 0.1 s the
host's, and a paced 0.5 s drain.
"""
from __future__ import annotations

import pytest

from rundesign import run_of
from schemas import assert_valid
from emulator.checkpoint.records import CkptRecord, RankResult
from emulator.config import load_config
from emulator.results.report import format_table
from emulator.results.summary import build_results
from emulator.units import GIB

STEPS, STEP_S, STALL, PACED, DRAIN = 10, 0.625, 0.3, 0.2, 0.5
K = 0.001 * 10  # the default's scale, dilation 10


def _rank(rank: int, host_s: float = 0.0) -> dict:
    """``host_s``: this host's own time in every step, past its paced time (the loop's Python)."""
    recs = [CkptRecord(step=5 * (i + 1), mode="sync", rank=rank, node=0, start=5.0 * (i + 1), stall_s=STALL,
                       local_write_s=STALL, drain_s=DRAIN, file_bytes=GIB, global_complete=True,
                       paced={"local_write": PACED, "drain": DRAIN}).to_dict() for i in range(2)]
    step = STEP_S + host_s
    compute = [(s * step, s * step + STEP_S) for s in range(STEPS)]
    loop = lambda wall: {"start": 0.0, "train_end": wall, "end": wall, "steps": STEPS,  # noqa: E731
                         "flush_s": 0.0, "compute": compute, "at_risk": 0}
    return RankResult(rank=rank, node=0, state_bytes=GIB, emulated_bytes=GIB, records=recs, loads=[],
                      page_cache_dropped=True, modes={"none": loop(STEPS * step), "sync": loop(STEPS * step + 2 * STALL)},
                      events=[], local="dir", global_="dir", stopped_early=False, failure=None, attempt=0,
                      resume=[], recovery=None, fault_counts={}, content={}, content_audit=None,
                      peak_rss_bytes=0).to_dict()


def _config():
    cfg = load_config(None, ["checkpoint.modes=[sync]", "checkpoint.baseline=true", "parallelism.ranks=2",
                             "run.dilation=10"])
    assert cfg.time_factor == pytest.approx(K) and cfg.wall_step_seconds == pytest.approx(STEP_S)
    return cfg


@pytest.fixture(scope="module")
def results():
    return build_results(_config(), *run_of(_config()), [_rank(r) for r in (0, 1)])


def test_results_json_holds_to_its_schema(results):
    assert_valid("results", results)


def test_the_ratios_at_full_size_weigh_the_hosts_time_once(results):
    m = results["modes"]["sync"]
    stall = PACED / K + (STALL - PACED)  # 20.1 s a checkpoint
    train = STEPS * STEP_S / K + 2 * stall  # the paced steps, then the full-size stalls
    full = m["full_size"]
    assert full["stall_total_s"] == pytest.approx(2 * stall)
    assert full["training_wall_s"] == pytest.approx(train)
    assert full["overhead_ratio"] == pytest.approx(2 * stall / train)  # 3.9 %, where the wall here gives 5.7 %
    assert m["overhead_ratio"] == pytest.approx(2 * STALL / (STEPS * STEP_S + 2 * STALL))
    assert full["slowdown_ratio"] == pytest.approx(train / (STEPS * STEP_S / K) - 1)
    assert full["goodput_ratio"] == pytest.approx(STEPS * STEP_S / K / train)
    assert full["interference_ratio"] == pytest.approx(0.0, abs=1e-9)
    assert full["drain_overlap_ratio"] == pytest.approx(2 * DRAIN / K / train)


def test_a_hosts_time_past_each_paced_step_is_counted_once_not_over_k():
    """Steps 50 ms past their paced time here (this host's loop, in the baseline too): at full size
    a step is the design's 62.5 s and those 50 ms, not 67.5 s, so the stall's share is the design's
    (at x1.25 on this machine the loop's 10 ms a step once read goodput 87.7 % for 82.6 %)."""
    host = 0.05
    m = build_results(_config(), *run_of(_config()), [_rank(r, host) for r in (0, 1)])["modes"]["sync"]
    stall = PACED / K + (STALL - PACED)
    step = STEP_S / K + host  # 62.55 s
    train = STEPS * step + 2 * stall
    full = m["full_size"]
    assert full["training_wall_s"] == pytest.approx(train)
    assert full["overhead_ratio"] == pytest.approx(2 * stall / train)
    assert full["goodput_ratio"] == pytest.approx(STEPS * step / train)
    assert full["slowdown_ratio"] == pytest.approx(train / (STEPS * step) - 1)
    assert full["drain_overlap_ratio"] == pytest.approx(2 * DRAIN / K / train)


def test_the_report_shows_each_ratio_measured_then_at_full_size(results):
    full = results["modes"]["sync"]["full_size"]
    row = next(line for line in format_table(results).splitlines() if line.startswith("overhead (stall/train)"))
    assert f"({full['overhead_ratio'] * 100:.1f} %)" in row, row


def test_the_full_size_save_rate_counts_the_designs_bytes_not_the_files_structure(results):
    """A rank's file bytes paced at their weight (``bytes_weight``: emulator/checkpoint/checkpointer.py)
    take the design's time: the rate at full size is the design's bytes over it, not the file's."""
    weighed = build_results(_config(), *run_of(_config()), [{**_rank(r), "bytes_weight": 0.9} for r in (0, 1)])["modes"]["sync"]["full_size"]
    plain = results["modes"]["sync"]["full_size"]
    assert weighed["save_bytes_per_s"] == pytest.approx(0.9 * plain["save_bytes_per_s"])
