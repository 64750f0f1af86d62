"""The simulate command's text: the design's costs (one figure each), one column per mode, the sweep."""
from __future__ import annotations

from emulator.design.ladder import lasting_file_tiers
from emulator.design.wear import Holding, capacity_heading, capacity_table
from emulator.simulation import s3cost
from emulator.units import fmt_bytes, fmt_duration, fmt_rate, table


def _pct(x) -> str:
    return "-" if x is None else f"{x * 100:.2f} %"


def _s(x: float) -> str:
    return fmt_duration(x) if x else "0"


def _counts(d: dict, keys) -> str:
    return " / ".join(str(d.get(k, 0)) for k in keys)


def rows(tiers: list, classes: list, family: str) -> list:
    return [
        ("interval (training between)", lambda o: fmt_duration(o.interval_s)),
        ("goodput", lambda o: _pct(o.goodput)),
        ("checkpoint overhead", lambda o: _pct(o.checkpoint_overhead)),
        ("failure overhead", lambda o: _pct(o.failure_overhead)),
        ("  lost work", lambda o: _pct(o.lost_work_s / o.wall_s)),
        ("  detection and restarts", lambda o: _pct(o.restart_s / o.wall_s)),
        ("  restores", lambda o: _pct(o.recovery_s / o.wall_s)),
        (f"failures ({' / '.join(classes)})", lambda o: _counts(o.failures, classes)),
        (f"restored from ({' / '.join(tiers)})", lambda o: _counts(o.restores, tiers)),
        ("checkpoints (complete)", lambda o: f"{o.checkpoints:,} ({o.complete:,})"),
        ("stall / ckpt mean", lambda o: _s(o.stall_mean_s)),
        ("stall / ckpt p99", lambda o: _s(o.stall_p99_s)),
        ("write mean (nearest tier)", lambda o: _s(o.local_write_mean_s)),
        ("drain mean", lambda o: _s(o.drain_mean_s)),
        ("drain overlap", lambda o: _pct(o.drain_overlap)),
        *[(f"lag mean {t}", lambda o, t=t: _s(o.tiers[t]["lag_mean_s"])) for t in tiers],
        ("deadline misses", lambda o: f"{o.deadline_misses:,}"),
        ("peak backlog (not yet on global)", lambda o: fmt_bytes(o.peak_backlog_bytes, family)),
        ("durability lag mean / max", lambda o: f"{_s(o.durability_lag_mean_s)} / {_s(o.durability_lag_max_s)}"),
        ("global bandwidth used mean", lambda o: fmt_rate(o.global_bytes_per_s, family)),
        ("global bandwidth used peak", lambda o: fmt_rate(o.peak_global_bytes_per_s, family)),
        ("checkpoints per day", lambda o: f"{o.checkpoints_per_day:,.1f}"),
        *[(f"written per day ({t}, {'every node' if t == 'local' else 'the job'})", lambda o, t=t: fmt_bytes(o.tiers[t]["bytes_per_day"], family))
          for t in tiers if t in lasting_file_tiers()],
    ]


AS_RUN_ROWS = [
    ("checkpoints", lambda o: str(o.checkpoints)),
    ("stall / ckpt mean", lambda o: _s(o.stall_mean_s)),
    ("stall / ckpt p99", lambda o: _s(o.stall_p99_s)),
    ("write mean (nearest tier)", lambda o: _s(o.local_write_mean_s)),
    ("drain mean", lambda o: _s(o.drain_mean_s)),
    ("drain overlap", lambda o: _pct(o.drain_overlap)),
    ("deadline misses", lambda o: str(o.deadline_misses)),
    ("overhead (stall/train)", lambda o: _pct(o.overhead_ratio)),
]


def _label(mode: str, what: str) -> str:
    return what if mode == "all" else f"{what} ({mode})"


def _design_lines(info: dict) -> list[str]:
    d, lines = info["design"], []
    for mode, c in d["checkpoint"].items():
        stalls = [f"{m} stall {_s(c[f'{m}_stall_s'])}" for m in ("sync", "async") if mode in ("all", m)]
        lines.append(f"  {_label(mode, 'one checkpoint alone')}: snapshot {_s(c['snapshot_s'])} "
                     f"({c['snapshot_rate']} per accelerator, {c['snapshot_source']}); {'; '.join(stalls)}; "
                     f"retention {_s(c['retention_s'])} after each")
        lines.append(f"    snapshot per rank: {c['snapshot']['describe']}"
                     + (f"; DCP's planning after it {_s(c['snapshot']['planning_s'])}" if c["snapshot"]["planning_s"] else ""))
    for mode, tiers in d["tiers"].items():
        body = [[name, f"every {t['every']}", str(t["keep"]), _s(t["copy_s"]), _s(t["lag_s"]),
                 f"{t['link']} ({t['source']})"] for name, t in tiers.items()]
        lines.append(f"  {_label(mode, 'tiers')} (copy and lag of one checkpoint alone, from the end of its snapshot):")
        lines.append(table(body, ["tier", "takes", "keeps", "copy", "lag", "link"], indent="    ",
                           left=(0, 1, 5)))
    if info["as_run"]:
        return lines
    for mode, classes in d["classes"].items():
        body = [[name, f"{c['per_day']:.3g}", c["from"], _s(c["detect_s"]), _s(c["restart_s"]),
                 _s(c["restore_s"]) + (" (measured)" if c["restore_measured"] else ""), _s(c["recovery_s"])]
                for name, c in classes.items()]
        lines.append(f"  {_label(mode, 'failure classes')} (each recovery: detection, restart or replacement, "
                     f"then the restore):")
        lines.append(table(body, ["class", "per day", "from", "detect", "restart", "restore", "recovery"],
                           indent="    ", left=(0, 2)))
    return lines


