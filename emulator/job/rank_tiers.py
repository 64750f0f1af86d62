"""A rank's tiers, built from the config's registry entries with the rank's scope.

Both protocols (the emulator's and MLPerf's) build their tiers here, so the
scope a backend sees (rank, node, shared and spool folders) is the same.
"""
from __future__ import annotations

from emulator.job.outdir import OutDir
from tiers import make_tier
from tiers.base import TierScope


def _tier_scope(comm, out: OutDir, name: str) -> TierScope:
    return TierScope(rank=comm.rank, local_rank=comm.local_rank, node=comm.node, nodes=comm.nodes,
                     ranks_per_node=comm.local_world_size, shared_dir=str(out.shared(name)),
                     spool_dir=str(out.spool(comm.node)))


def build_tiers(cfg, comm, out) -> tuple:
    """(local tier or None, global tier) for this rank, from the config's registry entries."""
    out = OutDir(out)
    local = None
    if cfg.tiers.local is not None:
        local = make_tier(cfg.tiers.local, scope=_tier_scope(comm, out, "local"))
    return local, make_tier(cfg.tiers.global_, scope=_tier_scope(comm, out, "global"))
