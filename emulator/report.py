"""Turn every rank's records into the summary (MLPerf style: the worst rank decides).

Per mode: stall per checkpoint (the job's stall at a checkpoint is its worst
rank's; mean and p99 over checkpoints, and the rank with the highest mean),
local write and drain durations, save throughput (all ranks' bytes over the
slowest rank's local write), drain overlap (drain-busy time over the mode's
wall time, worst node), deadline misses, and overhead (the worst rank's total
stall over the training loop's wall time). Loads: total bytes over the
slowest rank's load time, and which tier served them.
"""
from __future__ import annotations

import json
import math
import os
from collections import Counter, defaultdict
from pathlib import Path

from . import outdir

GIB = 1 << 30


def _p(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); 0 for no values."""
    if not values:
        return 0.0
    vals = sorted(values)
    return vals[max(0, math.ceil(q / 100 * len(vals)) - 1)]


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def summarize_mode(mode: str, ranks: list[dict]) -> dict:
    by_step = defaultdict(list)
    for r in ranks:
        for rec in r["records"]:
            if rec["mode"] == mode:
                by_step[rec["step"]].append(rec)
    steps = sorted(by_step)
    job_stall = [max(x["stall_s"] for x in by_step[s]) for s in steps]
    local_write = [max(x["local_write_s"] for x in by_step[s]) for s in steps]
    drain = [max(x["drain_s"] for x in by_step[s]) for s in steps]
    save_tp = [sum(x["file_bytes"] for x in by_step[s]) / max(1e-9, max(x["local_write_s"] for x in by_step[s]))
               for s in steps]
    per_rank_stall = {r["rank"]: [x["stall_s"] for x in r["records"] if x["mode"] == mode] for r in ranks}
    worst_rank = max(per_rank_stall, key=lambda k: _mean(per_rank_stall[k])) if steps else 0
    walls = [r["modes"][mode] for r in ranks if mode in r["modes"]]
    train_wall = max((w["train_end"] - w["start"]) for w in walls) if walls else 0.0
    mode_wall = max((w["end"] - w["start"]) for w in walls) if walls else 0.0
    node_drain = defaultdict(float)
    for s in steps:
        for node in {x["node"] for x in by_step[s]}:
            node_drain[node] += max(x["drain_s"] for x in by_step[s] if x["node"] == node)
    total_stall = max((sum(v) for v in per_rank_stall.values()), default=0.0)
    return {
        "checkpoints": len(steps),
        "steps": max((w["steps"] for w in walls), default=0),
        "stall_mean_s": _mean(job_stall),
        "stall_p99_s": _p(job_stall, 99),
        "stall_max_s": max(job_stall, default=0.0),
        "worst_rank": worst_rank,
        "worst_rank_stall_mean_s": _mean(per_rank_stall.get(worst_rank, [])),
        "local_write_mean_s": _mean(local_write),
        "drain_mean_s": _mean(drain),
        "complete_mean_s": _mean(max(x["complete_s"] for x in by_step[s]) for s in steps),
        "save_gib_s": _mean(save_tp) / GIB,
        "drain_overlap_ratio": (max(node_drain.values(), default=0.0) / mode_wall) if mode_wall else 0.0,
        "deadline_misses": sum(any(x["missed"] for x in by_step[s]) for s in steps),
        "incomplete": sum(not all(x["global_complete"] for x in by_step[s]) for s in steps),
        "errors": sorted({x["error"] for s in steps for x in by_step[s] if x["error"]})[:5],
        "training_wall_s": train_wall,
        "stall_total_s": total_stall,
        "overhead_ratio": total_stall / train_wall if train_wall else 0.0,
        "final_flush_s": max((w["flush_s"] for w in walls), default=0.0),
    }


def summarize_loads(ranks: list[dict]) -> dict:
    n = min((len(r["loads"]) for r in ranks), default=0)
    per_load, tiers, fallbacks = [], Counter(), []
    secs_by_tier = defaultdict(list)
    for i in range(n):
        recs = [r["loads"][i] for r in ranks]
        worst = max(x["seconds"] for x in recs)
        per_load.append(sum(x["bytes"] for x in recs) / max(worst, 1e-9))
        for x in recs:
            tiers[x["tier"] or "none"] += 1
            secs_by_tier[x["tier"] or "none"].append(x["seconds"])
            fallbacks += x["fallbacks"]
    return {
        "loads": n,
        "load_gib_s": _mean(per_load) / GIB,
        "load_worst_s": max((max(r["loads"][i]["seconds"] for r in ranks) for i in range(n)), default=0.0),
        "ok": all(r["loads"][i]["ok"] for r in ranks for i in range(n)),
        "served_by": dict(tiers),
        "recovery_mean_s_by_tier": {k: _mean(v) for k, v in secs_by_tier.items()},
        "fallbacks": fallbacks[:20],
        "fallback_count": len(fallbacks),
        "page_cache_dropped": all(r["page_cache_dropped"] for r in ranks) if n else False,
        "errors": sorted({r["loads"][i].get("error", "") for r in ranks for i in range(n)} - {""})[:3],
    }


def timeline(ranks: list[dict]) -> dict:
    """Per mode, events relative to the mode's start, as emulator.timeline expects."""
    out = {}
    for mode in {m for r in ranks for m in r["modes"]}:
        t0 = min(r["modes"][mode]["start"] for r in ranks if mode in r["modes"])
        t1 = max(r["modes"][mode]["end"] for r in ranks if mode in r["modes"])
        events = []
        for r in ranks:
            w = r["modes"].get(mode)
            if not w:
                continue
            for s, e in w["compute"]:
                events.append({"rank": r["rank"], "kind": "compute", "start": s - t0, "end": e - t0})
            for kind, s, e in r["events"]:
                if t0 <= s <= t1:
                    events.append({"rank": r["rank"], "kind": kind, "start": s - t0, "end": e - t0})
        out[mode] = events
    return out


