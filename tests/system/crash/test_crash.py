"""Crash consistency with real processes and real SIGKILLs.

Two kinds of kill, because they answer different questions:

* injected (``failures.kill``): the rank SIGKILLs its own process at an exact
  phase of an exact checkpoint, so every phase is covered every time. One run
  with torchrun restarts (PET_MAX_RESTARTS, torchrun's own environment
  variable for --max-restarts) crashes in each phase in turn and recovers each
  time; a run without restarts fails with one line, and the next run resumes.
* randomized: the test SIGKILLs the whole process tree (CLI, torchrun agent,
  every rank) at a random moment while checkpoints are being taken, several
  times over on the same tiers, as a power cut would.

After every crash the tiers must hold only intact checkpoints (manifest
present, every file's size and CRC32C matching, the bytes exactly the staged
state, replayed from the manifest's lineage) plus garbage the next run
removes; the final run must resume, clean up, and restore the newest one.
The random timings come from a fixed seed, so a failure replays exactly; set
CKPT_EMU_CRASH_SEED to explore others (``python -m bench.crash`` runs many).
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from crashcheck import kill_tree, partials, step_dirs, verify_dir_tier
from emu import ckpt_emu, results, small_config

from emulator.config import load_config

RANKS = 2


def _newest(root: Path) -> int:
    steps = verify_dir_tier(root)
    return steps[-1] if steps else 0


def _check_tiers(tmp: Path, cfg) -> tuple[list, list]:
    """The crash invariants on both tiers; returns (local, global) complete steps."""
    local = verify_dir_tier(tmp / "local" / "node0", cfg)
    glob = verify_dir_tier(tmp / "global", cfg, ranks=RANKS)
    return local, glob


def test_kill_in_every_phase_with_restarts_recovers_each_time(tmp_path):
    """One job, five attempts: a rank or the drainer dies in each phase; each restart recovers."""
    kills = [
        {"rank": 1, "checkpoint": 1, "phase": "local_write", "attempt": 0},  # file written, not published
        {"rank": 1, "checkpoint": 3, "phase": "staging", "attempt": 1},  # async: nothing written yet
        {"rank": 0, "checkpoint": 4, "phase": "drain", "attempt": 2},  # the node's drainer, mid-drain
        {"rank": 0, "checkpoint": 2, "phase": "manifest", "attempt": 3},  # all drained, no global manifest
    ]
    cfg_path = small_config(tmp_path, checkpoint={"saves": 2, "loads": 1}, failures={"kill": kills})
    env = dict(os.environ, PET_MAX_RESTARTS=str(len(kills)))
    proc = subprocess.run([sys.executable, "-m", "emulator.cli", "run", str(cfg_path), "--quiet"],
                          capture_output=True, text=True, env=env, timeout=400)
    assert proc.returncode == 0, proc.stderr
    log = (tmp_path / "out" / "torchrun.log").read_text()
    for k in kills:
        assert (f"rank {k['rank']}: injected failure: SIGKILL at checkpoint {k['checkpoint']} during "
                f"{k['phase']} (failures.kill, attempt {k['attempt']})") in log
    res = results(tmp_path / "out")
    f = res["faults"]
    assert f["attempt"] == len(kills)
    # results.json covers every attempt, the killed ones from the records the ranks kept as they went
    attempts = res["attempts"]
    assert [a["attempt"] for a in attempts] == list(range(len(kills) + 1))
    assert [a["ended"] for a in attempts] == ["restarted"] * len(kills) + ["finished"]
    assert attempts[0]["checkpoints_started"] == 1 and attempts[0]["checkpoints"] == 0  # killed in it
    assert all(a["checkpoints_started"] >= a["checkpoints"] for a in attempts)
    assert attempts[1]["complete_on_global"] and attempts[1]["modes"]
    # the last kill left a checkpoint complete locally but not globally: drained before training
    assert len(f["resumed"]) == 1 and f["resumed"][0]["ok"], f
    assert f["recovery"]["ok"] and f["recovery"]["step"] == f["resumed"][0]["step"]
    assert f["recovery"]["served_by"] == {"local": RANKS}
    assert all(m["incomplete"] == 0 for m in res["modes"].values()) and res["load"]["ok"]
    cfg = load_config(str(cfg_path))
    local, glob = _check_tiers(tmp_path, cfg)
    assert local == glob and len(glob) == 2  # keep 2, garbage of the crashes removed
    assert step_dirs(tmp_path / "global") == glob == step_dirs(tmp_path / "local" / "node0")
    assert not partials(tmp_path)
    # the restored-and-continued state is exactly what was staged: lineage spans several attempts
    lineage = json.loads((tmp_path / "global" / f"step_{glob[-1]:08d}" / "manifest.json").read_text())["meta"]["lineage"]
    assert len(lineage) >= 2, lineage


def _start(cfg_path: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "emulator.cli", "run", str(cfg_path), "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if path.exists():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.02)
    return False


def test_crash_then_rerun_resumes_with_random_whole_run_kills(tmp_path):
    seed = int(os.environ.get("CKPT_EMU_CRASH_SEED", "20261122"))  # fixed: a failure replays exactly
    print(f"CKPT_EMU_CRASH_SEED={seed}")
    rng = random.Random(seed)
    cfg_path = small_config(tmp_path, checkpoint={"saves": 3, "loads": 1, "keep": 2},
                            failures={"kill": [{"rank": 0, "checkpoint": 2, "phase": "drain"}]})
    cfg = load_config(str(cfg_path))

    # 1. the drainer dies mid-drain, no restarts: the run fails with one line (exit 3: failed to run)
    proc = ckpt_emu("run", cfg_path, "--quiet")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 3 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("ckpt-emu: error: rank 0: injected failure: SIGKILL at checkpoint 2 during drain")
    local, glob = _check_tiers(tmp_path, cfg)
    assert local[-1] > glob[-1]  # complete locally, not yet on the global tier
    pending = local[-1]

    # 2. reruns, each SIGKILLed as a whole at a random moment while checkpointing: enough checkpoints
    # that the kill, up to 0.8 s after the first, lands before the run ends (with 3, a run on a fast
    # host once finished first, and the next one was refused its finished results folder)
    cfg_path = small_config(tmp_path, checkpoint={"saves": 12, "loads": 1, "keep": 2})
    status = tmp_path / "out" / "status.json"
    for i in range(3):
        status.unlink(missing_ok=True)
        run = _start(cfg_path)
        started = _wait_for(status, run)  # rank 0 writes it after each checkpoint
        assert started, f"run {i} ended before its first checkpoint"
        time.sleep(rng.uniform(0.0, 0.8))
        assert run.poll() is None, f"run {i} ended before its kill"
        kill_tree(run.pid)
        run.wait(timeout=30)
        local, glob = _check_tiers(tmp_path, cfg)
        if i == 0:  # the first rerun drained the pending checkpoint before training
            assert pending in glob or len([s for s in glob if s > pending]) >= 2, (pending, glob)

    # 3. a final run finishes: resumes what is pending, cleans up, restores the newest
    behind = _newest(tmp_path / "local" / "node0") > _newest(tmp_path / "global")
    ckpt_emu("run", cfg_path, "--quiet", check=True)
    res = results(tmp_path / "out")
    f = res["faults"]
    if behind:
        assert f["resumed"] and all(r["ok"] for r in f["resumed"]), f
    local, glob = _check_tiers(tmp_path, cfg)
    assert len(glob) == 2 and local == glob
    assert step_dirs(tmp_path / "global") == glob == step_dirs(tmp_path / "local" / "node0")
    assert not partials(tmp_path)
    assert res["load"]["ok"] and res["load"]["served_by"] == {"local": RANKS}
    assert all(m["incomplete"] == 0 for m in res["modes"].values())
