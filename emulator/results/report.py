"""The run's report: a table per mode, then loads, content, faults and notes; results.json.

The figures come from ``emulator.summary``; this module only says them.
Durations appear as measured here and, in brackets, at full size (measured /
run.scale), since a run at a scale compresses time with the bytes.
"""
from __future__ import annotations

import json
from pathlib import Path

from emulator.design import ladder
from emulator.job import outdir
from emulator.results.design_time import SOFTWARE_SHARE
from emulator.results.levels import level_lines
from emulator.results.requests import s3_lines
from emulator.results.soak import soak_lines
from emulator.results.summary import build_results
from emulator.results.timeline import write_timeline
from emulator.units import GIB, fmt_rate, table
from tiers.safepath import write_file


def _fmt_s(v: float) -> str:
    if v >= 120:
        return f"{v / 60:.1f} min"
    return f"{v * 1000:.1f} ms" if v < 1 else f"{v:.2f} s"


def _fmt_pct(ratio: float) -> str:
    return f"{ratio * 100:.1f} %"


def _pct(key: str):
    return lambda m: _fmt_pct(m[key]) if key in m else "-"


def _pct_dual(key: str):
    """A ratio as measured here, then (in brackets) on the design's clock where it differs."""
    def show(m: dict) -> str:
        here, full = _pct(key)(m), m.get("full_size", {}).get(key)
        return here if full is None or here == "-" or _fmt_pct(full) == here else f"{here} ({_fmt_pct(full)})"
    return show


#: the summary table's rows: label and how to show it from a mode's summary (durations as
#: "measured (full size)")
TABLE_ROWS = [
    ("checkpoints", lambda m: str(m["checkpoints"])),
    ("stall / ckpt mean", lambda m: _dual(m, "stall_mean_s")),
    ("stall / ckpt p99", lambda m: _dual(m, "stall_p99_s")),
    ("  of which device-to-host", lambda m: _dual(m, "d2h_mean_s") if m.get("d2h_mean_s") else "- (state on CPU)"),
    ("device-to-host rate", lambda m: f"{m['d2h_gib_s']:.1f} GiB/s" if m.get("d2h_gib_s") else "-"),
    ("worst rank (mean stall)", lambda m: f"{m['worst_rank']} ({_fmt_s(m['worst_rank_stall_mean_s'])})"),
    ("local write mean", lambda m: _dual(m, "local_write_mean_s")),
    ("drain mean", lambda m: _dual(m, "drain_mean_s")),
    ("durability lag mean", lambda m: _dual(m, "lag_mean_s")),
    ("durability lag p99", lambda m: _dual(m, "lag_p99_s")),
    ("save throughput", lambda m: f"{m['save_gib_s']:.2f} GiB/s ({fmt_rate(m['full_size'].get('save_bytes_per_s', 0), m['_family'])})"),
    ("drain overlap", _pct_dual("drain_overlap_ratio")),
    ("deadline misses", lambda m: str(m["deadline_misses"])),
    ("incomplete checkpoints", lambda m: str(m["incomplete"])),
    ("at risk when training stopped", lambda m: str(m.get("at_risk", 0))),
    ("overhead (stall/train)", _pct_dual("overhead_ratio")),
    ("slowdown vs no checkpoints", _pct_dual("slowdown_ratio")),
    ("  of which interference", _pct_dual("interference_ratio")),
    ("goodput", _pct_dual("goodput_ratio")),
    ("step time p50 / p99", lambda m: f"{_fmt_s(m['step_p50_s'])} / {_fmt_s(m['step_p99_s'])}"),
    ("steps slower than baseline", _pct("slowed_steps_ratio")),
]


def _dual(m: dict, key: str) -> str:
    return f"{_fmt_s(m[key])} ({_fmt_s(m['full_size'][key])})"


