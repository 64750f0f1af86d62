"""A run dies with its launcher: kill -9 the CLI or the torchrun agent, and within seconds no
process of the run is left (torchrun starts every rank in a session of its own, so before this
they kept running as orphans). Ctrl-C and SIGTERM still end a run cleanly, with its report."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from crashcheck import agent_pids, descendants, is_alive, parent_of, rank_pids
from emu import results, small_config

ORPHAN_DEADLINE_S = 10


def _start(tmp_path, duration="120s"):
    cfg = small_config(tmp_path, training={"step_seconds": 0.05})
    proc = subprocess.Popen([sys.executable, "-m", "emulator.cli", "run", str(cfg), "--quiet",
                             "--duration", duration], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    status = tmp_path / "out" / "status.json"
    deadline = time.time() + 120
    while not status.exists():  # training, with checkpoints under way
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.2)
    return proc


def _alive(pids) -> list[int]:
    return [pid for pid in pids if is_alive(pid)]


def _wait_gone(pids) -> list[int]:
    deadline = time.time() + ORPHAN_DEADLINE_S
    while _alive(pids) and time.time() < deadline:
        time.sleep(0.2)
    return _alive(pids)


@pytest.mark.parametrize("victim", ["cli", "torchrun"])
def test_no_process_outlives_a_killed_launcher(tmp_path, victim):
    proc = _start(tmp_path)
    tree = descendants(proc.pid)  # torchrun's agent and the ranks it forked
    torchrun = agent_pids(proc.pid)
    ranks = rank_pids(proc.pid)
    assert len(torchrun) == 1 and len(ranks) == 2, tree
    os.kill(proc.pid if victim == "cli" else torchrun[0], signal.SIGKILL)
    left = _wait_gone(tree)
    proc.communicate(timeout=30)
    assert left == [], f"still running {ORPHAN_DEADLINE_S} s after the {victim} was killed: {left}"
    steps = sorted((tmp_path / "global").glob("step_*"))
    time.sleep(1)
    assert sorted((tmp_path / "global").glob("step_*")) == steps  # nothing writes any more


def test_the_ranks_are_forked_from_a_process_with_one_thread(tmp_path):
    """A process forked from one with other threads inherits the locks they held: torchrun's agent
    serves its stores from threads that take the resolver's lock, and a rank forked while one
    held it hung in its first address lookup (an 8-rank run, about 1 in 30 here)."""
    proc = _start(tmp_path)
    try:
        ranks = rank_pids(proc.pid)
        (forker,) = {parent_of(rank) for rank in ranks}
        assert len(ranks) == 2 and len(os.listdir(f"/proc/{forker}/task")) == 1
        (agent,) = agent_pids(proc.pid)
        assert parent_of(forker) == agent  # forked from the agent, which imported the ranks' code
        assert Path(f"/proc/{forker}/cmdline").read_bytes() == Path(f"/proc/{agent}/cmdline").read_bytes()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=120)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_and_sigterm_still_end_a_run_cleanly(tmp_path, sig):
    proc = _start(tmp_path)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    res = results(tmp_path / "out")
    assert res["stopped_early"] and all(m["incomplete"] == 0 for m in res["modes"].values())
