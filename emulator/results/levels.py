"""The tiers as levels, and the failure classes: results.json's ``levels`` and the report's lines.

Per tier (memory, peer, local, global): how often it takes a checkpoint, how many of
the checkpoints due there became complete on every node, their durability lag (snapshot
to complete there, slowest node) and how many were still at risk there when training
stopped. Per failure class (``process``: a crash, host memory survives; ``node``: a node
lost, its peers hold a copy; ``group``: a whole replica group lost): the recovery time of
the slowest rank, the tier it came from and the work lost. With a memory tier, one
restore from each file tier alone puts the memory restore beside the NVMe and global
restores of the same state. Durations are measured; at full size they are measured / scale,
as every duration of the report.
"""
from __future__ import annotations

from collections import Counter

from emulator.fullsize import full_fetch, full_load, tier_lag
from emulator.results.design_time import at_run_factor, stream_lag, stream_past_pace
from emulator.units import GIB


def level_summary(design, clock, ranks: list[dict]) -> dict:
    """{tier: {every, interval_s, due, complete, at_risk, lag_mean_s, lag_max_s, seconds_mean,
    node_bytes, overlap}} for each tier a checkpoint was due on, nearest first (intervals at full
    size: the config's step time; ``seconds_mean``: that tier's own stage, the write, send, copy or
    drain, of the slowest node; ``node_bytes``: the heaviest node's bytes of a checkpoint, at the
    run's scale; ``overlap``: the share of the training time that stage was in flight)."""
    base, wall, node_bytes = design.interval_steps, _wall(ranks), _node_bytes(ranks)
    out = {}
    for rung in design.ladder:
        name = rung.name
        steps = _per_checkpoint(ranks, name, clock.time_factor, clock.scale)
        if not steps:
            continue
        complete = [views for views in steps.values() if views is not None]
        lags = [max(v["lag_s"] for v in x) for x in complete]
        lags_full = [max(v["lag_full_s"] for v in x) for x in complete]
        stages = [max(v["seconds"] for v in x) for x in complete]
        every = rung.every
        out[name] = {"every": every, "interval_s": every * base * design.step_seconds,
                     "due": len(steps), "complete": len(complete), "at_risk": len(steps) - len(complete),
                     "lag_mean_s": _mean(lags), "lag_max_s": max(lags, default=0.0),
                     "lag_full_size_mean_s": _mean(lags_full),
                     "seconds_mean": _mean(stages), "node_bytes": node_bytes,
                     "overlap": sum(stages) / wall if wall else 0.0}
    return out


def _wall(ranks: list[dict]) -> float:
    """The checkpointing modes' training wall time (the slowest rank's)."""
    return max((sum(m["train_end"] - m["start"] for k, m in r["modes"].items() if k != "none") for r in ranks),
               default=0.0)


def _mean(values: list) -> float:
    return sum(values) / len(values) if values else 0.0


def _node_bytes(ranks: list[dict]) -> int:
    """The heaviest node's bytes of one checkpoint (its ranks' largest files)."""
    per_node = Counter()
    for r in ranks:
        per_node[r["node"]] += max((x["file_bytes"] for x in r["records"]), default=0)
    return max(per_node.values(), default=0)


def _per_checkpoint(ranks: list[dict], name: str, k: float = 1.0, scale: float | None = None) -> dict:
    """(mode, step) -> every rank's view of tier ``name`` there (with its lag at full size), or None
    where some rank's copy is not complete."""
    out = {}
    for r in ranks:
        for x in r["records"]:
            if name not in x.get("due", ()):
                continue
            key, view = (x["mode"], x["step"]), (x.get("tiers") or {}).get(name)
            ok = view is not None and view["complete"]
            if ok and x.get("written_to") == name:  # the tier it is written to: each rank's own write
                view = {**view, "seconds": x["local_write_s"]}
            if ok:
                view = {**view, "lag_full_s": tier_lag(x, name, k, bytes_factor=scale)}
            if key not in out:
                out[key] = []
            if out[key] is not None:
                out[key] = out[key] + [view] if ok else None
    return out