def format_table(results: dict) -> str:
    """The report: what ran where, the per-mode table, then loads, content, faults."""
    lines = _header_lines(results) + _mode_table(results) + _baseline_lines(results) + _load_lines(results)
    lines += _device_wait_lines(results)
    modes = _shown_modes(results)
    for m in modes:
        for err in results["modes"][m]["errors"]:
            lines.append(f"{m} error: {err}")
    lines += level_lines(results, _fmt_s) + soak_lines(results, _fmt_s)
    lines += _content_lines(results) + _fault_lines(results) + s3_lines(results)
    lines += [f"note: {n}" for n in results.get("notes", [])]
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
        *_tier_lines(results),
        *_device_lines(results),
        *_time_lines(results),
        "",
    ]


def _tier_lines(results: dict) -> list[str]:
    """Each tier: where it lives, and what the design says of it (paced here at that / the dilation)."""
    design, lines = results.get("tier_design") or {}, []
    for name in ladder.lasting_file_tiers():
        where = results["tiers"][name]
        if where is None:
            lines.append(f"  {name} tier: none (direct to global)")
            continue
        where = where.split(" (emulated:")[0]
        lines.append(f"  {name} tier: {where}" + (f"; design: {design[name]}" if name in design else ""))
    return lines


def _time_lines(results: dict) -> list[str]:
    """The time factor: scale x dilation, why the dilation, and how durations read."""
    d = results.get("dilation") or {"factor": 1.0}
    k = results.get("time_factor", results["scale"])
    why = ""
    if d.get("set_by"):
        probe = next(p for p in d["phases"] if (p["phase"], p["tier"]) == (d["set_by"]["phase"], d["set_by"]["tier"]))
        why = f"; auto: set by the {probe['phase']} ({probe['tier']}): {_host_words(probe)}"
    elif d.get("auto"):
        why = "; auto: this host keeps every phase at its design rate undilated"
    return [f"  time: dilation x{d['factor']:g}{why}"] + _fit_lines(results) + _snapshot_lines(results) + [
            f"        scale {results['scale']:g} x dilation {d['factor']:g}: a second at full size takes "
            f"{k * 1000:.4g} ms here (a step of {results['step_seconds']['full_size']:g} s, "
            f"{results['step_seconds']['here'] * 1000:.4g} ms here); durations below are measured (in brackets "
            "the full-size design's: paced time / the factor, this host's own once)"] + _load_time_lines(d)


def _fit_lines(results: dict) -> list[str]:
    fit = results.get("scale_fit")
    return [f"        {scale_fit_words(fit)}"] if fit else []


def scale_fit_words(fit: dict) -> str:
    """run.wall_target's fit (results.json ``scale_fit``) in words: the scale, run.scale's and why."""
    head, target = f"scale {fit['scale']:g}", _fmt_wall(fit["target_s"])
    if fit["scale"] == fit["run_scale"]:
        return (f"{head} (run.scale; run.wall_target {target}): x{fit['factor']:g} makes "
                f"training {_fmt_wall(fit['wall_s'])} here")
    floor = ("; the target is under this host's floor (the software's room in every checkpoint, at any "
             "scale): the largest scale within a quarter of it") if fit["floor"] else ""
    return (f"{head}, not run.scale's {fit['run_scale']:g} (run.wall_target {target}): at "
            f"{fit['run_scale']:g} this host's x{fit['run_scale_factor']:g} makes training "
            f"{_fmt_wall(fit['run_scale_wall_s'])} here, at {fit['scale']:g} x{fit['factor']:g} makes it "
            f"{_fmt_wall(fit['wall_s'])}{floor}")


