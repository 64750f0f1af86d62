"""``python -m bench.sim``: how fast and how small ``ckpt-emu simulate`` is at full scale (issue 15).

Each scenario runs the real command in a fresh process (both modes, Poisson failures,
the planner's interval for each mode, which for async is the shortest and so the most
checkpoints) and reports its wall time and the child's peak RSS against the targets:

==========================  =================================  ========  ========
scenario                    job                                time      memory
==========================  =================================  ========  ========
16k_54d                     Llama-3 405B, 2,048 nodes x 8,     < 60 s    < 1 GiB
                            54 days (Llama 3's run)
100k_30d                    Llama-3 405B (PP 20), 12,500       < 120 s   < 1 GiB
                            nodes x 8, 30 days
==========================  =================================  ========  ========

Usage: ``python -m bench.sim [--only 16k_54d] [--json]``. Times are this machine's (2 cores,
shared): run it alone for figures to quote.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DESIGN = """\
extends: llama3-405b
tiers:
  local: {backend: dir, path: /nonexistent/nvme, emulate: {write_gib_s: 6.0, read_gib_s: 7.0, shared_by: node}}
  global: {backend: dir, path: /nonexistent/pfs,
           emulate: {write_gib_s: 400.0, read_gib_s: 800.0, latency_ms: 1, shared_by: job}}
"""

SCENARIOS = {
    "16k_54d": {"nodes": 2048, "days": 54, "set": [], "target_s": 60.0},
    "100k_30d": {"nodes": 12500, "days": 30, "set": ["parallelism.pp=20"], "target_s": 120.0},
}
MEMORY_TARGET_BYTES = 1 << 30


def run_scenario(name: str, work: Path) -> dict:
    sc = SCENARIOS[name]
    cfg = work / "design.yaml"
    cfg.write_text(DESIGN)
    cmd = [sys.executable, "-m", "emulator.cli", "simulate", str(cfg), "--nodes", str(sc["nodes"]),
           "--days", str(sc["days"]), "--nic", "25GiB/s", "--interval", "planner", "--json",
           "--out", str(work / name)]
    for s in sc["set"]:
        cmd += ["--set", s]
    out_path, err_path = work / "stdout.json", work / "stderr.txt"
    with open(out_path, "w") as out_f, open(err_path, "w") as err_f:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out_f, stderr=err_f)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage: its peak RSS
        seconds = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        return {"error": err_path.read_text().strip()[-500:]}
    rss = usage.ru_maxrss * 1024  # Linux reports KiB
    out = json.loads(out_path.read_text())
    return {
        "seconds": seconds, "target_s": sc["target_s"], "peak_rss_bytes": rss,
        "memory_target_bytes": MEMORY_TARGET_BYTES,
        "met": seconds < sc["target_s"] and rss < MEMORY_TARGET_BYTES,
        "accelerators": out["accelerators"], "days": sc["days"],
        "checkpoints": {m: o["checkpoints"] for m, o in out["modes"].items()},
        "failures": {m: sum(o["failures"].values()) for m, o in out["modes"].items()},
        "goodput": {m: o["goodput"] for m, o in out["modes"].items()},
    }


def format_table(results: dict) -> str:
    lines = [f"{'scenario':<10} {'accelerators':>12} {'days':>5} {'seconds':>8} {'target':>7} "
             f"{'peak RSS':>9} {'met':>4}  checkpoints (sync / async)"]
    for name, r in results.items():
        if "error" in r:
            lines.append(f"{name:<10} error: {r['error']}")
            continue
        ck = r["checkpoints"]
        lines.append(f"{name:<10} {r['accelerators']:>12,} {r['days']:>5} {r['seconds']:>8.1f} "
                     f"{r['target_s']:>6.0f}s {r['peak_rss_bytes'] / 2 ** 20:>7.0f}Mi {'yes' if r['met'] else 'NO':>4}"
                     f"  {ck.get('sync', 0):,} / {ck.get('async', 0):,}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.sim", description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=list(SCENARIOS), help="scenarios to run (default: all)")
    ap.add_argument("--json", action="store_true", help="one JSON object")
    args = ap.parse_args(argv)
    os.environ.setdefault("PYTHONPATH", str(Path(__file__).resolve().parent.parent))
    results = {}
    with tempfile.TemporaryDirectory(prefix="ckpt-emu-bench-sim-") as tmp:
        for name in args.only or list(SCENARIOS):
            work = Path(tmp) / name
            work.mkdir()
            results[name] = run_scenario(name, work)
    print(json.dumps(results, indent=1) if args.json else format_table(results))
    return 0 if all(r.get("met") for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
