"""``python -m bench.crash``: a kill campaign. SIGKILL the launcher, torchrun or a rank at random
instants, rerun in the same place, and check that nothing was lost.

Each trial (seeded; ``--seed`` replays a campaign exactly):

1. starts ``ckpt-emu run --duration 20s`` (2 ranks, sync then async, a checkpoint every 0.2 s)
   in the campaign's one folder, as a user would after the previous trial;
2. at a random instant in its first 8 s of training, SIGKILLs one victim: the CLI, the torchrun
   agent, or one rank process (the instant falls in whatever phase is under way: staging, local
   write, drain, manifest, retention);
3. checks that no process of the run is left 5 s later (orphans: the run had 7 s or more to go),
   names any, and kills them, so that what follows checks what the run left, not a race with them;
4. checks the tiers: every visible checkpoint complete, every file's size and CRC32C matching
   its manifest and its bytes exactly the state that was staged (replayed from the manifest's
   lineage; a mismatch is a torn or wrong checkpoint);
5. reruns to completion in the same place: it must succeed (resume, recovery, clean-up), restore
   the newest checkpoint and verify it, and leave tiers that pass step 4 again.

Prints one line per trial and a summary; exit status 1 if any trial failed.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from .common import work_folder

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))  # the crash invariants live with the tests (crashcheck.py)

VICTIMS = ("cli", "torchrun", "rank")
ORPHAN_WAIT_S = 5.0  # a run's processes die within seconds of their launcher
KILLED_RUN = "20s"   # the killed run trains this long, so an orphan would still be running when checked
#: set in every campaign run's environment, which each of its processes inherits (ranks forked from
#: torchrun's agent have the agent's command line, which names no config)
CAMPAIGN_ENV = "CKPT_EMU_CRASH_CAMPAIGN"


def write_config(folder: Path) -> Path:
    import yaml
    cfg = {
        "extends": "llama3-8b", "parallelism": {"ranks": 2},
        "run": {"scale": 0.0005, "out": str(folder / "out")},
        "training": {"step_seconds": 0.1 / 0.0005},  # full-size seconds: 0.1 s per step at this scale
        "checkpoint": {"interval_steps": 2, "saves": 10, "loads": 2, "keep": 2, "baseline": False},
        "tiers": {"local": {"backend": "dir", "path": str(folder / "local" / "node{node}")},
                  "global": {"backend": "dir", "path": str(folder / "global")}},
    }
    path = folder / "campaign.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def run_environment(folder: Path) -> dict:
    """The environment of the campaign's runs in ``folder``: marked, so ``_orphans`` finds them."""
    return {**os.environ, CAMPAIGN_ENV: str(Path(folder).resolve())}


