"""Designs with costs chosen by hand, for the simulator's tests: bytes are picked so that rates read as
seconds (10 B at 10 B/s: 1 s). Built as emulator.design.Design directly, as resolve() would."""
from __future__ import annotations

import math

from emulator.config import ParallelismConfig
from emulator.design.failures import CLASSES, FailureClass, FailureModel
from emulator.design.job import Job, NodeGroup
from emulator.design.links import LinkLimits, NodeLinks, TierLinks
from emulator.design.ladder import Rung
from emulator.design.model import Design, Snapshot

__all__ = ["LinkLimits", "NodeGroup", "design"]


def _tier(write: LinkLimits, read: LinkLimits | None = None, *, duplex=True, latency_s=0.0) -> TierLinks:
    return TierLinks(write, read, write, duplex, latency_s, None, "decimal", "design")


def design(groups, *, local_bps=None, drain=LinkLimits(node_bps=1.0), snapshot_s=0.0, local_read_bps=None,
           duplex=True, global_read=None, restores=None, restart_s=0.0, mttf_hours=1e12, node_share=0.0,
           every=None, **kw) -> Design:
    """One node tier (``local_bps`` per node; none: the ranks write to global) and global storage
    (``drain``); restores per class given (``restores``: class -> seconds) or 0; each class's detection
    0 and its restart ``restart_s``; failures at ``mttf_hours`` per accelerator, ``node_share`` of them
    node losses; ``every``: tier -> N."""
    groups = tuple(groups)
    largest = max(g.file_bytes for g in groups)
    tiers = {}
    if local_bps is not None:
        read = LinkLimits(node_bps=local_read_bps) if local_read_bps else None
        tiers["local"] = _tier(LinkLimits(node_bps=local_bps), read, duplex=duplex)
    tiers["global"] = _tier(drain, global_read)
    every = every or {}
    ladder = tuple(Rung(n, every.get(n, 1), 2) for n in tiers)
    nodes = sum(g.nodes for g in groups)
    per_node = max(g.files for g in groups)
    job = Job(nodes, per_node, ParallelismConfig(tp=1, pp=1, dp=nodes * per_node), groups, (groups[0],), ())
    shares = {"process": 1 - node_share, "node": node_share, "group": 0.0}
    failures = FailureModel(nodes * per_node, mttf_hours, tuple(FailureClass(c, shares[c], 0.0, restart_s)
                                                                for c in CLASSES))
    base = dict(job=job, links=NodeLinks(tiers, math.inf, True), ladder=ladder, failures=failures,
                snapshot=Snapshot(largest / snapshot_s if snapshot_s else 1e30), modes=("sync", "async"),
                base_interval_s=1.0, drain_concurrency=10 ** 6, verify="size",
                measured_recovery_s=dict(restores or {c: 0.0 for c in CLASSES}))
    base.update(kw)
    return Design(**base)
