"""A rank's tiers, built from the config's registry entries with the rank's scope, then paced.

Both protocols (the emulator's and MLPerf's) build their tiers here, so the
scope a backend sees (rank, node, shared and spool folders) is the same. The
config says where a tier lives and its backend; the run's design says what
its node is paced at (emulator/design/emulation.py: a tier emulated as the
job's aggregate is this node's share of it, so nodes on several machines
split the rate and never multiply it), and the run's clock dilates it.
"""
from __future__ import annotations

from dataclasses import replace

from emulator.design import ladder
from emulator.job.outdir import OutDir
from tiers import make_tier, pace
from tiers.base import TierScope


def tier_scope(comm, out: OutDir, name: str, bytes_weight: float = 1.0, request_weights=None) -> TierScope:
    return TierScope(rank=comm.rank, local_rank=comm.local_rank, node=comm.node, nodes=comm.nodes,
                     ranks_per_node=comm.local_world_size, shared_dir=str(out.shared(name)),
                     spool_dir=str(out.spool(comm.node)), nic_path=str(out.nic(comm.node)),
                     bytes_weight=bytes_weight, request_weights=request_weights)


def build_tiers(cfg, comm, out) -> dict:
    """{name: bare tier} of this rank's memory (if any), local (if any) and global tiers."""
    out = OutDir(out)
    built = {}
    for name in ladder.file_tiers():
        if cfg.tiers.entry(name) is None:
            continue
        tier = memory_tier_config(cfg) if name == "memory" else cfg.tiers.entry(name)
        built[name] = make_tier(replace(tier, emulate=None), scope=tier_scope(comm, out, name))
    return built


def pace_tier(design, clock, comm, out, name: str, bare, *, bytes_weight: float = 1.0, restoring: bool = False):
    """Tier ``name`` (``bare``) paced as the run's ``design`` paces this node of it, on ``clock`` (None:
    at the design's rates and latencies as they are, MLPerf's protocol); each byte this rank moves
    booked at ``bytes_weight`` (emulator/checkpoint/rank_file.py ``design_bytes_weight``), each request
    to an object store at the job's requests it stands for. ``restoring``: global storage as the node
    reads it in a restore storm, every node reading the state it holds."""
    emulate, node = design.emulation.tier(name, comm.node, restoring=restoring), design.emulation.node(comm.node)
    return pace(bare, clock.paced(emulate) if clock is not None else emulate,
                scope=tier_scope(comm, OutDir(out), name, bytes_weight, node.requests if name == "global" else None))


def build_lone_global(cfg, design, clock, comm, out, *, bytes_weight: float = 1.0):
    """The global tier (``cfg``'s backend) as the ``design`` paces this node reading it alone: what a
    lost node restores through while the others restore from their memory or peers."""
    emulate = design.emulation.node(comm.node).lone_global
    tier = replace(cfg.tiers.global_, emulate=clock.paced(emulate))
    return make_tier(tier, scope=tier_scope(comm, OutDir(out), "global-alone", bytes_weight))


def memory_tier_config(cfg):
    """The memory tier's config, recycling its files' pages unless ``recycle: false`` says not to:
    a new tmpfs file's pages are allocated and zeroed at every write, a recycled one's are not."""
    tier = cfg.tiers.memory
    if tier.options.recycle is not None:
        return tier
    return replace(tier, options=replace(tier.options, recycle=True))
