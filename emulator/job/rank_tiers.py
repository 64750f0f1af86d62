"""A rank's tiers, built from the config's registry entries with the rank's scope.

Both protocols (the emulator's and MLPerf's) build their tiers here, so the
scope a backend sees (rank, node, shared and spool folders) is the same. A
tier emulated as the job's aggregate (``shared_by: job``) is built as this
node's share of it (emulator/design/links.py ``tier_emulation``), so
nodes on several machines split the rate and never multiply it.
"""
from __future__ import annotations

from dataclasses import replace

from emulator.job.outdir import OutDir
from emulator.design import run_emulation
from tiers import make_tier
from tiers.base import TierScope


def tier_scope(comm, out: OutDir, name: str) -> TierScope:
    return TierScope(rank=comm.rank, local_rank=comm.local_rank, node=comm.node, nodes=comm.nodes,
                     ranks_per_node=comm.local_world_size, shared_dir=str(out.shared(name)),
                     spool_dir=str(out.spool(comm.node)), nic_path=str(out.nic(comm.node)))


def build_tiers(cfg, comm, out) -> tuple:
    """(local tier or None, global tier) for this rank, from the config's registry entries."""
    out = OutDir(out)
    local = None
    if cfg.tiers.local is not None:
        local = make_tier(_node_tier(cfg, "local", comm), scope=tier_scope(comm, out, "local"))
    return local, make_tier(_node_tier(cfg, "global", comm), scope=tier_scope(comm, out, "global"))


def build_lone_global(cfg, comm, out):
    """The global tier as this node alone reads it: what a lost node restores through while the
    others restore from their memory or peers."""
    tier = replace(cfg.tiers.global_, emulate=run_emulation(cfg, "global", run_node=comm.node,
                                                            run_nodes=comm.nodes, alone_read=True))
    return make_tier(tier, scope=tier_scope(comm, OutDir(out), "global-alone"))


def build_memory_tier(cfg, comm, out):
    """This node's host-memory tier (a folder such as /dev/shm/...), or None without one."""
    if cfg.tiers.memory is None:
        return None
    return make_tier(memory_tier_config(cfg, comm), scope=tier_scope(comm, OutDir(out), "memory"))


def memory_tier_config(cfg, comm=None):
    """The memory tier's config, recycling its files' pages unless ``recycle: false`` says not to:
    a new tmpfs file's pages are allocated and zeroed at every write, a recycled one's are not."""
    tier = cfg.tiers.memory
    if comm is not None:
        tier = _node_tier(cfg, "memory", comm)
    if tier.options.recycle is not None:
        return tier
    return replace(tier, options=replace(tier.options, recycle=True))


def _node_tier(cfg, name: str, comm):
    """Tier ``name``'s config with its emulation as this node of the run gets it."""
    tier = cfg.tiers.entry(name)
    return replace(tier, emulate=run_emulation(cfg, name, run_node=comm.node, run_nodes=comm.nodes))