def _cli(cfg: Path, *extra: str) -> subprocess.Popen:
    # --force: every trial and rerun writes its results into the same folder
    return subprocess.Popen([sys.executable, "-m", "emulator.cli", "run", str(cfg), "--quiet", "--force", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env=run_environment(cfg.parent))


def _victim(kind: str, cli: subprocess.Popen, rng: random.Random) -> int | None:
    from crashcheck import agent_pids, rank_pids
    torchrun = agent_pids(cli.pid)
    ranks = rank_pids(cli.pid)  # by name: a forked rank's command line is its agent's
    if kind == "cli":
        return cli.pid
    pool = torchrun if kind == "torchrun" else ranks
    return rng.choice(pool) if pool else None


def _orphans(folder: Path) -> list[int]:
    """Live processes of the campaign's runs in ``folder`` (marked in their environment, which no
    process can drop from ``/proc/PID/environ``; zombies excluded)."""
    from crashcheck import is_alive
    mark, out = f"{CAMPAIGN_ENV}={Path(folder).resolve()}".encode(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and mark in _environ(int(entry)) and is_alive(int(entry)):
            out.append(int(entry))
    return out


def _names(pids: list[int]) -> str:
    """The processes' names (``/proc/PID/comm``: ``ckpt-rank0``, ``ckpt-forkserver``, ...), to say which survived."""
    names = []
    for pid in pids:
        try:
            names.append(Path(f"/proc/{pid}/comm").read_text().strip())
        except OSError:
            names.append(f"{pid} (gone)")
    return ", ".join(names)


def _kill(pids: list[int]) -> None:
    """SIGKILL ``pids`` and wait until none runs."""
    from crashcheck import is_alive
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.time() + 30
    while any(is_alive(pid) for pid in pids) and time.time() < deadline:
        time.sleep(0.1)


def _environ(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []


def _verify(folder: Path, cfg) -> list[int]:
    from crashcheck import verify_dir_tier
    verify_dir_tier(folder / "local" / "node0", cfg)
    return verify_dir_tier(folder / "global", cfg, ranks=2)


def trial(n: int, folder: Path, cfg_path: Path, cfg, rng: random.Random) -> dict:
    kind = rng.choice(VICTIMS)
    delay = rng.uniform(0.0, 8.0)  # sync for the first 10 s, then async
    status = folder / "out" / "status.json"
    status.unlink(missing_ok=True)
    cli = _cli(cfg_path, "--duration", KILLED_RUN)
    t0 = time.time()
    while not status.exists() and cli.poll() is None and time.time() - t0 < 120:
        time.sleep(0.05)
    time.sleep(delay)
    checkpoints = json.loads(status.read_text())["checkpoints"] if status.exists() else 0
    pid = _victim(kind, cli, rng) if cli.poll() is None else None
    killed_at = time.time() - t0
    if pid is not None:
        os.kill(pid, signal.SIGKILL)
    cli.communicate(timeout=300)
    deadline = time.time() + ORPHAN_WAIT_S
    while _orphans(folder) and time.time() < deadline:
        time.sleep(0.2)
    orphans = _orphans(folder)
    row = {"trial": n, "victim": kind if pid is not None else "none (run had ended)",
           "after_s": round(killed_at, 1), "checkpoints_before_kill": checkpoints,
           "orphans": len(orphans), "orphan_names": _names(orphans), "torn": "", "rerun": ""}
    _kill(orphans)  # the tiers are checked as the run left them, not while an orphan still writes
    try:
        _verify(folder, cfg)
    except AssertionError as exc:
        row["torn"] = str(exc)[:200]
    rerun = _cli(cfg_path)
    _, err = rerun.communicate(timeout=600)
    if rerun.returncode != 0:
        row["rerun"] = err.strip()[-200:]
    else:
        res = json.loads((folder / "out" / "results.json").read_text())
        if not res["load"]["ok"]:
            row["rerun"] = "load failed: " + "; ".join(res["load"].get("errors") or [])
        try:
            _verify(folder, cfg)
        except AssertionError as exc:
            row["torn"] = row["torn"] or f"after the rerun: {str(exc)[:200]}"
    row["ok"] = not (row["orphans"] or row["torn"] or row["rerun"])
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.crash", description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1, help="replays a campaign exactly")
    ap.add_argument("--workdir", help="where the campaign's tiers live (default: a fresh temporary folder)")
    ap.add_argument("--json", action="store_true", help="one JSON object with every trial")
    args = ap.parse_args(argv)
    from emulator.config import load_config
    folder, _ = work_folder(args.workdir, "ckpt-emu-crash-")
    cfg_path = write_config(folder)
    cfg = load_config(str(cfg_path))
    rng = random.Random(args.seed)
    rows = []
    for n in range(1, args.trials + 1):
        rows.append(trial(n, folder, cfg_path, cfg, rng))
        if not args.json:
            r = rows[-1]
            print(f"trial {n:3d}: kill {r['victim']:<8} after {r['after_s']:5.1f} s "
                  f"({r['checkpoints_before_kill']} checkpoints): "
                  + ("ok" if r["ok"] else f"FAILED orphans={r['orphans']} ({r['orphan_names']}) torn={r['torn']!r} "
                     f"rerun={r['rerun']!r}"),
                  flush=True)
    summary = {"trials": len(rows), "seed": args.seed,
               "victims": {v: sum(r["victim"] == v for r in rows) for v in VICTIMS},
               "torn_or_wrong": sum(bool(r["torn"]) for r in rows),
               "orphaned_runs": sum(r["orphans"] > 0 for r in rows),
               "rerun_failures": sum(bool(r["rerun"]) for r in rows), "workdir": str(folder)}
    print(json.dumps({"summary": summary, "trials": rows} if args.json else summary, indent=None if not args.json else 1))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