def recovery_summary(design, clock, ranks: list[dict]) -> list[dict]:
    """One entry per failure class that happened: slowest rank's recovery, where it came from,
    the step restored and the work lost (steps and seconds at full size)."""
    by_class = {}
    for r in ranks:
        for x in r.get("recoveries") or []:
            by_class.setdefault(x["class"], []).append(x)
    out = []
    for name, recs in by_class.items():
        loads = [x["load"] for x in recs]
        seconds = max(x.get("seconds", x["load"]["seconds"]) for x in recs)  # a peer fetch, then the restore
        k, f = clock.time_factor, clock.scale
        full_s = max(full_fetch(x, k, f) + full_load(x["load"], k, bytes_factor=f)["seconds"] for x in recs)
        lost = max(x["lost_steps"] for x in recs)
        out.append({"class": name, "ok": all(x["ok"] for x in loads), "step": loads[0]["step"],
                    "seconds": seconds, "seconds_full_size": full_s,
                    "fetch_s": max(x.get("fetch_s", 0.0) for x in recs),
                    # of it the time any node's paced sends and writes covered: the NIC's, as booked
                    "fetch_paced_s": max(x.get("fetch_paced_s", 0.0) for x in recs),
                    "lost_nodes": sorted({n for x in recs for n in x.get("lost_nodes", [])}),
                    "fetch_errors": [e for x in recs for e in x.get("fetch_errors", [])][:5],
                    "served_by": dict(Counter(x["tier"] or "none" for x in loads)),
                    "lost_steps": lost, "lost_work_s": lost * design.step_seconds,
                    "paced": any(x.get("paced_s", 0.0) > 0 for x in loads), "host_lag": _host_lag(loads),
                    "fetch_host_lag": max(_fetch_lag(x) for x in recs),
                    "fallbacks": [f for x in loads for f in x["fallbacks"]][:10]})
    return out


def _fetch_lag(rec: dict) -> float:
    """How far a rank's fetch streamed past its paced time here, over it (a peer send's host lag,
    emulator/results/design_time.py ``host_lags``); 0 where nothing paced it."""
    paced_s = rec.get("fetch_paced_s", 0.0)
    return stream_past_pace(rec.get("fetch_s", 0.0), paced_s, rec.get("fetch_stream_s", 0.0)) / paced_s if paced_s > 0 else 0.0


def _host_lag(loads: list[dict]) -> float:
    """How far the recovery's restores streamed past their paced time here, over it (the worst rank's):
    a recovery restores at the run's factor, not the loads' own, so this host may fall behind."""
    return max((stream_lag(x) for x in loads), default=0.0)


def tier_load_summary(clock, ranks: list[dict]) -> dict:
    """{tier: {ok, step, seconds (slowest rank), gib_s (all bytes / slowest), seconds_full_size}}
    of the restores from one tier alone."""
    out, node_bytes = {}, _node_bytes(ranks)
    n = min((len(r.get("tier_loads") or []) for r in ranks), default=0)
    for i in range(n):
        loads = [r["tier_loads"][i] for r in ranks]
        tier = loads[0]["from"]
        seconds = max(x["seconds"] for x in loads)
        full = max(full_load(x, clock.time_factor, bytes_factor=clock.scale)["seconds"] for x in loads)
        out[tier] = {"ok": all(x["ok"] for x in loads), "step": loads[0]["step"], "seconds": seconds,
                     "seconds_at_run_factor": max(at_run_factor(x, clock.time_factor) for x in loads),
                     "seconds_full_size": full, "node_bytes": node_bytes,
                     "gib_s": sum(x["bytes"] for x in loads) / max(seconds, 1e-9) / GIB}
    return out


def own_peak_rss(rank: dict) -> int:
    """A rank's peak RSS less the memory tier's pages it had mapped (counted as the tier's)."""
    return rank.get("peak_rss_bytes", 0) - rank.get("mapped_tier_peak_bytes", 0)