def fault_summary(ranks: list[dict]) -> dict:
    """What results.json says about faults: counts, resumed drains, the recovery after a restart."""
    from collections import Counter
    counts = Counter()
    for r in ranks:
        counts.update(r.get("fault_counts") or {})
    by_step = {}
    for r in ranks:
        for x in r.get("resume") or []:
            s = by_step.setdefault(x["step"], {"step": x["step"], "ok": x["global_complete"], "drain_s": 0.0,
                                               "error": x["error"]})
            s["drain_s"] = max(s["drain_s"], x["drain_s"])
    recs = [r["recovery"] for r in ranks if r.get("recovery")]
    recovery = None
    if recs:
        recovery = {"ok": all(x["ok"] for x in recs), "step": recs[0]["step"],
                    "seconds": max(x["seconds"] for x in recs),
                    "served_by": dict(Counter(x["tier"] or "none" for x in recs)),
                    "fallbacks": [f for x in recs for f in x["fallbacks"]][:20]}
    records = [x for r in ranks for x in r["records"]]
    return {
        "attempt": max((r.get("attempt", 0) for r in ranks), default=0),
        "counts": dict(sorted(counts.items())),
        "resumed": [by_step[s] for s in sorted(by_step)],
        "recovery": recovery,
        "local_full_files": sum(x["local_full"] for x in records),
        "direct_to_global_files": sum(x["local_full"] and x["written_to"] == "global" for x in records),
        "skipped_checkpoints": len({(x["mode"], x["step"]) for x in records if x["skipped"]}),
        "abandoned_drains": len({(x["mode"], x["step"], x["node"]) for x in records if x["abandoned"]}),
    }


def attempts_summary(cfg, ranks: list[dict]) -> list[dict]:
    """Every torchrun attempt of the run: each earlier (restarted) one from the records the
    ranks kept as they went, and the last one; per-mode summaries of each."""
    last = max((r.get("attempt", 0) for r in ranks), default=0)
    out = []
    for attempt in range(last + 1):
        if attempt == last:
            per_rank, started = ranks, None
        else:
            kept = [next((a for a in r.get("earlier_attempts", []) if a["attempt"] == attempt), {}) for r in ranks]
            per_rank = [{**r, "modes": {}, "records": k.get("records", [])} for r, k in zip(ranks, kept)]
            started = max((k.get("started", 0) for k in kept), default=0)
        records = [x for r in per_rank for x in r["records"]]
        finished = len({(x["mode"], x["step"]) for x in records})
        out.append({
            "attempt": attempt, "ended": "finished" if attempt == last else "restarted",
            "checkpoints_started": finished if started is None else started,
            "checkpoints": finished,
            "complete_on_global": sorted({x["step"] for x in records if x["global_complete"]}),
            "modes": {m: summarize_mode(m, per_rank) for m in cfg.checkpoint.modes
                      if any(x["mode"] == m for x in records)},
        })
    return out


def content_summary(ranks: list[dict]) -> dict:
    """How the bytes were made and what a sample of the written files shows."""
    from .content import summarize_audits
    return {**(ranks[0].get("content") or {}),
            **summarize_audits([r.get("content_audit") for r in ranks])}


