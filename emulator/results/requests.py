"""The S3 requests of a run and what they cost: results.json's ``s3`` and the report's lines.

Measured: every rank's requests per checkpoint (retention included) and per
restore, counted by the S3 tier's hook (tiers/s3_requests.py) and summed over
ranks. At full size: the same layout's requests computed from the full-size
files (emulator/simulation/s3cost.py), since at ``run.scale`` files have fewer
parts; the cost figures use those, on the run's design: the global rung's
every-N-th checkpoint of the design's interval and its keep.
"""
from __future__ import annotations

import math
from collections import Counter

from emulator.design import ladder
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


def drained_share(design) -> float:
    """Of the checkpoints the design's global rung takes, the share a node tier takes too (drained from
    it and verified); the others each rank writes straight to the global tier. Over one cycle of the
    ladder's every-N-ths."""
    every = {r.name: r.every for r in design.ladder}
    node = [every[n] for n in ladder.node_file_tiers() if n in every]
    cycle = math.lcm(*every.values())
    uploads = range(every["global"], cycle + 1, every["global"])
    return sum(any(c % n == 0 for n in node) for c in uploads) / len(uploads)


def _checkpoint_requests(design, files: int, file_bytes: int, part: int, keep: int) -> dict:
    """One upload's requests, the mean over the drained and the direct ones where the ladder has both."""
    share = drained_share(design)
    drained, direct = (s3cost.checkpoint_requests(files, file_bytes, part, verify=v, keep=keep)
                       for v in (design.verify, "none"))
    if share in (0.0, 1.0):
        return drained if share else direct
    return {k: share * drained.get(k, 0) + (1 - share) * direct.get(k, 0) for k in sorted(drained.keys() | direct)}


def full_size(cfg, design) -> dict:
    """This run's ranks at full size on the global tier: requests per checkpoint and restore, and cost
    (``design``: the run's, whose global rung says how often it takes a checkpoint and how many it keeps)."""
    size = checkpoint_size(cfg.model, cfg.parallelism)
    files = max(1, len(size.ranks))
    file_bytes = -(-size.run_bytes // files)
    part = cfg.tiers.global_.options.part_size_mib * MIB
    rung = design.tier("global")
    keep = rung.keep
    ckpt = _checkpoint_requests(design, files, file_bytes, part, keep)
    restore = s3cost.restore_requests(files, file_bytes, part)
    interval = rung.every * design.interval_steps * design.step_seconds
    cost = s3cost.cost_figures(cfg.cost, checkpoint=ckpt, checkpoint_bytes=size.run_bytes, keep=keep,
                               interval_s=interval, restore=restore, restore_bytes=size.run_bytes) \
        if interval > 0 else None
    return {"files": files, "file_bytes": file_bytes, "part_bytes": part,
            "checkpoint": ckpt, "restore": restore, "cost": cost}


def s3_summary(cfg, design, ranks: list[dict]) -> dict | None:
    """results.json's ``s3`` (None when the global tier is not S3)."""
    if cfg.tiers.global_.backend != "s3":
        return None
    return {"measured": measured_requests(ranks), "full_size": full_size(cfg, design)}


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
        lines.append(f"S3 cost at full size, at the global tier's interval: {s3cost.format_cost(f['cost'])}")
    return lines