def _fmt_wall(seconds: float) -> str:
    """A wall time here: seconds under two minutes, else minutes."""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def _snapshot_lines(results: dict) -> list[str]:
    """The design's snapshot by its parts (emulator/design/snapshot.py), as the run paced it."""
    s = results.get("snapshot")
    if not s:
        return []
    lines = [f"  snapshot (the design's, its heaviest rank at full size): {s['describe']} = {_fmt_s(s['seconds'])}"
             + (f"; first save + {_fmt_s(s['first_save_s'])} pinning its buffers" if s["first_save_s"] else "")]
    if s["planning_s"]:
        lines.append(f"        DCP's planning after it: {_fmt_s(s['planning_s'])} (in a sync stall, an async lag)")
    for mode, m in (results.get("engine") or {}).get("measured_s", {}).items():
        lines.append(f"  dcp ({mode}, measured here, slowest rank): staging {_fmt_s(m.get('staging_s', 0))}, "
                     f"planning {_fmt_s(m.get('planning_s', 0))}, writes {_fmt_s(m.get('write_s', 0))}, "
                     f"metadata {_fmt_s(m.get('metadata_s', 0))} (its .metadata {_fmt_s(m.get('finish_s', 0))})")
    return lines


def _host_words(probe: dict) -> str:
    """What this host did of the probed phase that set the factor: its byte rate against the design's
    node, or, where it moves none of the bytes (a CPU state's snapshot swaps buffers), its software."""
    design = probe["design_bytes_per_s"] / GIB
    if probe["host_bytes_per_s"] is None:
        return (f"this host moves none of its bytes (its buffers swap), and its {probe['fixed_s'] * 1000:.2g} ms "
                f"of software a rank needs room in the {design:.3g} GiB/s per accelerator's paced time")
    return (f"this host moved {probe['host_bytes_per_s'] / GIB:.3g} GiB/s of the {design:.3g} GiB/s the design's "
            "node needs" + _software_words(probe))


def _software_words(probe: dict) -> str:
    """The probed phase's software: given room in the paced window, or a small part of the design's
    time, counted once (emulator/rank/dilation.py ``SOFTWARE_SHARE``)."""
    if not probe.get("fixed_s"):
        return ""
    ms, share = probe["fixed_s"] * 1000, probe.get("software_share")
    if share is not None and share <= SOFTWARE_SHARE:
        return f" (its {ms:.0f} ms of software, {share:.1%} of the design's time, counted once)"
    return f", after {ms:.0f} ms of its software"


def _load_time_lines(d: dict) -> list[str]:
    """The loads' own factor, where they had one, and the restore that set it."""
    loads = d.get("loads")
    if not loads:
        return []
    probe = max(loads["phases"], key=lambda p: p["needs"], default=None)
    why = "" if probe is None else (
        f": a whole restore from the {probe['tier']} tier (reads, checksums, deserialisation) moved "
        f"{probe['host_bytes_per_s'] / GIB:.3g} GiB/s here of the {probe['design_bytes_per_s'] / GIB:.3g} GiB/s "
        "the design's node reads")
    return [f"        loads (after training): dilation x{loads['factor']:g}{why}"]


def _device_lines(results: dict) -> list[str]:
    """Where the state lived, whether ranks share a GPU, and how it is staged."""
    d = results.get("device") or {"kind": "cpu"}
    if d["kind"] != "cuda":
        if (results.get("engine") or {}).get("name") == "dcp":
            return ["  device: state on the CPU: DCP stages it into its own cached host copy (async), held to at "
                    "least the design's paced snapshot; a sync save writes the live state"]
        if d.get("snapshot_swapped"):
            return ["  device: state on the CPU: a snapshot swaps its host buffers, paced as the design's "
                    "device-to-host copy"]
        return ["  device: state on the CPU: the snapshot is a host memmove (no device-to-host copy)"]
    share, least = d["ranks_per_gpu"], d.get("ranks_per_gpu_min", d["ranks_per_gpu"])
    shared = f"{least}-{share}" if least != share else f"{share}"
    lines = [f"  device: state on {d['gpus']} GPU(s) ({', '.join(d['names']) or 'cuda'}), "
             + (f"{shared} ranks share each GPU and its PCIe link: device-to-host rates are shared, "
                "unlike a real node's (one GPU per rank)" if share > 1 else "one rank per GPU")]
    if d["bucketed_ranks"]:
        lines.append(f"  staging: over the pinned budget ({d['budget_bytes'] / GIB:.2f} GiB < the state): "
                     f"staged in {d['buckets_max']} buckets of {d['bucket_bytes'] / GIB:.3f} GiB through "
                     f"{d['pinned_bytes_max'] / GIB:.3f} GiB of pinned slots into one pageable staging copy")
    else:
        lines.append(f"  staging: one pinned staging copy per rank ({d['pinned_bytes_max'] / GIB:.2f} GiB, "
                     f"within the pinned budget), reused by every snapshot")
    return lines


