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
from crashcheck import agent_pids, descendants, rank_pids
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
    out = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.append(pid)
    return out


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


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_and_sigterm_still_end_a_run_cleanly(tmp_path, sig):
    proc = _start(tmp_path)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    res = results(tmp_path / "out")
    assert res["stopped_early"] and all(m["incomplete"] == 0 for m in res["modes"].values())
