"""What ``simulate`` says about its inputs (the design's costs and their sources) and the files it writes."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

from emulator.errors import UserError
from emulator.simulation.model import RunSpec, simulate
from emulator.simulation import s3cost
from emulator.simulation.plot import write_breakdown, write_heatmap
from emulator.units import GIB, fmt_duration

_SOURCE = {"measured": "measured", "config": "config", "design": "design", "assumed": "assumed", "none": "not paced"}


def _bw(bps: float) -> str:
    return "unlimited" if math.isinf(bps) else f"{bps / GIB:,.3g} GiB/s"


def _costs(study, d) -> dict:
    one = simulate(d, RunSpec("sync", 1e9, saves=1))
    src = d.sources
    snap = max(g.file_bytes for g in d.groups) / d.snapshot_bps
    out = {"snapshot": f"{fmt_duration(snap)} ({_SOURCE[src['snapshot']]}, {_bw(d.snapshot_bps)} per rank)"}
    if d.local:
        out["local write"] = f"{fmt_duration(one.local_write_mean_s)} ({_SOURCE[src['local_write']]})"
        link, what = d.drain, "drain"
        out["drain"] = (f"{fmt_duration(one.drain_mean_s)} ({_SOURCE[src['drain']]}; global "
                        f"{_bw(link.aggregate_bps)} in all, {_bw(link.node_bps)} per node)")
    else:
        link, what = d.global_write, "global write"
        out[what] = (f"{fmt_duration(one.local_write_mean_s)} ({_SOURCE[src['global_write']]}; global "
                     f"{_bw(link.aggregate_bps)} in all, {_bw(link.node_bps)} per node)")
    out["sync stall"] = fmt_duration(one.stall_mean_s)
    if not study.as_run_saves:
        glob = max(d.recovery_global) if d.local else d.recovery_global_all_s
        out["restart"] = fmt_duration(study.restart_s)
        out["restore"] = (f"local {fmt_duration(d.recovery_local_s)}, " if d.local else "") + \
            f"global {fmt_duration(glob)}"
    out["retention"] = f"{fmt_duration(d.housekeeping_s)} after each checkpoint"
    return out


def _mode_costs(study) -> dict:
    """Each mode's costs; one entry ("all") when every mode has the same design."""
    designs = study.designs
    if len({id(d) for d in designs.values()}) == 1:
        return {"all": _costs(study, study.design)}
    return {m: _costs(study, d) for m, d in designs.items()}


def _failures(study, args) -> str:
    if study.as_run_saves:
        return "none (as run)"
    if study.trace is not None:
        return f"trace {args.failures} ({len(study.trace)} failures)"
    m = study.cluster_mttf_s
    return (f"Poisson, MTTF {study.mttf_hours:,g} h per accelerator (job: every {fmt_duration(m)}, "
            f"{86400 / m:.2f} a day), {study.node_loss_fraction * 100:g} % of them node losses")


def _s3(cfg, study) -> dict | None:
    """S3 requests and cost of the job (emulator/simulation/s3cost.py), when the global tier is S3."""
    if cfg.tiers.global_.backend != "s3":
        return None
    d = study.design
    one = simulate(d, RunSpec("sync", 1e9, saves=1))
    drain = one.drain_mean_s if d.local else one.local_write_mean_s
    return s3cost.job_figures(cfg, d.groups, interval_s=study.intervals[study.modes[0]], drain_s=drain,
                              restore_s=d.recovery_global_all_s)


def describe(cfg, study, args) -> dict:
    """JSON-ready description of what was simulated."""
    d = study.design
    return {
        "preset": cfg.model.name, "nodes": d.nodes, "ranks_per_node": d.ranks_per_node,
        "accelerators": d.nodes * d.ranks_per_node, "as_run": bool(study.as_run_saves),
        "days": study.days, "seed": study.seed, "failures": _failures(study, args),
        "interval_sources": dict(study.interval_sources),
        "calibration": args.calibrate,
        "s3": _s3(cfg, study),
        "design": {
            "checkpoint_bytes": d.checkpoint_bytes,
            "groups": [{"nodes": g.nodes, "node_bytes": g.node_bytes, "file_bytes": g.file_bytes,
                        "files": g.files} for g in d.groups],
            "costs": _mode_costs(study), "sources": {m: dict(x.sources) for m, x in study.designs.items()},
            "notes": list(dict.fromkeys(n for x in study.designs.values() for n in x.notes)),
        },
    }


def _write_json(path: Path, obj) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


def write_outputs(out: Path, info: dict, outcomes: dict, sweep: dict | None) -> dict:
    """simulate.png (and sweep.png, sweep.json) under ``out``; returns {name: path}."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--out {out}: cannot create: {exc.strerror}") from None
    title = f"{info['preset']}, {info['accelerators']:,} accelerators"
    files = {"plot": str(write_breakdown(out / "simulate.png", title, outcomes))}
    if sweep is not None:
        files["sweep plot"] = str(write_heatmap(out / "sweep.png", title + ": goodput", sweep))
        _write_json(out / "sweep.json", {**info, "sweep": sweep})
        files["sweep json"] = str(out / "sweep.json")
    return files