def header(info: dict) -> list[str]:
    d, fam = info["design"], info["family"]
    lines = [f"simulate: {info['preset']} on {info['nodes']:,} nodes x {info['ranks_per_node']} = "
             f"{info['accelerators']:,} accelerators, " + (
                 "as the emulator runs it" if info["as_run"] else f"{info['days']:g} days, seed {info['seed']}"),
             f"  checkpoint: {fmt_bytes(d['checkpoint_bytes'], fam)} ({fmt_bytes(d['mean_node_bytes'], fam)} per node "
             f"on average, the heaviest {fmt_bytes(d['heaviest_node_bytes'], fam)}; {len(d['groups'])} node group(s))"]
    if not info["as_run"]:
        lines.append(f"  failures: {info['failures']}")
    lines += _design_lines(info)
    if info.get("s3"):
        lines += [f"  {line}" for line in s3cost.format_job(info["s3"])]
    return lines


def _planner_lines(info: dict) -> list[str]:
    out = []
    for mode, p in (info.get("planner") or {}).items():
        every = ", ".join(f"{k} {v}" for k, v in p["every"].items())
        out.append(f"  planner ({mode}): every {fmt_duration(p['interval_s'])} of training (each tier every N-th: "
                   f"{every}); analytic goodput {_pct(p['goodput'])}; writes "
                   f"{fmt_bytes(p['global_bytes_per_day'], info['family'])} a day to global storage "
                   f"({p['global_checkpoints_per_day']:,.1f} checkpoints)"
                   + (f" (S3: ${p['s3_per_day_usd']:,.2f} a day in requests and storage, {p['s3_price_list']})"
                      if "s3_per_day_usd" in p else ""))
        out += [f"    {n}" for n in p["notes"]]
    return out


def _capacity_lines(info: dict) -> list[str]:
    """Per mode what each tier held and was written a day, at the checkpoints a day simulated."""
    out = []
    for mode, c in (info.get("capacity") or {}).items():
        held = tuple(Holding(**{k: v for k, v in h.items() if k not in ("over_capacity", "used")})
                     for h in c["tiers"].values())
        out += [capacity_heading(f"({mode}, at the checkpoints a day simulated)"),
                capacity_table(held, info["family"])] + [f"  FLAG: {f}" for f in c["flags"]]
    return out


def render(info: dict, outcomes: dict) -> str:
    modes = list(outcomes)
    first = outcomes[modes[0]]
    rows_def = AS_RUN_ROWS if info["as_run"] else rows(list(first.tiers), list(first.failures), info["family"])
    body = [[label] + [fn(outcomes[m]) for m in modes] for label, fn in rows_def]
    out = header(info) + ["", table(body, [""] + modes, indent="")]
    out += _capacity_lines(info)
    for mode, src in info.get("interval_sources", {}).items():
        out.append(f"  {mode} interval: {src}")
    out += _planner_lines(info)
    notes = info["design"]["notes"]
    if notes:
        out += ["", "notes:"] + [f"  - {n}" for n in notes]
    return "\n".join(out) + "\n"


def _row_text(row: dict, family: str = "decimal") -> str:
    parts = []
    if row.get("global_bandwidth_bps") is not None:
        parts.append(f"global {fmt_rate(row['global_bandwidth_bps'], family)}")
    parts += [f"{k} every {v}" for k, v in (row.get("every") or {}).items()]
    return ", ".join(parts) or "the config's design"


def render_sweep(sw: dict) -> str:
    lines = []
    for mode, m in sw["modes"].items():
        lines.append(f"sweep {mode}: {len(m['intervals_s'])} intervals x {len(sw['rows'])} rows "
                     f"({', '.join(sw['keys'])})")
        b = m["best"]
        edge = (f"  ON THE GRID'S EDGE ({', '.join(b['on_edge'])}): the optimum may lie beyond it, widen the grid"
                if b["on_edge"] else "")
        lines.append(f"  best {mode}: every {fmt_duration(b['interval_s'])} with {_row_text(b, sw['units'])}: "
                     f"goodput {b['goodput'] * 100:.2f} %{edge}")
        for row in m["fitted"]:
            if row["interval_s"] is not None:
                lines.append(f"    {_row_text(row, sw['units'])}: fitted optimum every "
                             f"{fmt_duration(row['interval_s'])}")
        p = m.get("planner")
        if p:
            every = ", ".join(f"{k} {v}" for k, v in p["every"].items())
            lines.append(f"  planner's choice over the same grid: {every}: goodput "
                         f"{p['goodput_simulated'] * 100:.2f} % "
                         f"simulated ({p['goodput_analytic'] * 100:.2f} % analytic); within one grid step of the "
                         f"best cell: {'yes' if p['agree_within_one_step'] else 'NO'}")
    return "\n".join(lines) + "\n"
