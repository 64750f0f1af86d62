"""A rank's tiers, built from the config's registry entries with the rank's scope, then paced.

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
from tiers import make_tier, pace
from tiers.base import TierScope


def tier_scope(comm, out: OutDir, name: str, bytes_weight: float = 1.0) -> TierScope:
    return TierScope(rank=comm.rank, local_rank=comm.local_rank, node=comm.node, nodes=comm.nodes,
                     ranks_per_node=comm.local_world_size, shared_dir=str(out.shared(name)),
                     spool_dir=str(out.spool(comm.node)), nic_path=str(out.nic(comm.node)),
                     bytes_weight=bytes_weight)


def build_tiers(cfg, comm, out) -> dict:
    """{name: bare tier} of this rank's memory (if any), local (if any) and global tiers."""
    out = OutDir(out)
    built = {}
    for name in ("memory", "local", "global"):
        if cfg.tiers.entry(name) is None:
            continue
        tier = memory_tier_config(cfg) if name == "memory" else cfg.tiers.entry(name)
        built[name] = make_tier(replace(tier, emulate=None), scope=tier_scope(comm, out, name))
    return built


def pace_tier(cfg, comm, out, name: str, bare, *, dilated: bool = True, bytes_weight: float = 1.0):
    """Tier ``name`` (``bare``) paced as this node of the run gets it, at the run's dilation (or, not
    ``dilated``, at the design's rates and latencies as they are: MLPerf's protocol); each byte this
    rank moves booked at ``bytes_weight`` (emulator/checkpoint/checkpointer.py ``design_bytes_weight``)."""
    emulate = run_emulation(cfg, name, run_node=comm.node, run_nodes=comm.nodes)
    return pace(bare, paced(cfg, emulate) if dilated else emulate,
                scope=tier_scope(comm, OutDir(out), name, bytes_weight))


def build_lone_global(cfg, comm, out, *, bytes_weight: float = 1.0):
    """The global tier as this node alone reads it: what a lost node restores through while the
    others restore from their memory or peers."""
    emulate = run_emulation(cfg, "global", run_node=comm.node, run_nodes=comm.nodes, alone_read=True)
    tier = replace(cfg.tiers.global_, emulate=paced(cfg, emulate))
    return make_tier(tier, scope=tier_scope(comm, OutDir(out), "global-alone", bytes_weight))


def paced(cfg, emulate):
    """``emulate`` as this run paces it: every rate / D, every latency x the time factor (scale x D),
    so each paced second here is a design second x the time factor (docs/time-dilation.md)."""
    if emulate is None:
        return None
    d, k = cfg.run.dilation.factor or 1.0, cfg.time_factor
    rate = lambda v: None if v is None else v / d  # noqa: E731
    per_s = lambda v: None if v is None else v / k  # noqa: E731 - requests per second, in this run's time
    return replace(emulate, write_gib_s=rate(emulate.write_gib_s), read_gib_s=rate(emulate.read_gib_s),
                   nic_gib_s=rate(emulate.nic_gib_s), latency_ms=emulate.latency_ms * k,
                   jitter_ms=emulate.jitter_ms * k, put_per_s_per_prefix=per_s(emulate.put_per_s_per_prefix),
                   get_per_s_per_prefix=per_s(emulate.get_per_s_per_prefix))


def memory_tier_config(cfg):
    """The memory tier's config, recycling its files' pages unless ``recycle: false`` says not to:
    a new tmpfs file's pages are allocated and zeroed at every write, a recycled one's are not."""
    tier = cfg.tiers.memory
    if tier.options.recycle is not None:
        return tier
    return replace(tier, options=replace(tier.options, recycle=True))
