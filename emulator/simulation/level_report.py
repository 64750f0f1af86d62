"""The text of a level plan (emulator/simulation/planning.py ``level_plan``), for ``plan CONFIG``."""
from __future__ import annotations

from emulator.units import fmt_bytes, fmt_duration, fmt_pct, fmt_rate, table


def _every(every: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in every.items())


def render_levels(p: dict) -> str:
    """Per tier its interval, bandwidth, lag and restore; goodput by both models; the planner's
    intervals; per failure class its recovery and the work it loses."""
    T = p["base_interval_s"]
    measured = p["sources"].get("recoveries_measured") or []
    lines = [f"\nLevels ({p['mode']}, {p['nodes']:,} nodes, {fmt_bytes(p['node_bytes'])} per node, "
             f"a checkpoint every {fmt_duration(T)}; rates from the "
             f"{'run' if p['sources']['rates'] == 'measured' else 'design'}"
             + (f"; recovery measured by the run: {', '.join(measured)}" if measured else "") + ")"]
    rows = []
    for name, t in p["tiers"].items():
        need = fmt_rate(t["bytes_per_s"]) + " per node"
        if t["job_bytes_per_s"] is not None:
            need += f", {fmt_rate(t['job_bytes_per_s'])} for the job"
        rows.append([name, f"every {t['every']}", fmt_duration(t["interval_s"]), need, fmt_duration(t["stall_s"]),
                     fmt_duration(t["lag_s"]), fmt_duration(t["restore_s"]), ", ".join(t["recovers"]) or "-"])
    lines.append(table(rows, ["tier", "takes", "interval", "bandwidth needed", "stall", "lag", "restore",
                              "recovers"], left=(0, 1, 3, 7)))
    if p["mode"] == "async":
        share = p["sources"].get("interference_share") or 0.0
        lines.append(f"  background copies cost training {fmt_pct(share)} of their time (measured by the run)" if share
                     else "  background copies cost training nothing here (no measurement): --calibrate with a run "
                          "that has its baseline (checkpoint.baseline) charges their interference")
    rec = p["recommended"]
    g, rg = p["goodput"], rec["goodput"]
    lines.append(f"  goodput at these intervals: analytic {fmt_pct(g['analytic'])}, simulated "
                 f"{fmt_pct(g['simulated'])} ({p['horizon_s'] / 86400:g} days)")
    lines.append(f"  recommended: {_every(rec['every'])} (every N-th checkpoint: "
                 + ", ".join(f"{k} {fmt_duration(v)}" for k, v in rec["interval_s"].items())
                 + f"); goodput analytic {fmt_pct(rg['analytic'])}, simulated {fmt_pct(rg['simulated'])}")
    rows = [[c["class"], f"{c['failures_per_day']:.3g}", c["level"], fmt_duration(c["recovery_s"]),
             fmt_duration(c["lost_work_s"]), fmt_pct(c["share_of_time"])] for c in p["classes"]]
    lines.append(table(rows, ["failure", "per day", "from", "recovery", "work lost", "of the time"],
                       left=(0, 2)))
    return "\n".join(lines) + "\n"