def _mode_table(results: dict) -> list[str]:
    modes = _shown_modes(results)
    width = max(len(label) for label, _ in TABLE_ROWS) + 2
    lines = [" " * width + "".join(f"{m:>24}" for m in modes)]
    units = results.get("units") or {}
    family = units.get("memory") or units.get("local") or units.get("global") or "binary"
    shown = {m: {**results["modes"][m], "_family": family} for m in modes}  # the write's tier's units
    for label, show in TABLE_ROWS:
        lines.append(f"{label:<{width}}" + "".join(f"{show(shown[m]):>24}" for m in modes))
    return lines


def _baseline_lines(results: dict) -> list[str]:
    b = results.get("baseline")
    if not b:
        return ["baseline: not run (checkpoint.baseline: false): no slowdown, interference or goodput"]
    return [f"baseline (same steps, no checkpoints): {b['steps']} steps, {_fmt_s(b['step_wall_s'])} per step, "
            f"compute p50 / p99 {_fmt_s(b['step_p50_s'])} / {_fmt_s(b['step_p99_s'])}"]


def _page_cache_words(ld: dict) -> str:
    """What was done with the page cache before the loads (checkpoint.page_cache_scope)."""
    if not ld["page_cache_dropped"]:
        return "page cache NOT dropped (checkpoint.drop_page_cache: false, or not permitted): loads may be served " \
               "from memory"
    if ld.get("page_cache_scope") == "host":
        return "page cache dropped host-wide before each load (checkpoint.page_cache_scope: host)"
    return "the checkpoint files' cached pages dropped before each load (other processes' cache left alone)"


def _load_lines(results: dict) -> list[str]:
    ld = results["load"]
    if not ld["loads"]:
        return []
    served = ", ".join(f"{k}: {v}" for k, v in sorted(ld["served_by"].items()))
    cache = _page_cache_words(ld)
    full = f", {_fmt_s(ld['load_worst_full_size_s'])} at full size" if "load_worst_full_size_s" in ld else ""
    if ld.get("load_software_s"):
        full += f", {_fmt_s(ld['load_software_s'])} of it the software's: listing, manifest, structure, once"
    lines = ["", f"loads: {ld['loads']}, {ld['load_gib_s']:.2f} GiB/s (worst {_fmt_s(ld['load_worst_s'])}{full}), "
                 f"rank-loads served by {served}; {cache}"]
    if ld.get("h2d_gib_s"):
        lines.append(f"  host-to-device into the live tensors (after verification): "
                     f"{ld['h2d_gib_s']:.1f} GiB/s, {_fmt_s(ld['h2d_mean_s'])} per rank-load")
    if ld["fallback_count"]:
        lines.append(f"  fallbacks: {ld['fallback_count']} (e.g. {ld['fallbacks'][0]})")
    if not ld["ok"]:
        lines.append("  LOAD FAILED: " + (ld.get("errors") or ["no complete checkpoint could be restored"])[0])
    return lines


#: the phases transfers are counted under (tiers.emulated.counted_as), in the report's order
WAIT_PHASES = {"local_write": "local write", "drain": "drain", "restore": "restore",
               "other": "other (manifests, listings)", "audit": "content audit (the tool's)"}
WAIT_DEVICES = {"local": "local device", "global": "global share"}


