"""The simulate command's table and JSON: one column per mode, the emulator's words."""
from __future__ import annotations

from emulator.simulation import s3cost
from emulator.units import GIB, fmt_bytes, fmt_duration, table


def _pct(x) -> str:
    return "-" if x is None else f"{x * 100:.2f} %"


def _rate(bps: float) -> str:
    return f"{bps / GIB:,.1f} GiB/s" if bps >= GIB else f"{bps / 2 ** 20:,.1f} MiB/s"


def _s(x: float) -> str:
    return fmt_duration(x) if x else "0"


ROWS = [
    ("interval (training between)", lambda o: fmt_duration(o.interval_s)),
    ("goodput", lambda o: _pct(o.goodput)),
    ("checkpoint overhead", lambda o: _pct(o.checkpoint_overhead)),
    ("failure overhead", lambda o: _pct(o.failure_overhead)),
    ("  lost work", lambda o: _pct(o.lost_work_s / o.wall_s)),
    ("  restarts", lambda o: _pct(o.restart_s / o.wall_s)),
    ("  restores", lambda o: _pct(o.recovery_s / o.wall_s)),
    ("failures (restart / node)", lambda o: f"{o.failures.get('restart', 0)} / {o.failures.get('node', 0)}"),
    ("restored from (local / global)", lambda o: f"{o.restores.get('local', 0)} / {o.restores.get('global', 0)}"),
    ("checkpoints (complete)", lambda o: f"{o.checkpoints:,} ({o.complete:,})"),
    ("stall / ckpt mean", lambda o: _s(o.stall_mean_s)),
    ("stall / ckpt p99", lambda o: _s(o.stall_p99_s)),
    ("local write mean", lambda o: _s(o.local_write_mean_s)),
    ("drain mean", lambda o: _s(o.drain_mean_s)),
    ("drain overlap", lambda o: _pct(o.drain_overlap)),
    ("deadline misses", lambda o: f"{o.deadline_misses:,}"),
    ("peak backlog (not yet on global)", lambda o: fmt_bytes(o.peak_backlog_bytes)),
    ("durability lag mean / max", lambda o: f"{_s(o.durability_lag_mean_s)} / {_s(o.durability_lag_max_s)}"),
    ("global bandwidth used mean", lambda o: _rate(o.global_bytes_per_s)),
    ("global bandwidth used peak", lambda o: _rate(o.peak_global_bytes_per_s)),
    ("checkpoints per day", lambda o: f"{o.checkpoints_per_day:,.1f}"),
    ("PB written per day (global)", lambda o: f"{o.global_pb_per_day:,.3f}"),
    ("PB written per day (local)", lambda o: f"{o.local_pb_per_day:,.3f}"),
]
AS_RUN_ROWS = [
    ("checkpoints", lambda o: str(o.checkpoints)),
    ("stall / ckpt mean", lambda o: _s(o.stall_mean_s)),
    ("stall / ckpt p99", lambda o: _s(o.stall_p99_s)),
    ("local write mean", lambda o: _s(o.local_write_mean_s)),
    ("drain mean", lambda o: _s(o.drain_mean_s)),
    ("drain overlap", lambda o: _pct(o.drain_overlap)),
    ("deadline misses", lambda o: str(o.deadline_misses)),
    ("overhead (stall/train)", lambda o: _pct(o.overhead_ratio)),
]


def header(info: dict) -> list[str]:
    d = info["design"]
    lines = [f"simulate: {info['preset']} on {info['nodes']:,} nodes x {info['ranks_per_node']} = "
             f"{info['accelerators']:,} accelerators, " + (
                 "as the emulator runs it" if info["as_run"] else f"{info['days']:g} days, seed {info['seed']}"),
             f"  checkpoint: {fmt_bytes(d['checkpoint_bytes'])} ({len(d['groups'])} node group(s); largest node "
             f"{fmt_bytes(max(g['node_bytes'] for g in d['groups']))})"]
    if not info["as_run"]:
        lines.append(f"  failures: {info['failures']}")
    for mode, costs in d["costs"].items():
        label = "costs" if mode == "all" else f"costs ({mode})"
        lines.append(f"  {label}: " + "; ".join(f"{k} {v}" for k, v in costs.items()))
    if info.get("s3"):
        lines += [f"  {line}" for line in s3cost.format_job(info["s3"])]
    return lines


def render(info: dict, outcomes: dict) -> str:
    rows_def = AS_RUN_ROWS if info["as_run"] else ROWS
    modes = list(outcomes)
    rows = [[label] + [fn(outcomes[m]) for m in modes] for label, fn in rows_def]
    out = header(info) + ["", table(rows, [""] + modes, indent="")]
    for src in info.get("interval_sources", {}).items():
        out.append(f"  {src[0]} interval: {src[1]}")
    notes = info["design"]["notes"]
    if notes:
        out += ["", "notes:"] + [f"  - {n}" for n in notes]
    return "\n".join(out) + "\n"


def render_sweep(sw: dict) -> str:
    lines = []
    for mode, m in sw["modes"].items():
        lines.append(f"sweep {mode}: {len(m['intervals_s'])} intervals x {len(sw['global_gib_s'])} "
                     f"global bandwidths")
        b = m["best"]
        bw = "config" if b["global_gib_s"] is None else f"{b['global_gib_s']:g} GiB/s"
        lines.append(f"  best {mode}: every {fmt_duration(b['interval_s'])} with global {bw}: "
                     f"goodput {b['goodput'] * 100:.2f} %")
        lines += [f"    on the grid's edge: {edge}" for edge in b.get("on_edge") or []]
        for row in m["fitted"]:
            if row["interval_s"] is not None:
                rbw = "config" if row["global_gib_s"] is None else f"{row['global_gib_s']:g} GiB/s"
                lines.append(f"    global {rbw}: fitted optimum every {fmt_duration(row['interval_s'])}")
    return "\n".join(lines) + "\n"
