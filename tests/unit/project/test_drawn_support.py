"""The paced runs' own test helpers (tests/support/drawn_runs.py, emu.py), on results as a run writes them."""
from __future__ import annotations

from pathlib import Path

from drawn_runs import time_line
from emu import run_unflagged


def _results(loads):
    return {"scale": 0.0123, "dilation": {"factor": 40.0, "loads": loads},
            "modes": {"sync": {"mode_wall_s": 12.34}, "async": {"mode_wall_s": 5.0}}}


def test_the_time_line_names_the_loads_own_factor():
    assert time_line(_results({"factor": 80.0})) == (
        "scale 0.0123, dilation x40 (loads x80), sync 12.3 s, async 5.0 s")


def test_a_run_at_a_set_dilation_has_no_loads_factor_and_still_prints():
    # CI, seed 22: drawn0 flagged once, ran again at a set dilation, and the line raised TypeError
    assert "(loads at the run's)" in time_line(_results(None))


def test_a_flagged_run_runs_again_with_room_for_its_loads_too():
    # CI, seed 22: drawn0's second try ran at twice the run's x15 and gave its loads (their own probe:
    # x50) 30: at a set dilation they have no probe of their own, and here they ran 10 % past their pace
    tried = []

    def run_in(folder, dilation=None):
        tried.append(dilation)
        flagged = {"notes": ["restore (local): this host ran 10% past its paced time"],
                   "dilation": {"factor": 15.0, "loads": {"factor": 50.0}}}
        return flagged if dilation is None else {"notes": ["every paced phase kept to its design rate"]}
    run_unflagged(run_in, Path("/nonexistent"), more_room=True)
    assert tried == [None, 100.0]
