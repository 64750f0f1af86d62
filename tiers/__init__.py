"""Storage tiers behind one async interface (see ``tiers.base.Tier``).

``make_tier`` turns a validated tier config into a Tier: the backend named by
``backend``, wrapped in bandwidth/latency emulation when ``emulate`` is set.
"""
from __future__ import annotations

from .base import InvalidKey, Sink, Tier, TierError, validate_key

__all__ = ["InvalidKey", "Sink", "Tier", "TierError", "validate_key", "make_tier"]


def make_tier(cfg, *, scope: dict | None = None) -> Tier:
    """Build the tier described by ``cfg`` (an ``emulator.config.TierConfig``).

    ``scope`` tells the emulation wrapper who shares bandwidth (node id, ranks
    per node, nodes); it is ignored by plain backends.
    """
    if cfg.backend == "dir":
        from .directory import DirTier
        tier: Tier = DirTier(cfg.path)
    elif cfg.backend == "memory":
        from .memory import MemoryTier
        tier = MemoryTier()
    elif cfg.backend == "s3":
        from .s3 import S3Tier
        tier = S3Tier.from_config(cfg)
    else:  # config validation makes this unreachable
        raise TierError(f"unknown backend {cfg.backend!r}")
    if cfg.emulate is not None:
        from .emulated import EmulatedTier
        tier = EmulatedTier.from_config(tier, cfg.emulate, scope=scope or {})
    return tier
