"""The soak mode's parts that need no run: failures that recur, a soak's segments as one mode, and its
steady state in results.json (p50, p99, drift, recoveries, what must stay flat). A whole soak:
tests/system/metrics/test_soak_live.py."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from emulator.checkpoint.injection import Faults
from emulator.checkpoint.node_loss import NodeLoss
from emulator.checkpoint.tally import Tally
from emulator.config.failures import FailuresConfig, GlobalFaultConfig
from emulator.rank.soak import merged
from emulator.results.soak import soak_lines, soak_summary

CLOCK = SimpleNamespace(time_factor=0.01, scale=0.001)


def test_a_failure_comes_once_or_every_n_checkpoints():
    once, every = NodeLoss(FailuresConfig(lose_local_after=3)), NodeLoss(FailuresConfig(lose_local_after=3),
                                                                         recurring=True)
    assert not once.happened(2) and once.happened(3)
    once.recovered()
    assert once.happened(4)  # a run's one failure: training stops there
    for due in (3, 6, 9):
        assert not every.happened(due - 1) and every.happened(due)
        every.recovered()


def test_a_global_outage_opens_once_or_every_n_checkpoints():
    failures = FailuresConfig(global_fault=GlobalFaultConfig(checkpoint=2, seconds=1.0))
    opened = []
    for recurring in (False, True):
        faults = Faults.from_config(failures, 0, 0, Tally(None), recurring=recurring)
        faults._faulty = SimpleNamespace(activate=lambda s, r=recurring: opened.append(r))
        for seq in range(1, 7):
            faults.checkpoint_started(seq)
    assert opened == [False, True, True, True]  # once at 2; at 2, 4 and 6


def test_a_soaks_segments_are_one_span_of_its_mode():
    a = {"start": 10.0, "train_end": 20.0, "end": 21.0, "steps": 8, "flush_s": 0.5, "compute": [(10, 11)],
         "at_risk": 0, "update_cpu_s": 0.1}
    b = {"start": 23.0, "train_end": 40.0, "end": 41.0, "steps": 12, "flush_s": 0.2, "compute": [(23, 24)],
         "at_risk": 1, "update_cpu_s": 0.3}
    m = merged([a, b])
    assert (m["start"], m["train_end"], m["end"], m["steps"], m["segments"]) == (10.0, 40.0, 41.0, 20, 2)
    assert m["flush_s"] == pytest.approx(0.7) and m["compute"] == [(10, 11), (23, 24)] and m["at_risk"] == 1


def _record(step: int, stall: float, lag: float) -> dict:
    return {"step": step, "mode": "async", "stall_s": stall, "wait_s": 0.0, "snapshot_s": stall, "d2h_s": 0.0,
            "local_write_s": 0.1, "drain_s": 0.2, "lag_s": lag, "complete_s": lag, "queue_s": 0.0, "missed": False,
            "global_complete": True, "due": ["local", "global"], "tiers": {},
            "paced": {"snapshot": stall, "local_write": 0.1, "drain": 0.2}}


def _rank(rank: int, rss: list[int], files: list[int]) -> dict:
    records = [_record(s, 0.01 * (1 + (s > 6)), 0.5) for s in range(1, 10)]  # the stall doubles: a drift
    load = {"ok": True, "step": 3, "tier": "global", "seconds": 0.4, "paced_s": 0.4, "time_factor": 0.0}
    recoveries = [{"class": "node", "lost_steps": 0, "seconds": 0.4, "fetch_s": 0.0, "fetch_paced_s": 0.0,
                   "fetch_stream_s": 0.0, "load": {**load, "step": step}} for step in (3, 6)]
    samples = [{"checkpoints": n, "time": n, "rss_bytes": rss[n - 1], "files": {"local": files[n - 1]} if rank == 0
                else {}} for n in range(1, 10)]
    return {"rank": rank, "records": records, "recoveries": recoveries,
            "soak": {"duration_s": 60.0, "warm_checkpoints": 4, "samples": samples}}


def test_a_soaks_steady_state_at_full_size():
    flat = [100, 110, 120, 130, 130, 131, 130, 130, 131]
    ranks = [_rank(0, flat, [3, 5, 6, 5, 6, 5, 6, 5, 6]), _rank(1, [x + 5 for x in flat], [])]
    s = soak_summary(CLOCK, ranks)
    assert s["checkpoints"] == 9 and s["stall_s"]["count"] == 9
    assert s["stall_s"]["p50"] == pytest.approx(1.0) and s["stall_s"]["p99"] == pytest.approx(2.0)  # paced / k
    lag = lambda snap: 0.5 - snap - 0.1 + (snap + 0.1) / 0.01  # noqa: E731 - paced / k, the rest once
    assert s["stall_s"]["drift"] == pytest.approx(1.0) and s["lag_s"]["drift"] == pytest.approx(lag(0.02) / lag(0.01) - 1)
    rc = s["recoveries"]
    assert rc["count"] == 2 and rc["ok"] and [e["step"] for e in rc["events"]] == [3, 6]
    assert rc["p50_s"] == pytest.approx(40.0)  # the restore's paced 0.4 s / k
    # warm from checkpoint 4: the first tenth (at least a few samples) against the last, the most memory
    # and the fewest files of each
    assert s["rss_bytes"] == {"first": 136, "last": 136, "growth": 0.0}
    assert s["files"]["local"] == {"first": 5, "last": 5, "growth": 0.0}  # the fewest: a floor
    assert [p["rss_bytes"] for p in s["trajectory"]] == [x + 5 for x in flat]
    lines = soak_lines({"soak": s}, lambda v: f"{v:.1f} s")
    assert lines[0].startswith("soak: 60.0 s of wall time here, 9 checkpoints") and "drift +100.0%" in lines[0]
    assert any("recoveries: 2" in line for line in lines)


def test_a_run_that_is_not_a_soak_has_no_soak_figures():
    assert soak_summary(CLOCK, [{"rank": 0, "records": []}]) is None
    assert soak_lines({"soak": None}, str) == []
