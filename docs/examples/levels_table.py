"""Side-by-side table of `ckpt-emu plan CONFIG --json` outputs (docs/multi-level-designs.md).

Usage: python docs/examples/levels_table.py NAME=PLAN.json [NAME=PLAN.json ...]
"""
import json
import sys


def pct(x):
    return f"{100 * x:.2f}%"


def tiers(levels):
    """Per tier: every N-th checkpoint and the bandwidth it needs (per node; the job's for global)."""
    out = []
    for name, t in levels["tiers"].items():
        need = f"{t['bytes_per_s'] / 1e6:,.1f} MB/s per node"
        if t["job_bytes_per_s"] is not None:
            need += f", {t['job_bytes_per_s'] / 1e9:,.1f} GB/s job"
        out.append(f"{name} every {t['every']}: {need}")
    return "<br>".join(out)


def classes(levels):
    """Per failure class: the tier it recovers from, its recovery (restart + restore) and the
    work it loses on average."""
    restart = levels["restart_s"]
    return "<br>".join(
        f"{c['class']}: {c['level']}, {restart:.0f} s + {c['recovery_s'] - restart:.1f} s,"
        f" loses {c['lost_work_s']:.0f} s" for c in levels["classes"])


def main(args):
    print("| design | goodput (analytic / simulated) | recommended every | goodput at recommended |"
          " bandwidth per tier | recovery per class |")
    print("|---|---|---|---|---|---|")
    for arg in args:
        name, path = arg.split("=", 1)
        lv = json.load(open(path))["levels"]
        g, r = lv["goodput"], lv["recommended"]
        every = ", ".join(f"{k} {v}" for k, v in r["every"].items())
        print(f"| {name} | {pct(g['analytic'])} / {pct(g['simulated'])} | {every} |"
              f" {pct(r['goodput']['analytic'])} / {pct(r['goodput']['simulated'])} |"
              f" {tiers(lv)} | {classes(lv)} |")


if __name__ == "__main__":
    main(sys.argv[1:])