def memory_summary(ranks: list[dict]) -> dict:
    """Peak RSS of the worst rank against its state plus one staging copy."""
    worst = max(ranks, key=lambda r: r.get("peak_rss_bytes", 0))
    budget = 2 * worst["state_bytes"]
    return {"peak_rss_max_bytes": worst.get("peak_rss_bytes", 0), "rank": worst["rank"],
            "state_plus_staging_bytes": budget,
            "ratio": worst.get("peak_rss_bytes", 0) / budget if budget else None}


def build_results(cfg, ranks: list[dict]) -> dict:
    from .sizing import checkpoint_size
    ranks = sorted(ranks, key=lambda r: r["rank"])
    size = checkpoint_size(cfg.model, cfg.parallelism)
    return {
        "config": cfg.to_dict(),
        "preset": cfg.model.name,
        "scale": cfg.run.scale,
        "ranks": len(ranks),
        "nodes": len({r["node"] for r in ranks}),
        "tiers": {"local": ranks[0]["local"], "global": ranks[0]["global"]},
        "bytes": {
            "job_checkpoint_emulated": size.total_bytes,
            "run_emulated": sum(r["emulated_bytes"] for r in ranks),
            "run_actual_state": sum(r["state_bytes"] for r in ranks),
        },
        "modes": {m: summarize_mode(m, ranks) for m in cfg.checkpoint.modes},
        "load": summarize_loads(ranks),
        "stopped_early": any(r["stopped_early"] for r in ranks),
        "failure": ranks[0].get("failure"),
        "faults": fault_summary(ranks),
        "attempts": attempts_summary(cfg, ranks),
        "content": content_summary(ranks),
        "memory": memory_summary(ranks),
        "timeline": timeline(ranks),
        "per_rank": [{k: r.get(k) for k in ("rank", "node", "records", "loads", "earlier_attempts")} for r in ranks],
    }


def _fmt_s(v: float) -> str:
    return f"{v * 1000:.1f} ms" if v < 1 else f"{v:.2f} s"


#: the summary table's rows: label and how to show it from a mode's summary
TABLE_ROWS = [
    ("checkpoints", lambda m: str(m["checkpoints"])),
    ("stall / ckpt mean", lambda m: _fmt_s(m["stall_mean_s"])),
    ("stall / ckpt p99", lambda m: _fmt_s(m["stall_p99_s"])),
    ("worst rank (mean stall)", lambda m: f"{m['worst_rank']} ({_fmt_s(m['worst_rank_stall_mean_s'])})"),
    ("local write mean", lambda m: _fmt_s(m["local_write_mean_s"])),
    ("drain mean", lambda m: _fmt_s(m["drain_mean_s"])),
    ("save throughput", lambda m: f"{m['save_gib_s']:.2f} GiB/s"),
    ("drain overlap", lambda m: f"{m['drain_overlap_ratio'] * 100:.1f} %"),
    ("deadline misses", lambda m: str(m["deadline_misses"])),
    ("incomplete checkpoints", lambda m: str(m["incomplete"])),
    ("overhead (stall/train)", lambda m: f"{m['overhead_ratio'] * 100:.1f} %"),
]


def format_table(results: dict) -> str:
    """The report: what ran where, the per-mode table, then loads, content, faults."""
    lines = _header_lines(results) + _mode_table(results) + _load_lines(results)
    modes = _shown_modes(results)
    for m in modes:
        for err in results["modes"][m]["errors"]:
            lines.append(f"{m} error: {err}")
    lines += _content_lines(results) + _fault_lines(results)
    if results["stopped_early"]:
        lines.append("stopped early (Ctrl-C): loads skipped")
    return "\n".join(lines) + "\n"


def _shown_modes(results: dict) -> list[str]:
    return [m for m, v in results["modes"].items() if v["steps"] or v["checkpoints"]] or list(results["modes"])


def _header_lines(results: dict) -> list[str]:
    b = results["bytes"]
    return [
        f"ckpt-emu: {results['preset']} x{results['scale']:g}, {results['ranks']} ranks on {results['nodes']} node(s)",
        f"  checkpoint: emulated {b['run_emulated'] / GIB:.2f} GiB for these ranks "
        f"(job {b['job_checkpoint_emulated'] / GIB:.1f} GiB), actual {b['run_actual_state'] / GIB:.3f} GiB",
        f"  local tier: {results['tiers']['local'] or 'none (direct to global)'}",
        f"  global tier: {results['tiers']['global']}",
        "",
    ]


def _mode_table(results: dict) -> list[str]:
    modes = _shown_modes(results)
    width = max(len(label) for label, _ in TABLE_ROWS) + 2
    lines = [" " * width + "".join(f"{m:>18}" for m in modes)]
    for label, show in TABLE_ROWS:
        lines.append(f"{label:<{width}}" + "".join(f"{show(results['modes'][m]):>18}" for m in modes))
    return lines


