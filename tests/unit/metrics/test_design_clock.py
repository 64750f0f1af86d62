"""The live metrics in the design's terms: ``DesignClock`` converts a rank's measurements as the report
does (paced time over the time factor, the host's own once; bytes over the scale), and the metrics it is
set on serve what they accrue themselves (drain-busy seconds, the backlog) through it."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry

from emulator import metrics as M
from emulator.fullsize import DesignClock, full_record, tier_lag
from emulator.metrics import NULL_METRICS, Metrics

#: scale 0.001 x dilation 20: a second of the design is 20 ms here
CLOCK = DesignClock(k=0.02, scale=0.001, weight=0.99, step_s=1.25)


def test_the_default_clock_converts_nothing():
    clock = DesignClock()
    assert clock.phase(2.0, 1.5) == 2.0 and clock.phase(2.0, None) == 2.0
    assert clock.span(3.0) == 3.0 and clock.bytes(1000) == 1000 and clock.steps(5.0, 4) == 5.0
    assert NULL_METRICS.clock == clock and NULL_METRICS.live is False and Metrics.live is True


def test_a_phase_is_its_paced_part_over_the_factor_and_the_hosts_part_once():
    assert CLOCK.phase(0.5, 0.4) == pytest.approx(0.4 / 0.02 + 0.1)
    # nothing paced it: this host's throughput at this run's size, extrapolated to the full bytes
    assert CLOCK.phase(0.5, None) == pytest.approx(0.5 / 0.001)
    assert CLOCK.span(0.5) == pytest.approx(25.0)
    assert CLOCK.bytes(1_000_000) == pytest.approx(0.99e9)


def test_steps_are_paced_at_the_step_time_and_the_loops_own_time_counts_once():
    assert CLOCK.steps(1.30, 1) == pytest.approx(1.25 / 0.02 + 0.05)
    assert CLOCK.steps(0.01, 0) == pytest.approx(0.01)  # no step: the loop's own time, once
    assert DesignClock(k=0.02).steps(1.0, 1) == pytest.approx(50.0)  # a step's paced time unknown: all of it


@dataclass
class Rec:  # the fields of a CkptRecord the conversions read
    mode: str = "sync"
    stall_s: float = 0.9
    wait_s: float = 0.0
    snapshot_s: float = 0.003
    local_write_s: float = 0.2
    drain_s: float = 0.7
    d2h_s: float = 0.0
    lag_s: float = 0.92
    complete_s: float = 0.92
    queue_s: float = 0.0
    missed: bool = False
    due: list = field(default_factory=lambda: ["local", "global"])
    paced: dict = field(default_factory=lambda: {"snapshot": 0.003, "local_write": 0.16, "drain": 0.69})
    tiers: dict = field(default_factory=lambda: {"local": {"complete": True, "lag_s": 0.21, "seconds": 0.2,
                                                           "paced": 0.16},
                                                 "global": {"complete": True, "lag_s": 0.92, "seconds": 0.7,
                                                            "paced": 0.69}})


def test_a_record_converts_as_the_report_converts_its_dict():
    rec = Rec()
    as_dict = vars(Rec())
    assert CLOCK.record(rec) == full_record(as_dict, 0.02, bytes_factor=0.001)
    assert CLOCK.tier_lag(rec, "global") == tier_lag(as_dict, "global", 0.02, bytes_factor=0.001)
    # the lag to the global tier: the paced phases over k, the rest (0.92 - 0.003 - 0.2 - 0.7) once
    assert CLOCK.record(rec)["lag_s"] == pytest.approx((0.003 + 0.16 + 0.69) / 0.02 + 0.92 - 0.853, rel=1e-9)


def test_a_record_is_read_without_its_dicts_changing_under_the_conversion():
    """The pipeline of an async checkpoint writes its record's tiers while the loop converts its
    stall: the conversion reads copies taken at once."""
    rec = Rec()
    view = CLOCK.record(rec)
    rec.tiers["peer"] = {"complete": True, "lag_s": 0.3, "seconds": 0.1, "paced": 0.1}
    assert "peer" not in view["tiers"]


@pytest.fixture
def reg():
    return CollectorRegistry()


def test_the_clock_sets_the_time_factor_and_the_drain_tallies_are_served_in_its_terms(reg, monkeypatch):
    now = [0.0]
    monkeypatch.setattr(M, "time", SimpleNamespace(**{**vars(time), "monotonic": lambda: now[0]}))
    m = Metrics(reg, tick_s=0)
    try:
        assert reg.get_sample_value("ckpt_emu_time_factor") == 0  # no factor yet: the rules give no age
        m.set_clock(CLOCK)
        assert reg.get_sample_value("ckpt_emu_time_factor") == 0.02
        m.drain_started(2_000_000)  # the files' bytes
        assert reg.get_sample_value("ckpt_emu_drain_backlog_bytes") == pytest.approx(1.98e9)
        now[0] += 0.3  # of wall time
        m.drain_progress(500_000)
        assert reg.get_sample_value("ckpt_emu_drain_backlog_bytes") == pytest.approx(1.485e9)
        assert reg.get_sample_value("ckpt_emu_drain_busy_seconds_total") == pytest.approx(15.0)
        m.drain_finished(0.3)
        m.drain_finished(0.1)  # reported without a start: its wall time, in the design's
        assert reg.get_sample_value("ckpt_emu_drain_busy_seconds_total") == pytest.approx(20.0)
    finally:
        m.close()
