"""A run that could not finish says why in one line, with the exit status of its cause (issue 54, 7):
bad input is 2 and nothing else is. Before, a SIGKILLed rank was "a rank failed (exit status 1)",
a SIGKILLed agent ended in exit status 2, and a results disk filled during the run ended in exit
status 2 with an empty torchrun.log and no word of the disk."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from crashcheck import descendants
from emu import small_config
from faulting import tmpfs  # noqa: F401 - a fixture

from emulator.job.lifeline import rank_of_process

AGENT = "emulator.rank.agent"


def _start(cfg, *extra):
    return subprocess.Popen([sys.executable, "-m", "emulator.cli", "run", str(cfg), "--quiet", "--duration", "120s",
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _training(proc, out: Path) -> None:
    deadline = time.time() + 120
    while not (out / "status.json").exists():
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.2)


def _one_line(proc, timeout: float = 120) -> tuple[int, str]:
    _, err = proc.communicate(timeout=timeout)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ckpt-emu: error: "), err
    return proc.returncode, lines[0]


def _agent(pid: int) -> int:
    for child in descendants(pid):
        try:
            if AGENT in Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode() and \
                    rank_of_process(child) is None:
                return child
        except OSError:
            continue
    raise AssertionError("no torchrun agent found")


def test_a_rank_another_process_killed_is_named_with_its_signal_exit_3(tmp_path):
    cfg = small_config(tmp_path, training={"step_seconds": 0.05})
    run = _start(cfg)
    _training(run, tmp_path / "out")
    rank = next(p for p in descendants(run.pid) if rank_of_process(p) == 1)
    os.kill(rank, signal.SIGKILL)
    rc, line = _one_line(run)
    assert rc == 3 and "rank 1 killed by signal SIGKILL (9)" in line, (rc, line)


def test_a_killed_agent_is_named_with_its_signal_exit_3(tmp_path):
    cfg = small_config(tmp_path, training={"step_seconds": 0.05})
    run = _start(cfg)
    _training(run, tmp_path / "out")
    os.kill(_agent(run.pid), signal.SIGKILL)
    rc, line = _one_line(run)
    assert rc == 3 and "torchrun's agent) was killed by signal SIGKILL (9)" in line, (rc, line)


def test_a_results_disk_filled_during_the_run_names_the_folder_exit_3(tmp_path, tmpfs):
    small_disk = tmpfs("disk", "70m", ",mode=755")  # room for the preflight's 64 MiB
    if small_disk is None:
        pytest.skip("mounting a tmpfs is not permitted here")
    cfg = small_config(tmp_path, training={"step_seconds": 0.05}, run={"out": str(small_disk / "out")})
    run = _start(cfg)
    _training(run, small_disk / "out")
    with open(small_disk / "filler", "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * (1 << 20))
        except OSError:
            pass
    rc, line = _one_line(run)
    assert rc == 3 and f"results folder {small_disk / 'out'} is full" in line, (rc, line)