def host_memory_summary(cfg, ranks: list[dict]) -> dict | None:
    """With a memory tier, the node that used the most host memory: its ranks' peak RSS plus the
    most its memory and peer tiers held at once, against what the design puts there: state and
    staging (on the CPU) and the tier copies (keep + 1 of its own, keep + 1 per node it holds)."""
    tiers = cfg.tiers
    if tiers.memory is None:
        return None
    copies = tiers.host_memory_copies(cfg.checkpoint.keep)
    nodes = {}
    for r in ranks:
        n = nodes.setdefault(r["node"], {"rss": 0, "tiers": 0, "state": 0, "file": 0})
        n["rss"] += own_peak_rss(r)
        n["tiers"] = max(n["tiers"], r.get("memory_tier_peak_bytes", 0))
        on_cpu = (r.get("device") or {"kind": "cpu"})["kind"] == "cpu"
        n["state"] += r["state_bytes"] * (2 if on_cpu else 1)
        n["file"] += max((x["file_bytes"] for x in r["records"]), default=0)
    node, n = max(nodes.items(), key=lambda kv: kv[1]["rss"] + kv[1]["tiers"])
    expected = n["state"] + copies * n["file"]
    used = n["rss"] + n["tiers"]
    return {"node": node, "peak_rss_bytes": n["rss"], "tier_peak_bytes": n["tiers"], "used_bytes": used,
            "tier_copies": copies, "expected_bytes": expected, "ratio": used / expected if expected else None}


def level_lines(results: dict, fmt_s) -> list[str]:
    """The report's lines for the levels, the recoveries per failure class and the restores per tier."""
    lines = []
    levels = results.get("levels") or {}
    if len(levels) > 1 or "memory" in levels:
        lines.append("tiers (every N-th checkpoint; lag: snapshot to complete there, slowest node):")
        for name, x in levels.items():
            lines.append(f"  {name:<7} every {x['every']:>3} ({fmt_s(x['interval_s'])} at full size): "
                         f"{x['complete']}/{x['due']} complete, lag mean {fmt_s(x['lag_mean_s'])} "
                         f"max {fmt_s(x['lag_max_s'])}, at risk {x['at_risk']}")
    for x in results.get("recoveries") or []:
        served = ", ".join(f"{k}: {v}" for k, v in x["served_by"].items())
        fetched = ""
        if x.get("fetch_s"):  # a group loss leaves no peer copy: the time went looking for one
            fetched = (f", after {fmt_s(x['fetch_s'])} finding no surviving peer copy" if x["class"] == "group"
                       else f", after {fmt_s(x['fetch_s'])} fetching from a peer")
        lines.append(f"recovery from a {x['class']} failure: step {x['step']} in {fmt_s(x['seconds'])} "
                     f"({fmt_s(x['seconds_full_size'])} at full size; slowest rank; from {served}{fetched}), "
                     f"work lost {x['lost_steps']} steps ({fmt_s(x['lost_work_s'])})" + ("" if x["ok"] else " FAILED"))
    hm = results.get("host_memory")
    if hm:
        lines.append(f"host memory (node {hm['node']}): ranks' peak RSS (less the tier pages they map) "
                     f"{hm['peak_rss_bytes'] / GIB:.2f} GiB + memory "
                     f"tiers {hm['tier_peak_bytes'] / GIB:.2f} GiB at most = {hm['used_bytes'] / GIB:.2f} GiB, against "
                     f"state + staging + {hm['tier_copies']} tier copies = {hm['expected_bytes'] / GIB:.2f} GiB "
                     f"(x{hm['ratio']:.2f}; RSS includes each process's own footprint, ~0.3 GiB with torch)")
    by_tier = results.get("restore_by_tier") or {}
    if by_tier:
        lines.append("restore of the same state from each tier alone: " + ", ".join(
            f"{k} {fmt_s(v['seconds'])} ({v['gib_s']:.2f} GiB/s)" if v["ok"] else f"{k} none loadable on every rank"
            for k, v in by_tier.items()))
    return lines
