"""The timeline shows the whole run: every panel spans its own mode (a shorter baseline must not cut
the others off), in the design's time (measured / scale) with the measured seconds on top, and
stays readable with many ranks or checkpoints. The drawn axes and bars are read back from the
figure; tests/system/run/test_timeline_e2e.py does it against a real run's records."""
from __future__ import annotations

import pytest

from emulator.results.timeline import MAX_CHECKPOINT_BARS, MAX_RANK_ROWS, timeline_figure
from timeline_picture import bars, panels

SCALE = 0.004


def _mode(ranks: int, checkpoints: int, step: float, interval_steps: int, stall: float, drain: float,
          t0: float = 0.0) -> list[dict]:
    """Measured events of one mode: steps of ``step`` s, a checkpoint every ``interval_steps``."""
    events = []
    for r in range(ranks):
        t = t0
        for c in range(checkpoints):
            for _ in range(interval_steps):
                events.append({"rank": r, "kind": "compute", "start": t, "end": t + step})
                t += step
            events.append({"rank": r, "kind": "stall", "start": t, "end": t + stall})
            events.append({"rank": r, "kind": "local_write", "start": t, "end": t + stall / 2})
            if r % 8 == 0:
                events.append({"rank": r, "kind": "drain", "start": t + stall / 2, "end": t + stall / 2 + drain})
            t += stall
    return events


def _results(ranks=8, checkpoints=5) -> dict:
    """A default-like run: a 40-step baseline, then sync (long stalls) and async (short ones)."""
    baseline = [{"rank": r, "kind": "compute", "start": i * 0.25, "end": (i + 1) * 0.25}
                for r in range(ranks) for i in range(checkpoints * 8)]
    return {"scale": SCALE, "config": {"checkpoint": {"interval_steps": 8}, "training": {"step_seconds": 62.5}},
            "timeline": {"none": baseline, "sync": _mode(ranks, checkpoints, 0.25, 8, 0.6, 0.25),
                         "async": _mode(ranks, checkpoints, 0.25, 8, 0.05, 0.3)},
            "modes": {"sync": {"checkpoints": checkpoints}, "async": {"checkpoints": checkpoints}}}


def test_every_panel_spans_its_own_mode_in_design_time():
    res = _results()
    axes = panels(timeline_figure(res))
    assert set(axes) == {"none", "sync", "async"}
    for mode, ax in axes.items():
        end_s = max(e["end"] for e in res["timeline"][mode]) / SCALE  # at full size
        unit = {"s": 1, "min": 60, "h": 3600}[ax.get_xlabel().split()[0]]
        left, right = ax.get_xlim()
        assert left == 0 and end_s / unit <= right <= 1.05 * end_s / unit, (mode, right, end_s / unit)
        assert ax.get_xlabel().endswith("at full size since the mode started")
    sync = axes["sync"]
    stalls = bars(sync, "stall")
    assert len(stalls) == 5 * 8  # every checkpoint of every rank, none cut off
    first = min(e["start"] for e in res["timeline"]["sync"] if e["kind"] == "stall")
    assert abs(stalls[0][0] - first / SCALE / 60) < 1e-6  # drawn at its full-size time (minutes)
    top = sync.child_axes[0]  # the measured seconds
    assert top.get_xlabel() == "measured seconds (this host)"


def test_many_ranks_are_drawn_as_the_job():
    fig = timeline_figure(_results(ranks=MAX_RANK_ROWS * 4))
    sync = panels(fig)["sync"]
    assert [t.get_text() for t in sync.get_yticklabels()] == ["all 64 ranks", "drains (8 nodes)"]
    assert len(bars(sync, "stall")) == 5  # the job's stall at each checkpoint, once
    assert "ranks and drains drawn together" in sync.get_title(loc="left")


def test_many_checkpoints_are_drawn_as_durations_against_the_interval():
    n = 500
    assert n > MAX_CHECKPOINT_BARS
    fig = timeline_figure(_results(ranks=2, checkpoints=n))
    sync = panels(fig)["sync"]
    assert not bars(sync, "stall")
    lines = {line.get_gid(): line for line in sync.get_lines()}
    assert len(lines["stall"].get_xdata()) == n and len(lines["drain"].get_xdata()) == n
    assert max(lines["stall"].get_ydata()) == pytest.approx(0.6 / SCALE)  # seconds at full size
    assert lines["interval"].get_ydata()[0] == 8 * 62.5
    left, right = sync.get_xlim()
    assert right >= max(lines["stall"].get_xdata()) and "each one's durations" in sync.get_title(loc="left")
