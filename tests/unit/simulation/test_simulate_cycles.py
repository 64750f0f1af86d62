"""Repeated checkpoint cycles skipped (emulator/simulation/model.py ``_cycles_to_skip``): between
failures a job's checkpoints repeat, so the model adds whole cycles at once. The outcome must be
the event-by-event one, field by field, with far fewer checkpoints stepped."""
from dataclasses import replace

import pytest

from emulator.config import load_config
from emulator.design import resolve
from emulator.simulation.arrivals import Arrivals
from emulator.simulation.model import JobModel, RunSpec, simulate


def _flat(d: dict, prefix: str = ""):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from _flat(v, f"{prefix}{k}.")
        else:
            yield prefix + k, v


def _design(name: str, waits: str):
    d = resolve(load_config(name))  # a failure every few hours: dozens in the horizon
    d = resolve(load_config(name), mttf_hours=4 * d.job.accelerators)
    return replace(d, async_waits_for=waits)


def _stepped(monkeypatch) -> list:
    """Counts the checkpoints the model steps event by event."""
    count, step = [0], JobModel._checkpoint

    def counted(self):
        count[0] += 1
        return step(self)
    monkeypatch.setattr(JobModel, "_checkpoint", counted)
    return count


@pytest.mark.parametrize("name, mode, waits", [
    ("default", "sync", "complete"), ("default", "async", "complete"),
    ("design-memory-peer-pfs", "sync", "complete"), ("design-memory-peer-pfs", "async", "complete"),
    ("design-memory-peer-pfs", "async", "local_write")])
def test_skipped_cycles_give_the_event_by_event_outcome(monkeypatch, name, mode, waits):
    d = _design(name, waits)
    spec = RunSpec(mode, 120.0, horizon_s=10 * 86400)
    stepped = _stepped(monkeypatch)
    every = simulate(d, spec, Arrivals(d.failures, seed=7), skip_cycles=False)
    by_event, stepped[0] = stepped[0], 0
    skipped = simulate(d, spec, Arrivals(d.failures, seed=7))
    assert every.checkpoints == by_event and sum(every.failures.values()) >= 20
    assert stepped[0] < every.checkpoints / 2, (stepped[0], every.checkpoints)
    want, got = dict(_flat(every.to_dict())), dict(_flat(skipped.to_dict()))
    assert want.keys() == got.keys()
    for k, v in want.items():
        assert got[k] == (pytest.approx(v, rel=1e-9, abs=1e-9) if isinstance(v, float) else v), k


def test_without_failures_the_horizon_is_one_stretch_of_cycles(monkeypatch):
    d = _design("default", "complete")
    spec = RunSpec("sync", 300.0, horizon_s=30 * 86400)
    stepped = _stepped(monkeypatch)
    every = simulate(d, spec, skip_cycles=False)
    by_event, stepped[0] = stepped[0], 0
    skipped = simulate(d, spec)
    assert skipped.checkpoints == every.checkpoints == by_event > 5000
    assert stepped[0] <= 10
    assert skipped.goodput == pytest.approx(every.goodput, rel=1e-12)
    for key in ("stall_p99_s", "stall_mean_s", "durability_lag_mean_s", "drain_overlap"):
        assert getattr(skipped, key) == pytest.approx(getattr(every, key), rel=1e-9), key
