"""The S3 requests of a run and what they cost: results.json's ``s3`` and the report's lines.

Measured: every rank's requests per checkpoint (retention included) and per
restore, counted by the S3 tier's hook (tiers/s3_requests.py) and summed over
ranks. At full size: the same layout's requests computed from the full-size
files (emulator/simulation/s3cost.py), since at ``run.scale`` files have fewer
parts; the cost figures use those, at the configured interval.
"""
from __future__ import annotations

from collections import Counter

from emulator.simulation import s3cost
from emulator.sizing import checkpoint_size

MIB = 1 << 20


def _summed(counts) -> dict:
    total = Counter()
    for c in counts:
        total.update(c or {})
    return dict(sorted(total.items()))


def _mean(per: list[dict]) -> dict:
    kinds = sorted({k for c in per for k in c})
    return {k: sum(c.get(k, 0) for c in per) / len(per) for k in kinds} if per else {}


def measured_requests(ranks: list[dict]) -> dict:
    """Per checkpoint (mode, step) and per restore, every rank's requests summed; the run's total."""
    steps = sorted({(x["mode"], x["step"]) for r in ranks for x in r["records"]}, key=lambda ms: (ms[1], ms[0]))
    checkpoints = [{"mode": m, "step": s, "requests": _summed(
        x.get("requests") for r in ranks for x in r["records"] if (x["mode"], x["step"]) == (m, s))}
        for m, s in steps]
    n = min((len(r["loads"]) for r in ranks), default=0)
    restores = [_summed(r["loads"][i].get("requests") for r in ranks) for i in range(n)]
    return {"checkpoints": checkpoints, "restores": restores,
            "checkpoint_mean": _mean([c["requests"] for c in checkpoints]), "restore_mean": _mean(restores),
            "total": _summed(r.get("s3_requests") for r in ranks)}


def full_size(cfg) -> dict:
    """This run's ranks at full size on the global tier: requests per checkpoint and restore, and cost."""
    size = checkpoint_size(cfg.model, cfg.parallelism)
    files = max(1, len(size.ranks))
    file_bytes = -(-size.run_bytes // files)
    part = cfg.tiers.global_.options.part_size_mib * MIB
    keep = cfg.checkpoint.keep
    verify = cfg.drain.verify if cfg.tiers.local is not None else "none"
    ckpt = s3cost.checkpoint_requests(files, file_bytes, part, verify=verify, keep=keep)
    restore = s3cost.restore_requests(files, file_bytes, part)
    interval = cfg.checkpoint.interval_steps * cfg.training.step_seconds
    cost = s3cost.cost_figures(cfg.cost, checkpoint=ckpt, checkpoint_bytes=size.run_bytes, keep=keep,
                               interval_s=interval, restore=restore, restore_bytes=size.run_bytes) \
        if interval > 0 else None
    return {"files": files, "file_bytes": file_bytes, "part_bytes": part,
            "checkpoint": ckpt, "restore": restore, "cost": cost}


def s3_summary(cfg, ranks: list[dict]) -> dict | None:
    """results.json's ``s3`` (None when the global tier is not S3)."""
    if cfg.tiers.global_.backend != "s3":
        return None
    return {"measured": measured_requests(ranks), "full_size": full_size(cfg)}


def _kinds(counts: dict) -> str:
    return ", ".join(f"{k} {v:,.4g}" for k, v in counts.items()) or "none"


def s3_lines(results: dict) -> list[str]:
    """The report's S3 lines: measured requests, the full-size layout's, and the cost."""
    s3 = results.get("s3")
    if not s3:
        return []
    m, f = s3["measured"], s3["full_size"]
    lines = [f"S3 requests per checkpoint (all ranks, retention included): {_kinds(m['checkpoint_mean'])}"]
    if m["restores"]:
        lines.append(f"S3 requests per restore (all ranks): {_kinds(m['restore_mean'])}")
    lines.append(f"S3 requests at full size ({f['files']} files of {f['file_bytes'] / (1 << 30):.2f} GiB in "
                 f"{f['part_bytes'] >> 20} MiB parts, from the layout): per checkpoint {_kinds(f['checkpoint'])}; "
                 f"per restore from S3 {_kinds(f['restore'])}")
    if f["cost"]:
        lines.append(f"S3 cost at full size, at the configured interval: {s3cost.format_cost(f['cost'])}")
    return lines
