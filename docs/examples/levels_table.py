"""Side-by-side table of `ckpt-emu plan CONFIG --json` outputs (docs/multi-level-designs.md).

Usage: python docs/examples/levels_table.py NAME=PLAN.json [NAME=PLAN.json ...]
"""
import json
import sys


def pct(x):
    return f"{100 * x:.2f}%"


def tiers(plan):
    """Per tier at the recommended intervals: every N-th checkpoint, its interval, its copy and headroom."""
    return "<br>".join(f"{name} every {t['every']} ({t['interval_s']:.0f} s): copy {t['copy_s']:.1f} s, "
                       f"x{t['headroom']:.2f}" for name, t in plan["tiers"].items())


def classes(plan):
    """Per failure class: the tier it restores from, its detection + restart and its restore."""
    return "<br>".join(f"{name}: {c['tier']}, {c['detect_s'] + c['restart_s']:.0f} s + {c['restore_s']:.1f} s"
                       for name, c in plan["classes"].items())


def main(args):
    print("| design | goodput at its intervals | recommended | goodput there | per tier | recovery per class |")
    print("|---|---|---|---|---|---|")
    for arg in args:
        name, path = arg.split("=", 1)
        with open(path) as f:
            plan = json.load(f)
        rec = plan["recommended"]
        own = plan["modes"][rec["mode"]]["configured"]["goodput"]
        every = ", ".join(f"{k} {v}" for k, v in rec["every"].items())
        print(f"| {name} | {pct(own)} | {rec['mode']} every {rec['base_interval_s']:.1f} s: {every} |"
              f" {pct(rec['goodput'])} | {tiers(plan)} | {classes(plan)} |")


if __name__ == "__main__":
    main(sys.argv[1:])
