"""The numbers of a run, from every rank's records (MLPerf style: the worst rank decides).

Per mode: stall per checkpoint (the job's stall at a checkpoint is its worst
rank's; mean and p99 over checkpoints, and the rank with the highest mean),
local write and drain durations, save throughput (all ranks' bytes over the
slowest rank's local write), drain overlap (drain time over the mode's wall
time, worst node), deadline misses, overhead (the job's total stall over the
training loop's wall time; every rank waits for the slowest at each checkpoint,
so the job's total is the sum over checkpoints of each one's worst rank, not
the largest per-rank sum), and against the no-checkpoint baseline: slowdown
(wall time per step over the baseline's, minus 1), the part of it that is
not stall (interference: background work slowing steps), goodput
(baseline time over the mode's time), step-time percentiles; and the
durability lag (snapshot to complete on the global tier) with the checkpoints
still at risk when training stopped. Every duration is also given at full size
(measured / run.scale). Loads: total bytes over the slowest rank's load time.
"""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import replace

from emulator.checkpoint.audit import summarize_audits
from emulator.config.sections import Dilation
from emulator.design import ladder
from emulator.fullsize import full, full_load, full_record, load_time_factor
from emulator.results.design_time import (at_run_factor, host_lags, host_seconds, host_shares, probed_software,
                                           software_seconds, stream_lag, swapped)
from emulator.results.levels import (host_memory_summary, level_summary, own_peak_rss, recovery_summary,
                                     tier_load_summary)
from emulator.results.requests import s3_summary
from emulator.results.scale_notes import (part_node_notes, rate_notes, raw_tier_notes, restore_notes, snapshot_notes,
                                          step_notes)
from emulator.design.snapshot import summary as snapshot_summary
from emulator.results.soak import soak_summary
from emulator.sizing import checkpoint_size
from emulator.units import GIB, fmt_rate

#: durations of a mode's summary that also appear at full size (measured / scale)
DURATIONS = ("stall_mean_s", "stall_p99_s", "stall_max_s", "d2h_mean_s", "local_write_mean_s", "drain_mean_s",
             "complete_mean_s", "lag_mean_s", "lag_p99_s", "lag_max_s", "step_wall_s",
             "step_p50_s", "step_p99_s", "training_wall_s", "stall_total_s")
#: a step counts as slowed when its compute took this much longer than the baseline's p99
SLOW_STEP_FACTOR = 1.1


