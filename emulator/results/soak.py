"""A soak's steady state (``ckpt-emu run --soak``): results.json's ``soak`` and its report lines.

Over the soak's checkpoints, at full size: the job's stall and durability lag per checkpoint (the
slowest rank's), their p50 and p99, and their drift (the median of the last third against the
first third's); every recovery (the slowest rank's fetch and restore at full size, where it read
from, the work lost) and their p50 and p99; what must stay flat: each rank's resident memory and
each node's tier files, over the first tenth of the soak once it is warm (every tier holding what
it keeps, the first recovery over: the soak's ``warm_checkpoints``) against its last tenth.
"""
from __future__ import annotations

import math
from statistics import median

from emulator.fullsize import full_fetch, full_load, full_record
from emulator.units import GIB


def soak_summary(clock, ranks: list[dict]) -> dict | None:
    """results.json's ``soak`` of a run on ``clock`` (None for a run that is not a soak)."""
    soaks = [r["soak"] for r in ranks if r.get("soak")]
    if not soaks:
        return None
    k, scale = clock.time_factor, clock.scale
    by_step: dict = {}
    for r in ranks:
        for x in r["records"]:
            by_step.setdefault(x["step"], []).append(full_record(x, k, bytes_factor=scale))
    steps = sorted(by_step)
    stalls = [max(x["stall_s"] for x in by_step[s]) for s in steps]
    lags = [max(x["lag_s"] for x in by_step[s]) for s in steps if all(x["global_complete"] for x in by_step[s])]
    return {"duration_s": soaks[0]["duration_s"], "checkpoints": len(steps),
            "stall_s": _spread(stalls), "lag_s": _spread(lags),
            "recoveries": _recoveries(ranks, k, scale),
            "warm_checkpoints": soaks[0]["warm_checkpoints"], **_flatness(soaks)}


def _spread(values: list[float]) -> dict:
    """p50, p99 and drift (the last third's median over the first third's, minus 1) of a series."""
    third = len(values) // 3
    first, last = values[:third], values[-third:] if third else []
    drift = median(last) / median(first) - 1 if first and median(first) > 0 else 0.0
    return {"p50": _p(values, 50), "p99": _p(values, 99), "drift": drift, "count": len(values)}


def _p(values: list[float], q: float) -> float:
    vals = sorted(values)
    return vals[max(0, math.ceil(q / 100 * len(vals)) - 1)] if vals else 0.0


def _recoveries(ranks: list[dict], k: float, scale: float) -> dict:
    """Every recovery of the soak (each rank keeps one record of each, in order): the slowest rank's
    fetch and restore at full size, the tier it read, the steps lost; and their p50 and p99."""
    events = []
    for recs in zip(*(r.get("recoveries") or [] for r in ranks)):
        events.append({"class": recs[0]["class"], "step": recs[0]["load"]["step"],
                       "seconds_full_size": max(full_fetch(x, k, scale) + full_load(x["load"], k, bytes_factor=scale)
                                                ["seconds"] for x in recs),
                       "seconds": max(x["seconds"] for x in recs), "ok": all(x["load"]["ok"] for x in recs),
                       "served_by": sorted({x["load"]["tier"] or "none" for x in recs}),
                       "lost_steps": max(x["lost_steps"] for x in recs)})
    full = [e["seconds_full_size"] for e in events]
    return {"count": len(events), "ok": all(e["ok"] for e in events), "p50_s": _p(full, 50), "p99_s": _p(full, 99),
            "events": events[:50] + (events[-50:] if len(events) > 100 else events[50:])}


def _flatness(soaks: list[dict]) -> dict:
    """What must stay flat, from every rank's samples after each checkpoint: the largest rank's
    resident memory and each tier's files on the fullest node, per checkpoint (``trajectory``), and
    the most memory and the fewest files over the first tenth of the samples from ``warm_checkpoints``
    on (at least a retention cycle of samples) against the same over the last tenth."""
    by_n: dict = {}
    for s in soaks:
        for p in s["samples"]:
            point = by_n.setdefault(p["checkpoints"], {"checkpoints": p["checkpoints"], "rss_bytes": 0, "files": {}})
            point["rss_bytes"] = max(point["rss_bytes"], p["rss_bytes"])
            for tier, n in p["files"].items():
                point["files"][tier] = max(point["files"].get(tier, 0), n)
    trajectory = [by_n[n] for n in sorted(by_n)]
    warm = [p for p in trajectory if p["checkpoints"] >= soaks[0]["warm_checkpoints"]] or trajectory[-1:]
    window = max(len(warm) // 10, min(len(warm) // 2, 5), 1)  # a short soak: at least a few checkpoints
    first, last = warm[:window], warm[-window:]
    tiers = sorted({t for p in trajectory for t in p["files"]})
    return {"rss_bytes": _flat(first, last, lambda p: p["rss_bytes"]),
            "files": {t: _flat(first, last, lambda p, t=t: p["files"].get(t, 0), fewest=True) for t in tiers},
            "trajectory": trajectory}


def _flat(first: list[dict], last: list[dict], value, *, fewest: bool = False) -> dict:
    """The most of ``value`` over the first and the last cycle (``fewest``: the least, a floor that a
    leak raises and a passing moment does not: a file being deleted by retention), and its growth."""
    pick = min if fewest else max
    a, b = pick(map(value, first), default=0), pick(map(value, last), default=0)
    return {"first": a, "last": b, "growth": (b - a) / a if a else 0.0}


def soak_lines(results: dict, fmt_s) -> list[str]:
    """The report's soak lines (none for a run that is not a soak)."""
    s = results.get("soak")
    if not s:
        return []
    st, lag, rc = s["stall_s"], s["lag_s"], s["recoveries"]
    lines = [f"soak: {fmt_s(s['duration_s'])} of wall time here, {s['checkpoints']} checkpoints (async); at full "
             f"size: stall p50 {fmt_s(st['p50'])} p99 {fmt_s(st['p99'])} (drift {st['drift']:+.1%}), durability "
             f"lag p50 {fmt_s(lag['p50'])} p99 {fmt_s(lag['p99'])} (drift {lag['drift']:+.1%}); drift: the last "
             "third's median over the first third's"]
    if rc["count"]:
        lines.append(f"  recoveries: {rc['count']}{'' if rc['ok'] else ' (some restored nothing)'}, at full size "
                     f"p50 {fmt_s(rc['p50_s'])} p99 {fmt_s(rc['p99_s'])} (slowest rank's fetch and restore each)")
    rss = s["rss_bytes"]
    if rss:
        lines.append(f"  resident memory (largest rank): at most {rss['first'] / GIB:.2f} GiB in the soak's first "
                     f"tenth once warm (from checkpoint {s['warm_checkpoints']}: every tier holding what it keeps, "
                     f"the first recovery over), {rss['last'] / GIB:.2f} GiB in its last ({rss['growth']:+.1%})")
    for tier, f in sorted(s["files"].items()):
        lines.append(f"  {tier} tier files at rest (fullest node): at least {f['first']} in the first tenth once warm, "
                     f"{f['last']} in the last ({f['growth']:+.1%})")
    return lines