def _load_lines(results: dict) -> list[str]:
    ld = results["load"]
    if not ld["loads"]:
        return []
    served = ", ".join(f"{k}: {v}" for k, v in sorted(ld["served_by"].items()))
    cache = "page cache dropped before each load" if ld["page_cache_dropped"] else \
        "page cache NOT dropped (not permitted): loads may be served from memory"
    lines = ["", f"loads: {ld['loads']}, {ld['load_gib_s']:.2f} GiB/s (worst {_fmt_s(ld['load_worst_s'])}), "
                 f"rank-loads served by {served}; {cache}"]
    if ld["fallback_count"]:
        lines.append(f"  fallbacks: {ld['fallback_count']} (e.g. {ld['fallbacks'][0]})")
    if not ld["ok"]:
        lines.append("  LOAD FAILED: " + (ld.get("errors") or ["no complete checkpoint could be restored"])[0])
    return lines


def _fault_lines(results: dict) -> list[str]:
    fa, lines = results.get("faults") or {}, []
    for a in (results.get("attempts") or [])[:-1]:
        lines.append(f"attempt {a['attempt']}: restarted; {a['checkpoints_started']} checkpoint(s) started, "
                     f"{a['checkpoints']} finished, {len(a['complete_on_global'])} complete on the global tier")
    if fa.get("counts"):
        lines.append("faults: " + ", ".join(f"{k} {v}" for k, v in fa["counts"].items()))
    if fa.get("local_full_files"):
        lines.append(f"local tier full: {fa['local_full_files']} file(s), {fa['direct_to_global_files']} written "
                     f"straight to global, {fa['skipped_checkpoints']} checkpoint(s) skipped")
    if fa.get("abandoned_drains"):
        lines.append(f"abandoned drains: {fa['abandoned_drains']}")
    for x in fa.get("resumed") or []:
        lines.append(f"resumed drain of step {x['step']} left by an earlier run: "
                     + (f"complete on global in {_fmt_s(x['drain_s'])}" if x["ok"] else f"failed ({x['error']})"))
    if fa.get("recovery"):
        rv = fa["recovery"]
        lines.append(f"restart {fa['attempt']}: restored step {rv['step']} in {_fmt_s(rv['seconds'])} "
                     f"(served by {', '.join(f'{k}: {v}' for k, v in rv['served_by'].items())})")
    failure = results.get("failure")
    if failure and failure.get("kind") == "lose_local":
        lines.append(f"emulated failure: node {failure['node']} lost its local tier after checkpoint "
                     f"{failure['after_checkpoint']}; recovery per tier: "
                     + ", ".join(f"{k} {_fmt_s(v)}" for k, v in sorted(results["load"]["recovery_mean_s_by_tier"].items())))
    return lines


def _content_lines(results: dict) -> list[str]:
    c, mem = results.get("content") or {}, results.get("memory") or {}
    lines = []
    if c.get("kind"):
        what = "unique, incompressible" if c["kind"] == "unique" else \
            f"reducible (dedup {c['dedup_ratio']:g}x, compress {c['compress_ratio']:g}x)"
        line = f"content: {what} 4 KiB blocks"
        if c.get("sampled_blocks"):
            changed = c.get("changed_across_checkpoints")
            line += (f"; sampled {c['sampled_blocks']} blocks of the written files: "
                     f"{c['distinct_within_file'] * 100:.1f} % distinct in a file, "
                     f"{c['distinct_across_ranks'] * 100:.1f} % across ranks, "
                     + (f"{changed * 100:.1f} % changed since the previous checkpoint, " if changed is not None else "")
                     + f"zlib-1 keeps {c['zlib_ratio'] * 100:.1f} %")
        lines.append(line)
    if mem.get("peak_rss_max_bytes"):
        lines.append(f"memory: peak RSS {mem['peak_rss_max_bytes'] / GIB:.2f} GiB (rank {mem['rank']}) for "
                     f"{mem['state_plus_staging_bytes'] / GIB:.2f} GiB of state + one staging copy")
    return lines


def write_outputs(cfg, ranks: list[dict], out: Path) -> dict:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results = build_results(cfg, ranks)
    tmp = out / (outdir.RESULTS + ".tmp")
    tmp.write_text(json.dumps(results, indent=1))
    os.replace(tmp, out / outdir.RESULTS)
    (out / outdir.REPORT).write_text(format_table(results))
    try:
        from .timeline import write_timeline
        write_timeline(results, out / outdir.TIMELINE)
    except ImportError:
        pass
    return results
