"""What a simulated design is built from: a tier's configured costs, and the costs a real run measured.

design.py turns these into node groups and link limits; calibrate.py fills a
:class:`Calibration` from a run's results.json. Both read a tier's config the
same way through the functions here.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Calibration:
    """Measured costs in the config's units (bytes/s per ``shared_by`` unit, seconds)."""

    snapshot_bps: float | None = None
    local_write_bps: float | None = None
    global_write_bps: float | None = None
    drain_bps: float | None = None
    local_read_bps: float | None = None
    global_read_bps: float | None = None
    coord_pre_s: float = 0.0
    coord_post_s: float = 0.0
    retention_request_s: float = 0.0  # measured per retention request beyond the configured latency
    retention_measured: bool = False
    step_s: dict = field(default_factory=dict)
    rank_file_bytes: list | None = None
    nodes: int = 1
    scale: float = 1.0
    notes: list = field(default_factory=list)


def tier_latency(tier_cfg) -> float:
    """A tier's configured seconds per request: latency plus the mean of its uniform jitter."""
    e = tier_cfg.emulate if tier_cfg is not None else None
    return 0.0 if e is None else (e.latency_ms + e.jitter_ms / 2) / 1000  # jitter: uniform, its mean


def tier_sharing(tier_cfg) -> str:
    """Who shares a tier's configured rate (``shared_by``, ``node`` unless the config says otherwise);
    ``none`` for a tier without emulation: nothing paces it, so every stream moves on its own."""
    e = tier_cfg.emulate if tier_cfg is not None else None
    return e.shared_by if e is not None else "none"


def retention_requests(cfg, files_per_node: int, world_files: int, local: bool) -> tuple[int, int]:
    """Requests of the retention after each checkpoint (emulator/checkpoint/layout.py apply_retention), global and
    local: list, read the keep + 1 manifests, delete the oldest manifest, list its folder, delete each
    file. Rank 0 does them one at a time, local first."""
    base = cfg.checkpoint.keep + 4
    return base + world_files, (base + files_per_node if local else 0)
