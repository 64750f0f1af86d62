"""Progress on long work (emulator/launch/progress.py): a plain line about every 10 s with the share
done and an ETA where stderr is not a terminal; run, tune, simulate --sweep and the bench report
through it. Fake clocks and files here; tests/system/run/test_progress_e2e.py checks a real run's log."""
from __future__ import annotations

import io
import json
import re
import time

import pytest

import emulator.launch.progress as progress
from emulator.cli import main
from emulator.launch.progress import Counted, Display, RunProgress, clock_text, run_fraction

LINE = re.compile(r"^ckpt-emu: \[\s*(\d+)%\] (.*); elapsed (\S+), ETA (\S+)$")


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def _plain(clock) -> tuple[io.StringIO, Display]:
    stream = io.StringIO()
    return stream, Display(stream, clock=clock, rich=False)


def test_a_plain_line_every_10_seconds_with_the_share_done_and_an_eta():
    clock = Clock()
    stream, display = _plain(clock)
    counted = Counted(60, "cells", label="sweep: ", display=display)
    for _ in range(60):  # one cell a second
        clock.now += 1.0
        counted.advance()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 6, lines  # at 10, 20, ... 60 s
    m = LINE.match(lines[2])
    assert m and m.groups() == ("50", "sweep: 30/60 cells", "0:30", "0:30"), lines[2]


def test_clock_text():
    assert [clock_text(s) for s in (0, 65, 3723, None)] == ["0:00", "1:05", "1:02:03", "?"]


def test_the_share_of_a_run_counts_modes_and_steps_or_the_time_budget():
    steps = {"mode_index": 1, "modes": 3, "steps_done": 20, "steps_per_mode": 40, "budget_s": None}
    assert run_fraction(steps) == pytest.approx(1.5 / 3)
    soak = {"mode_index": 2, "modes": 3, "mode_elapsed_s": 30.0, "budget_s": 60.0, "steps_done": 7}
    assert run_fraction(soak) == pytest.approx(2.5 / 3)
    assert run_fraction({**soak, "mode_elapsed_s": 65.0}) == 1.0  # the last checkpoint's drain


def test_a_runs_progress_from_rank_0s_file(tmp_path):
    clock = Clock()
    stream, display = _plain(clock)
    run = RunProgress(8, display=display)
    path = tmp_path / "progress.json"
    clock.now += 10
    run.update(path)  # no file yet: the ranks are starting
    for step in range(0, 41, 4):  # 4 steps a second, from 20 s on
        clock.now = 1020 + step / 4
        path.write_text(json.dumps({"mode": "sync", "mode_index": 0, "modes": 2, "steps_done": step,
                                    "steps_per_mode": 40, "budget_s": None, "mode_elapsed_s": step / 4,
                                    "checkpoints": step // 8, "misses": 0, "last_stall_s": 0.6}))
        run.update(path)
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("ckpt-emu: starting 8 rank(s); elapsed 0:10")
    m = LINE.match(lines[-1])
    assert m and m.group(1) == "50" and m.group(4) == "0:10", lines  # 10 s for half of training: 10 s left
    assert "sync step 40/40 (mode 1/2): 5 checkpoint(s), last stall 600 ms, 0 deadline miss(es)" in lines[-1]


def test_a_long_item_keeps_the_display_alive():
    stream = io.StringIO()
    counted = Counted(2, "benchmarks", display=Display(stream, every_s=0.0, rich=False))
    with counted.running("memory_save", every_s=0.01):
        deadline = time.time() + 30
        while "memory_save running" not in stream.getvalue() and time.time() < deadline:
            time.sleep(0.01)
    assert "0/2 benchmarks (memory_save running)" in stream.getvalue()


def test_simulate_sweep_shows_its_cells(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 0.0)
    assert main(["simulate", "design-nvme-pfs", "--nodes", "16", "--days", "2", "--sweep", "interval=5m,20m",
                 "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err.splitlines()
    cells = [line for line in err if "simulate --sweep: " in line]
    assert cells and "4/4 cells" in cells[-1] and LINE.match(cells[-1]), err


def test_tune_shows_each_runs_progress(tmp_path, monkeypatch):
    import emulator.cli.tune as tune
    import emulator.launch.runner as runner
    from emulator.config import load_config
    seen = []

    def execute_run(cfg, **kwargs):
        seen.append(kwargs)
        (tmp_path / "results.json").write_text("{}")
    monkeypatch.setattr(runner, "execute_run", execute_run)
    tune._run(load_config(None), tmp_path, modes=["sync"], saves=1, interval_steps=1, stage="run 1 of 2, measuring",
              quiet=False)
    assert seen == [{"force": False, "quiet": False, "progress_label": "tune, run 1 of 2, measuring: "}]