def _p(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); 0 for no values."""
    if not values:
        return 0.0
    vals = sorted(values)
    return vals[max(0, math.ceil(q / 100 * len(vals)) - 1)]


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def summarize_loads(ranks: list[dict], time_factor: float = 1.0, scale: float | None = None) -> dict:
    n = min((len(r["loads"]) for r in ranks), default=0)
    per_load, tiers, fallbacks = [], Counter(), []
    secs_by_tier, run_secs_by_tier, full_by_tier = defaultdict(list), defaultdict(list), defaultdict(list)
    for i in range(n):
        recs = [r["loads"][i] for r in ranks]
        worst = max(x["seconds"] for x in recs)
        per_load.append(sum(x["bytes"] for x in recs) / max(worst, 1e-9))
        for x in recs:
            tiers[x["tier"] or "none"] += 1
            fallbacks += x["fallbacks"]
        for tier in {x["tier"] or "none" for x in recs}:  # a restart waits for its slowest rank
            mine = [x for x in recs if (x["tier"] or "none") == tier]
            secs_by_tier[tier].append(max(x["seconds"] for x in mine))
            run_secs_by_tier[tier].append(max(at_run_factor(x, time_factor) for x in mine))
            full_by_tier[tier].append(max(full_load(x, time_factor, bytes_factor=scale)["seconds"] for x in mine))
    return {
        "loads": n,
        "load_gib_s": _mean(per_load) / GIB,
        "load_worst_s": max((max(r["loads"][i]["seconds"] for r in ranks) for i in range(n)), default=0.0),
        "load_worst_full_size_s": max((max(full_load(r["loads"][i], time_factor, bytes_factor=scale)["seconds"] for r in ranks)
                                       for i in range(n)), default=0.0),
        "load_host_share": _load_host_share([r["loads"][i] for r in ranks for i in range(n)], time_factor, scale),
        "load_host_lag": _load_host_lag([r["loads"][i] for r in ranks for i in range(n)], time_factor, scale),
        "load_software_s": _load_software([r["loads"][i] for r in ranks for i in range(n)], time_factor, scale),
        "load_paced": any(r["loads"][i].get("paced_s", 0.0) > 0 for r in ranks for i in range(n)),
        "ok": all(r["loads"][i]["ok"] for r in ranks for i in range(n)),
        "served_by": dict(tiers),
        "recovery_mean_s_by_tier": {k: _mean(v) for k, v in secs_by_tier.items()},
        # the same at the run's time factor, where the loads had one of their own (simulate --as-run)
        "recovery_mean_s_by_tier_at_run_factor": {k: _mean(v) for k, v in run_secs_by_tier.items()},
        "recovery_full_size_s_by_tier": {k: _mean(v) for k, v in full_by_tier.items()},
        **_h2d_figures([r["loads"][i] for r in ranks for i in range(n)]),
        "fallbacks": fallbacks[:20],
        "fallback_count": len(fallbacks),
        "page_cache_dropped": all(r["page_cache_dropped"] for r in ranks) if n else False,
        "errors": sorted({r["loads"][i].get("error", "") for r in ranks for i in range(n)} - {""})[:3],
    }


def _worst_load(loads: list[dict], k: float, scale: float | None) -> tuple[float, dict]:
    """(full-size seconds, record) of the slowest rank-load at full size."""
    return max(((full_load(x, k, bytes_factor=scale)["seconds"], x) for x in loads), key=lambda p: p[0])


def _load_host_share(loads: list[dict], k: float, scale: float | None) -> float:
    """Of the slowest rank-load's full-size time, the share that is this host's own: its stream of
    the file's bytes where no paced read covered it (the host behind the paced rate); all of it where
    nothing paced its reads (this host's throughput over the scale). The software around the stream
    (listing, manifest, structure, collectives) is counted once and shown apart (:func:`_load_software`)."""
    if not loads:
        return 0.0
    whole, worst = _worst_load(loads, k, scale)
    if worst.get("paced_s", 0.0) > 0 and "lag_s" in worst:
        own = worst["lag_s"]
    elif all(load_time_factor(x, k) == 1 for x in loads):
        return 0.0
    else:
        own = host_seconds(worst["seconds"], worst.get("paced_s"), load_time_factor(worst, k), bytes_factor=scale)
    return own / whole if whole > 0 else 0.0


def _load_host_lag(loads: list[dict], k: float, scale: float | None) -> float:
    """How far the slowest rank-load's stream ran past its paced time here, over the paced time (a
    copy's host lag, emulator/results/design_time.py ``host_lags``): counted once, it may be a small
    share of the full-size figure while its reads were this host's, not the paced design's."""
    return stream_lag(_worst_load(loads, k, scale)[1]) if loads else 0.0


def _load_software(loads: list[dict], k: float, scale: float | None) -> float:
    """Of the slowest rank-load's full-size time, the software's own seconds, counted once: what no
    paced read covered outside its stream of the file's bytes (0 where the reads were not paced), at
    any time factor of the loads (1 too: x200 at scale 0.005)."""
    if not loads:
        return 0.0
    _, worst = _worst_load(loads, k, scale)
    paced_s = worst.get("paced_s", 0.0)
    return max(0.0, worst["seconds"] - paced_s - worst.get("lag_s", 0.0)) if paced_s > 0 else 0.0


def _h2d_figures(loads: list[dict]) -> dict:
    """A GPU restore's host-to-device copy: mean of the rank-loads' rates (0 without a device)."""
    rates = [x["bytes"] / x["h2d_s"] for x in loads if x.get("h2d_s", 0.0) > 0 and x["ok"]]
    return {"h2d_mean_s": _mean(x["h2d_s"] for x in loads if x.get("h2d_s", 0.0) > 0),
            "h2d_gib_s": _mean(rates) / GIB}


def device_summary(ranks: list[dict]) -> dict:
    """Where the state lived: the device kind, GPUs used, how many ranks share one GPU at most
    (more than one: they share its PCIe link, unlike a real node), the staging plan, and whether a
    paced snapshot swapped a CPU state's buffers."""
    devices = [r.get("device") or {"kind": "cpu"} for r in ranks]
    gpus = {(r["node"], d.get("index")) for r, d in zip(ranks, devices) if d["kind"] == "cuda"}
    staging = [r.get("staging") or {} for r in ranks]
    names = sorted({d.get("name", "") for d in devices} - {""})
    return {"kind": "cuda" if gpus else "cpu", "gpus": len(gpus), "names": names,
            "ranks_per_gpu": max((d.get("sharing", 1) for d in devices if d["kind"] == "cuda"), default=0),
            "ranks_per_gpu_min": min((d.get("sharing", 1) for d in devices if d["kind"] == "cuda"), default=0),
            "pinned_bytes_max": max((x.get("pinned_bytes", 0) for x in staging), default=0),
            "budget_bytes": min((x.get("budget_bytes", 0) for x in staging), default=0),
            "bucketed_ranks": sum(bool(x.get("bucketed")) for x in staging),
            "buckets_max": max((x.get("buckets", 0) for x in staging), default=0),
            "bucket_bytes": max((x.get("bucket_bytes", 0) for x in staging if x.get("bucketed")), default=0),
            "snapshot_swapped": any(swapped(x) for r in ranks for x in r["records"])}


def timeline(ranks: list[dict], slow_after: float | None = None) -> dict:
    """Per mode, events relative to the mode's start, as emulator.timeline expects; a step whose
    compute took longer than ``slow_after`` seconds is a ``slow_compute`` event."""
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
                kind = "slow_compute" if slow_after is not None and mode != "none" and e - s > slow_after else "compute"
                events.append({"rank": r["rank"], "kind": kind, "start": s - t0, "end": e - t0})
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
    return {**(ranks[0].get("content") or {}),
            **summarize_audits([r.get("content_audit") for r in ranks])}


def memory_summary(ranks: list[dict]) -> dict:
    """Peak RSS of the worst rank against its host memory by design: the state (when it lives
    on the CPU), one staging copy, and any pinned bucket slots."""
    worst = max(ranks, key=own_peak_rss)  # a mapped memory tier's pages are the tier's, not the rank's
    staging = worst.get("staging") or {}
    on_cpu = (worst.get("device") or {"kind": "cpu"})["kind"] == "cpu"
    slots = staging.get("pinned_bytes", 0) if staging.get("bucketed") else 0
    budget = worst["state_bytes"] * (2 if on_cpu else 1) + slots
    return {"peak_rss_max_bytes": own_peak_rss(worst), "rank": worst["rank"],
            "state_plus_staging_bytes": budget,
            "ratio": own_peak_rss(worst) / budget if budget else None}


def device_wait_summary(ranks: list[dict]) -> dict:
    """Per emulated tier: whether reads and writes share its device, and per phase and direction
    the seconds the worst rank's transfers waited on it beyond their real I/O."""
    out = {}
    for r in ranks:
        for tier, w in (r.get("device_waits") or {}).items():
            if w is None:
                continue
            mine = out.setdefault(tier, {"shared": w["shared"], "waits": {}})
            for phase, by_dir in w["waits"].items():
                into = mine["waits"].setdefault(phase, {})
                for direction, seconds in by_dir.items():
                    into[direction] = max(into.get(direction, 0.0), seconds)
    return out


def build_results(cfg, design, clock, ranks: list[dict]) -> dict:
    """results.json of a run of ``cfg``: its ``design`` (the one its ranks read), on its ``clock``
    (its time factor and dilation, as the ranks decided it), from every rank's result."""
    ranks = sorted(ranks, key=lambda r: r["rank"])
    size = checkpoint_size(cfg.model, cfg.parallelism)
    baseline = summarize_baseline(ranks)
    k, step_here = clock.time_factor, clock.wall(design.step_seconds)
    results = {
        "config": replace(cfg, run=replace(cfg.run, dilation=Dilation(clock.dilation))).to_dict(),  # as it ran
        "preset": cfg.model.name,
        "scale": cfg.run.scale,
        "ranks": len(ranks),
        "nodes": len({r["node"] for r in ranks}),
        "tiers": {"local": ranks[0]["local"], "global": ranks[0]["global"]},
        "tier_design": tier_design(design),
        "snapshot": snapshot_summary(design),
        "engine": engine_summary(cfg, ranks),
        "bytes": {
            "job_checkpoint_emulated": size.total_bytes,
            "run_emulated": sum(r["emulated_bytes"] for r in ranks),
            "run_actual_state": sum(r["state_bytes"] for r in ranks),
            # the design's bytes per byte of a rank's file, the least over the ranks: its tiers booked
            # each byte at this weight (torch.save's structure does not shrink with run.scale)
            "design_per_file_byte": min((r.get("bytes_weight", 1.0) for r in ranks), default=1.0),
        },
        "step_seconds": {"full_size": design.step_seconds, "here": step_here},
        "baseline": baseline,
        "time_factor": k,
        "dilation": ranks[0].get("dilation") or {"factor": clock.dilation, "auto": False},
        # run.wall_target: the scale it went at, run.scale's and why (emulator/rank/dilation.py fit_scale)
        "scale_fit": ranks[0].get("scale_fit"),
        "modes": {m: summarize_mode(m, ranks, baseline, k, clock.scale,
                                    software=probed_software(ranks[0].get("dilation")),
                                    wall_step_s=step_here) for m in cfg.checkpoint.modes},
        "units": {name: t.family for name, t in design.links.tiers.items()},
        "load": {**summarize_loads(ranks, k, clock.scale), "page_cache_scope": cfg.checkpoint.page_cache_scope},
        "stopped_early": any(r["stopped_early"] for r in ranks),
        "failure": ranks[0].get("failure"),
        "levels": level_summary(design, clock, ranks),
        "recoveries": recovery_summary(design, clock, ranks),
        "soak": soak_summary(clock, ranks),
        "restore_by_tier": tier_load_summary(clock, ranks),
        "host_memory": host_memory_summary(cfg, ranks),
        "faults": fault_summary(ranks),
        "attempts": attempts_summary(cfg, ranks),
        "content": content_summary(ranks),
        "memory": memory_summary(ranks),
        # the tiers in host memory emptied when the run ended (run.keep_tiers: false)
        "tiers_emptied": sorted({name for r in ranks for name in r.get("tiers_emptied") or []}),
        "device": device_summary(ranks),
        "device_waits": device_wait_summary(ranks),
        "s3": s3_summary(cfg, design, ranks),
        "timeline": timeline(ranks, baseline["step_p99_s"] * SLOW_STEP_FACTOR if baseline else None),
        "per_rank": [{k: r.get(k) for k in ("rank", "node", "records", "loads", "earlier_attempts", "peak_rss_bytes",
                                           "mapped_tier_peak_bytes")} for r in ranks],
    }
    results["notes"] = host_notes(design, results)
    return results


def tier_design(design) -> dict:
    """Per tier, what the design says of it, in the units it was written in (the live tier's own
    description gives the rates it was paced at here: the design's / the dilation)."""
    out = {}
    for name in ladder.file_tiers():
        e = design.emulation.whole.get(name)
        if e is None:
            continue
        family = design.link(name)
        family = family.family if family is not None else "binary"
        bits = [f"{d} {fmt_rate(getattr(e, d + '_gib_s') * GIB, family)}" for d in ("write", "read")
                if getattr(e, d + "_gib_s")]
        if e.latency_ms:
            bits.append(f"{e.latency_ms:g} ms per request")
        link = design.link(name)
        if name == "global" and link.source == "design":  # the design's global storage: the job shares it
            bits.append(f"this node's share of the job's {fmt_rate(link.write.aggregate_bps, family)}")
        elif name != "global" and not e.duplex:
            bits.append("reads and writes share the device")
        out[name] = ", ".join(bits)
    return out


def engine_summary(cfg, ranks: list[dict]) -> dict:
    """How the ranks wrote (``checkpoint.engine``) and, for dcp, the library's own seconds per mode:
    each phase's mean over the checkpoints of its slowest rank (measured here, at the run's scale)."""
    out = {"name": cfg.checkpoint.engine}
    by_mode: dict = {}
    for mode in cfg.checkpoint.modes:
        steps = defaultdict(list)
        for r in ranks:
            for rec in r["records"]:
                if rec["mode"] == mode and rec.get("engine_s"):
                    steps[rec["step"]].append(rec["engine_s"])
        if steps:
            phases = sorted({k for per in steps.values() for e in per for k in e})
            by_mode[mode] = {k: sum(max(e.get(k, 0.0) for e in per) for per in steps.values()) / len(steps)
                             for k in phases}
    if by_mode:
        out["measured_s"] = by_mode
    return out


def host_notes(design, results: dict) -> list[str]:
    """Where a figure is this host's or the scale's rather than the full-size design's (``design``:
    the run's)."""
    return (step_notes(results) + part_node_notes(design, results) + raw_tier_notes(design, results)
            + snapshot_notes(design, results) + rate_notes(results) + restore_notes(results))


def _by_step(mode: str, ranks: list[dict]) -> dict:
    by_step = defaultdict(list)
    for r in ranks:
        for rec in r["records"]:
            if rec["mode"] == mode:
                by_step[rec["step"]].append(rec)
    return by_step


def _walls(mode: str, ranks: list[dict]) -> list[dict]:
    return [r["modes"][mode] for r in ranks if mode in r.get("modes", {})]


def step_times(mode: str, ranks: list[dict]) -> list[float]:
    """Every rank's compute time per step of the mode (the stall is not in it)."""
    return [e - s for w in _walls(mode, ranks) for s, e in w["compute"]]


def summarize_baseline(ranks: list[dict]) -> dict | None:
    """The no-checkpoint mode: wall time per step (slowest rank) and compute percentiles."""
    walls = _walls("none", ranks)
    if not walls:
        return None
    steps = max(w["steps"] for w in walls)
    train = max(w["train_end"] - w["start"] for w in walls)
    times = step_times("none", ranks)
    return {"steps": steps, "training_wall_s": train, "step_wall_s": train / max(1, steps),
            "step_p50_s": _p(times, 50), "step_p99_s": _p(times, 99),
            "update_cpu_per_step_s": _update_cpu_per_step(walls)}


def at_full_size(measured_s: float, time_factor: float) -> float:
    """A span of wall time here on the full-size design's clock: measured / the time factor (scale x
    dilation). Right for the paced part of a phase; the timeline's axes use it for whole spans, and
    the report's figures split each phase (emulator/results/design_time.py)."""
    return measured_s / time_factor


def summarize_mode(mode: str, ranks: list[dict], baseline: dict | None = None, time_factor: float = 1.0,
                   scale: float = 1.0, software: dict | None = None, wall_step_s: float | None = None) -> dict:
    """A mode's figures as measured, and ``full_size``: as the full-size design's
    (emulator/results/design_time.py: paced time / the time factor, this host's own once;
    ``wall_step_s``: a step's paced time here, the rest of a step's time being this host's)."""
    out = {**_checkpoint_figures(mode, ranks), **_loop_figures(mode, ranks, baseline)}
    out["overhead_ratio"] = out["stall_total_s"] / out["training_wall_s"] if out["training_wall_s"] else 0.0
    if baseline is not None:
        out.update(_against_baseline(out, baseline))
    design = [{**r, "records": [_design_record(x, r, time_factor, scale) for x in r["records"]]} for r in ranks]
    full = _checkpoint_figures(mode, design)
    out["full_size"] = {k: full[k] if k in full else out[k] / time_factor for k in DURATIONS if k in out}
    out["full_size"]["save_bytes_per_s"] = full["save_gib_s"] * GIB / scale  # the full-size bytes
    out["full_size"].update(_ratios_at_full_size(out, full, baseline, time_factor, wall_step_s))
    records = [x for r in ranks for x in r["records"] if x["mode"] == mode]
    out["host_share"] = host_shares(records, time_factor, bytes_factor=scale)
    out["software_s"] = software_seconds(records)
    out["host_lag"] = host_lags(records, software or {})
    return out


def _ratios_at_full_size(m: dict, full: dict, baseline: dict | None, k: float, wall_step_s: float | None) -> dict:
    """The mode's loop and ratios on the design's clock: its steps at their paced time / ``k`` and
    this host's time past it once (:func:`_steps_at_full_size`), the full-size stall, the drains
    after training / ``k``; drains at their full-size figures. Ratios of the wall here would weigh
    this host's own time, counted once in each figure, 1/k times."""
    if not m["training_wall_s"]:
        return {}
    steps = _steps_at_full_size(m["training_wall_s"] - m["stall_total_s"], m["steps"], k, wall_step_s)
    train = steps + full["stall_total_s"]
    wall = train + max(0.0, m["mode_wall_s"] - m["training_wall_s"]) / k
    out = {"training_wall_s": train, "step_wall_s": train / m["steps"] if m["steps"] else 0.0,
           "overhead_ratio": full["stall_total_s"] / train,
           "drain_overlap_ratio": _overlap(full["node_drain_s"], wall)}
    if baseline is not None:
        base_s = _steps_at_full_size(baseline["training_wall_s"], baseline["steps"], k, wall_step_s)
        base = {"step_wall_s": base_s / baseline["steps"] if baseline["steps"] else 0.0}
        out.update(_against_baseline({**out, "steps": m["steps"], "stall_total_s": full["stall_total_s"]}, base))
    return out


def _steps_at_full_size(seconds: float, steps: int, k: float, wall_step_s: float | None) -> float:
    """``steps`` steps that took ``seconds`` here, on the design's clock: their paced time (a step
    each of ``wall_step_s``) / ``k``, and what they took past it (this host's loop: its Python, its
    updates, its scheduling) once, as any phase's own time (:func:`full`). All / ``k`` where the
    paced step is not known."""
    return full(seconds, steps * wall_step_s if wall_step_s is not None else None, k)


def _checkpoint_figures(mode: str, ranks: list[dict]) -> dict:
    by_step = _by_step(mode, ranks)
    steps = sorted(by_step)
    # the checkpoints the global tier takes (every one, unless tiers.global.interval_steps says less)
    drained = [s for s in steps if all("global" in x.get("due", ("global",)) for x in by_step[s])]
    worst = lambda key, among=steps: [max(x[key] for x in by_step[s]) for s in among]  # noqa: E731
    job_stall, lags = worst("stall_s"), [max(x["lag_s"] for x in by_step[s]) for s in steps
                                          if all(x["global_complete"] for x in by_step[s])]
    save_tp = [sum(x["file_bytes"] for x in by_step[s]) / max(1e-9, max(x["local_write_s"] for x in by_step[s]))
               for s in steps]
    per_rank_stall = {r["rank"]: [x["stall_s"] for x in r["records"] if x["mode"] == mode] for r in ranks}
    worst_rank = max(per_rank_stall, key=lambda k: _mean(per_rank_stall[k])) if steps else 0
    node_drain, mode_wall = _node_drain(by_step), _mode_wall(mode, ranks)
    return {
        "checkpoints": len(steps),
        "stall_mean_s": _mean(job_stall), "stall_p99_s": _p(job_stall, 99), "stall_max_s": max(job_stall, default=0.0),
        "worst_rank": worst_rank, "worst_rank_stall_mean_s": _mean(per_rank_stall.get(worst_rank, [])),
        **_d2h_figures(by_step, steps),
        "local_write_mean_s": _mean(worst("local_write_s")), "drain_mean_s": _mean(worst("drain_s", drained)),
        "complete_mean_s": _mean(worst("complete_s")), "save_gib_s": _mean(save_tp) / GIB,
        "lag_mean_s": _mean(lags), "lag_p99_s": _p(lags, 99), "lag_max_s": max(lags, default=0.0),
        "deadline_misses": sum(any(x["missed"] for x in by_step[s]) for s in steps),
        "incomplete": sum(not all(x["global_complete"] for x in by_step[s]) for s in drained),
        "errors": sorted({x["error"] for s in steps for x in by_step[s] if x["error"]})[:5],
        "stall_total_s": sum(job_stall),  # not the largest per-rank sum: the slowest rank changes
        "drain_overlap_ratio": _overlap(node_drain, mode_wall), "node_drain_s": node_drain, "mode_wall_s": mode_wall,
    }


def _d2h_figures(by_step: dict, steps: list) -> dict:
    """The device-to-host copy inside the stall (worst rank per checkpoint), and its rate:
    the slowest rank's bytes over its time, per checkpoint (0 where no rank has a device)."""
    worst = [max(by_step[s], key=lambda x: x.get("d2h_s", 0.0)) for s in steps]
    rates = [x["d2h_bytes"] / x["d2h_s"] for x in worst if x.get("d2h_s", 0.0) > 0]
    return {"d2h_mean_s": _mean(x.get("d2h_s", 0.0) for x in worst), "d2h_gib_s": _mean(rates) / GIB}


def _overlap(node_drain: float, mode_wall: float) -> float:
    """Drain time of the worst node over the mode's wall time (not capped: above 1, drains lag)."""
    return node_drain / mode_wall if mode_wall > 0 else 0.0


def _mode_wall(mode: str, ranks: list[dict]) -> float:
    return max((w["end"] - w["start"] for w in _walls(mode, ranks)), default=0.0)


def _node_drain(by_step: dict) -> float:
    """The worst node's drain seconds, summed over the mode's checkpoints."""
    node_drain = defaultdict(float)
    for recs in by_step.values():
        for node in {x["node"] for x in recs}:
            node_drain[node] += max(x["drain_s"] for x in recs if x["node"] == node)
    return max(node_drain.values(), default=0.0)


def _loop_figures(mode: str, ranks: list[dict], baseline: dict | None) -> dict:
    walls = _walls(mode, ranks)
    steps = max((w["steps"] for w in walls), default=0)
    train = max((w["train_end"] - w["start"] for w in walls), default=0.0)
    times = step_times(mode, ranks)
    out = {"steps": steps, "training_wall_s": train, "step_wall_s": train / steps if steps else 0.0,
           "step_p50_s": _p(times, 50), "step_p99_s": _p(times, 99),
           "at_risk": max((w.get("at_risk", 0) for w in walls), default=0),
           "final_flush_s": max((w["flush_s"] for w in walls), default=0.0),
           "update_cpu_per_step_s": _update_cpu_per_step(walls)}
    if baseline is not None and baseline["step_p99_s"] > 0:
        slow = baseline["step_p99_s"] * SLOW_STEP_FACTOR
        out["slowed_steps_ratio"] = sum(t > slow for t in times) / len(times) if times else 0.0
    return out


def _design_record(rec: dict, rank: dict, k: float, scale: float) -> dict:
    """A checkpoint record as the full-size design's: its durations (:func:`full_record`) and its
    file's bytes as the design's bytes they were paced as (the rank's ``bytes_weight``)."""
    weight = rank.get("bytes_weight", 1.0)
    return {**full_record(rec, k, bytes_factor=scale), "file_bytes": rec["file_bytes"] * weight}


def _update_cpu_per_step(walls: list[dict]) -> float:
    """CPU seconds per step of the state's update (the optimizer's stand-in, inside the step's
    time), the busiest rank's: host CPU a real job spends on its GPUs instead."""
    return max((w.get("update_cpu_s", 0.0) / w["steps"] for w in walls if w["steps"]), default=0.0)


def _against_baseline(m: dict, baseline: dict) -> dict:
    """Slowdown = wall per step / baseline's - 1; of it, the job's stall per step over the baseline
    step is the checkpoints' own share and the rest is interference; goodput = baseline time / mode time."""
    base = baseline["step_wall_s"]
    if not (base > 0 and m["steps"] and m["step_wall_s"] > 0):
        return {}
    slowdown = m["step_wall_s"] / base - 1
    stall_share = m["stall_total_s"] / m["steps"] / base
    return {"slowdown_ratio": slowdown, "stall_share_ratio": stall_share,
            "interference_ratio": slowdown - stall_share, "goodput_ratio": base / m["step_wall_s"]}