def _phase_order(phase: str) -> int:
    return list(WAIT_PHASES).index(phase) if phase in WAIT_PHASES else len(WAIT_PHASES)


def _device_wait_lines(results: dict) -> list[str]:
    """Which phases waited on which emulated device, and whether its reads and writes share it."""
    rows = [(WAIT_PHASES.get(phase, phase), direction, WAIT_DEVICES.get(tier, tier), _fmt_s(seconds),
             "yes" if w["shared"] else "no")
            for tier, w in (results.get("device_waits") or {}).items()
            for phase in sorted(w["waits"], key=_phase_order)
            for direction, seconds in sorted(w["waits"][phase].items(), key=lambda d: d[0] != "write")]
    if not rows:
        return []
    head = ["phase", "direction", "device", "waited", "reads+writes share it"]
    return ["", "waited on the emulated devices (worst rank; beyond the real I/O):",
            *table(rows, head, left=tuple(range(len(head)))).split("\n")]


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
        lines.append(f"resumed drain of step {x['step']} left by an earlier run or attempt: "
                     + (f"complete on global in {_fmt_s(x['drain_s'])}" if x["ok"] else f"failed ({x['error']})"))
    if fa.get("recovery"):
        rv = fa["recovery"]
        lines.append(f"restart {fa['attempt']}: restored step {rv['step']} in {_fmt_s(rv['seconds'])} "
                     f"(served by {', '.join(f'{k}: {v}' for k, v in rv['served_by'].items())})")
    failure = results.get("failure")
    if failure and failure.get("kind") == "lose_local":
        lines.append(f"emulated failure: node {failure['node']} lost its local tier after checkpoint "
                     f"{failure['after_checkpoint']}; recovery per tier: "
                     + ", ".join(_recovery(results["load"], k) for k in sorted(results["load"]["recovery_mean_s_by_tier"])))
    return lines


def _recovery(load: dict, tier: str) -> str:
    """A tier's recovery as measured and, where the results have it, at full size."""
    full = (load.get("recovery_full_size_s_by_tier") or {}).get(tier)
    return f"{tier} {_fmt_s(load['recovery_mean_s_by_tier'][tier])}" + \
        (f" ({_fmt_s(full)} at full size)" if full is not None else "")


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
    update = max((m.get("update_cpu_per_step_s", 0.0) for m in results.get("modes", {}).values()), default=0.0)
    if update and c.get("update_slices"):
        lines.append(f"state update: {_fmt_s(update)} CPU per step, 1/{c['update_slices']} of the state re-keyed "
                     "inside the step's time (the optimizer's stand-in; a real job's runs on its GPUs)")
    if mem.get("peak_rss_max_bytes"):
        lines.append(f"memory: peak RSS {mem['peak_rss_max_bytes'] / GIB:.2f} GiB (rank {mem['rank']}) for "
                     f"{mem['state_plus_staging_bytes'] / GIB:.2f} GiB of host state + one staging copy"
                     " (+ pinned bucket slots)")
    if results.get("tiers_emptied"):
        lines.append(f"tiers in host memory emptied when the run ended: {', '.join(results['tiers_emptied'])} "
                     "(their memory given back; --keep-tiers keeps their checkpoints)")
    return lines


def write_outputs(cfg, design, clock, ranks: list[dict], out: Path) -> dict:
    """results.json, report.txt and the timeline (unless ``run.timeline`` is false), each written beside
    its name and renamed over it (never through a link planted at the name, docs/security.md); the
    run's ``design`` and ``clock`` as :func:`build_results` takes them."""
    out = Path(out)
    results = build_results(cfg, design, clock, ranks)
    write_file(out / outdir.RESULTS, json.dumps(results, indent=1))
    write_file(out / outdir.REPORT, format_table(results))
    if not cfg.run.timeline:
        return results
    try:
        write_timeline(results, out / outdir.TIMELINE)  # drawn in memory, renamed into place
    except ImportError:
        pass
    return results
