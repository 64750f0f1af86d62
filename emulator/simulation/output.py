"""What ``simulate`` says about its inputs, one figure per quantity, and the files it writes.

Every cost it states is the design's closed form (emulator/design/costs.py): one checkpoint alone
per tier (its copy, its lag), the snapshot, the stalls, the retention, and per failure class its
detection, restart, the restore from the tier that class recovers from, and their sum. The
simulation (the table of emulator/simulation/report.py) adds what the checkpoints and the failures
do to each other: there each figure is a mean over the run, labelled as such.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from emulator.design.costs import (checkpoint_costs, class_restore_seconds, copy_seconds, lag_seconds,
                                   retention_seconds)
from emulator.design import wear
from emulator.design.snapshot import figures as snapshot_figures
from emulator.errors import UserError
from emulator.simulation import s3cost
from emulator.simulation.plot import breakdown_figure, heatmap_figure
from emulator.units import fmt_duration, fmt_rate
from tiers.base import TierError
from tiers.safepath import figure_png, reach

DAY = 86400.0


def _rate(bps: float, family: str) -> str:
    return "unlimited" if math.isinf(bps) else fmt_rate(bps, family)


def link_text(t, family: str) -> str:
    """A tier's write (or drain) link in the answer's unit family."""
    lim = t.drain
    family = wear.rate_family(t.family, family)
    parts = []
    if not math.isinf(lim.aggregate_bps):
        parts.append(f"{_rate(lim.aggregate_bps, family)} for the job")
    if not math.isinf(lim.node_bps):
        parts.append(f"{_rate(lim.node_bps, family)} per node")
    return ", ".join(parts) or "not paced"


def tier_costs(d) -> dict:
    """Per tier: what it takes and keeps, its copy and lag for one checkpoint alone, its link."""
    return {t.name: {"every": t.every, "keep": t.keep, "copy_s": copy_seconds(d, t.name),
                     "lag_s": lag_seconds(d, t.name), "link": link_text(d.link(t.name), wear.answer_family(d)),
                     "source": d.sources.get(f"{t.name}_write", "design")} for t in d.ladder}


def class_costs(d, rates: dict) -> dict:
    """Per failure class: its rate, the tier it recovers from, detection, restart, restore, in all."""
    out = {}
    for c in d.failures.classes:
        restore = class_restore_seconds(d, c.name)
        out[c.name] = {"per_day": rates[c.name] * DAY, "from": d.recovery_tier(c.name), "detect_s": c.detect_s,
                       "restart_s": c.restart_s, "restore_s": restore, "recovery_s": c.before_restore_s + restore,
                       "restore_measured": c.name in d.measured_recovery_s}
    return out


def checkpoint_figures(d) -> dict:
    c = checkpoint_costs(d)
    return {"snapshot_s": c.snapshot_s, "snapshot": snapshot_figures(d), "snapshot_rate": fmt_rate(d.snapshot.rate_bps),
            "snapshot_source": d.sources.get("snapshot", "design"), "sync_stall_s": c.sync_stall_s,
            "async_stall_s": c.async_stall_s, "retention_s": retention_seconds(d)}


def _per_mode(study, fn) -> dict:
    """``fn(design)`` per mode; one entry ("all") when it is the same for every mode."""
    designs = study.designs
    if len({id(d) for d in designs.values()}) == 1:
        return {"all": fn(study.design)}
    out = {m: fn(d) for m, d in designs.items()}
    first = next(iter(out.values()))
    return {"all": first} if all(v == first for v in out.values()) else out


def _failures(study, args) -> str:
    if study.as_run_saves:
        return "none (as run)"
    shares = ", ".join(f"{c.name} {c.share * 100:g} %" for c in study.design.failures.classes)
    if study.trace is not None:
        return f"trace {args.failures} ({len(study.trace)} failures; rows without a class: {shares})"
    f = study.design.failures
    m = f.cluster_mttf_s
    return (f"Poisson, MTTF {f.mttf_hours:,g} h per accelerator (job: every {fmt_duration(m)}, "
            f"{DAY / m:.2f} a day): {shares}")


def _s3(cfg, study, outcomes: dict) -> dict | None:
    """S3 requests and cost of the job (emulator/simulation/s3cost.py), when the global tier is S3: at the
    checkpoints a day the first mode's simulation sent to global storage (its configured interval where it
    sent none)."""
    if cfg.tiers.global_.backend != "s3":
        return None
    d = study.design
    mode = study.modes[0]
    per_day = outcomes[mode].tiers.get("global", {}).get("checkpoints_per_day") if outcomes else None
    interval = DAY / per_day if per_day else study.intervals[mode] * d.tier("global").every
    return s3cost.job_figures(cfg, d.job.groups, interval_s=interval,
                              drain_s=copy_seconds(d, "global"), restore_s=class_restore_seconds(d, "group"))


def capacity(study, outcomes: dict, endurance) -> dict:
    """Per mode, what each tier holds and is written a day at the checkpoints a day it simulated
    (emulator/design/wear.py, as ``plan`` says it), and the flags of a tier too small."""
    out = {}
    for m, o in outcomes.items():
        d = study.designs[m]
        rows = wear.per_tier(d, {n: t["checkpoints_per_day"] for n, t in o.tiers.items()}, endurance)
        out[m] = {"tiers": {h.name: h.to_dict() for h in rows},
                  "flags": list(wear.over_capacity_notes(rows, wear.answer_family(d))
                                + tuple(n for n in d.notes if "OVER CAPACITY" in n))}
    return out


def describe(cfg, study, args, planned: dict | None = None, outcomes: dict | None = None) -> dict:
    """JSON-ready description of what was simulated (with ``outcomes``: what its tiers held and were written)."""
    d = study.design
    rates = study.rates() if not study.as_run_saves else {c: 0.0 for c in d.failures.rates()}
    endurance = wear.parse_endurance(getattr(args, "nvme_endurance", None))
    held = capacity(study, outcomes, endurance) if outcomes and not study.as_run_saves else {}
    notes = list(dict.fromkeys(n for x in study.designs.values() for n in x.notes))
    if held:
        notes += wear.endurance_notes(wear.per_tier(d, {}, endurance), endurance)
    return {
        "preset": cfg.model.name, "nodes": d.job.nodes, "ranks_per_node": d.job.accelerators_per_node,
        "accelerators": d.job.accelerators, "as_run": bool(study.as_run_saves),
        "days": study.days, "seed": study.seed, "failures": _failures(study, args),
        "interval_sources": dict(study.interval_sources),
        "calibration": args.calibrate,
        "family": wear.answer_family(d),
        "s3": _s3(cfg, study, outcomes),
        "capacity": held,
        "planner": planned or {},
        "design": {
            "checkpoint_bytes": d.job.checkpoint_bytes,
            "mean_node_bytes": d.job.checkpoint_bytes / d.job.nodes, "heaviest_node_bytes": d.job.heaviest.node_bytes,
            "groups": [{"nodes": g.nodes, "node_bytes": g.node_bytes, "file_bytes": g.file_bytes,
                        "files": g.files} for g in d.job.groups],
            "checkpoint": _per_mode(study, checkpoint_figures),
            "tiers": _per_mode(study, tier_costs),
            "classes": _per_mode(study, lambda x: class_costs(x, rates)),
            "sources": {m: dict(x.sources) for m, x in study.designs.items()},
            "notes": notes,
        },
    }


def write_outputs(out: Path, info: dict, outcomes: dict, sweep: dict | None) -> dict:
    """simulate.png (and sweep.png, sweep.json) in the folder ``out`` (made when missing), each drawn
    in memory and renamed into place through the folder's descriptor (tiers.safepath: a link
    planted at a name is replaced, never written through; a folder others can write is refused);
    returns {name: path}."""
    title = f"{info['preset']}, {info['accelerators']:,} accelerators"
    what = f"--out {out}"
    try:
        with reach(out, create=True, mode=0o755, what=what) as folder:
            folder.write_file("simulate.png", figure_png(breakdown_figure(title, outcomes)))
            files = {"plot": str(out / "simulate.png")}
            if sweep is not None:
                folder.write_file("sweep.png", figure_png(heatmap_figure(title + ": goodput", sweep)))
                folder.write_file("sweep.json", json.dumps({**info, "sweep": sweep}, indent=1))
                files.update({"sweep plot": str(out / "sweep.png"), "sweep json": str(out / "sweep.json")})
    except TierError as exc:
        raise UserError(str(exc)) from None
    except NotADirectoryError as exc:
        raise UserError(f"{what}: cannot create: {exc.filename} is not a directory") from None
    except OSError as exc:
        raise UserError(f"{what}: cannot write there ({exc.strerror})") from None
    return files
