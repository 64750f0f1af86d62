"""How a tier's ``shared_by`` turns one configured rate into the simulator's link limits, and back.

Mirrors tiers/emulated.py (see its module docstring) phase by phase:

- **writes and reads** (every rank streams its own file): ``none`` and ``rank``
  give each stream the full rate, so a node moves ``rate x files`` at once;
  ``node`` caps the node at ``rate``; ``job`` makes ``rate`` the aggregate.
- **drains** (only the node leader copies, ``drain.concurrency`` files at a
  time through ``put_file``): ``none`` gives each file its own rate, so
  ``rate x min(concurrency, files)``; ``rank`` is the leader's one bucket and
  ``node`` the node's, both ``rate``; ``job`` is the aggregate.

Calibration runs the same mapping backwards: a measured duration and the
bytes that shared the bucket give the rate the config would have needed to
produce it (:func:`rate_from`). Tests check that one inverts the other.

A run does the same for ``job`` before it builds its tiers (:func:`node_emulation`):
each emulated node gets its share of the modelled job's aggregate, min(NIC,
rate / job nodes), the share the simulator gives a node when every node
transfers at once, whichever machine (``--nnodes``) the node runs on.
"""
from __future__ import annotations

from dataclasses import replace

from emulator.config.design import parse_design
from emulator.design import run_emulation
from emulator.design.links import LinkLimits

SHARINGS = ("none", "rank", "node", "job")


def _design(cfg):
    """The config's design, else the one its preset implies (8 accelerators per node, the default NIC)."""
    return cfg.design if cfg.design is not None else parse_design({})


def modelled_nodes(cfg, emulated_nodes: int = 1) -> int:
    """The nodes whose aggregate a ``shared_by: job`` rate is: the design's job, else the preset's
    ranks over 8 per node; never fewer than the run emulates, so nodes never multiply the rate."""
    return max(_design(cfg).job_nodes(cfg.parallelism.world_size), emulated_nodes)


def node_emulation(cfg, name: str, emulated_nodes: int = 1):
    """Tier ``name``'s ``emulate`` as one emulated node gets it (emulator/design ``run_emulation``)."""
    return run_emulation(cfg, name, run_nodes=emulated_nodes)


def lone_reader_emulation(cfg):
    """The global tier's ``emulate`` when this node reads it alone (a lost node's restore)."""
    return run_emulation(cfg, "global", alone_read=True)


def with_design_rates(cfg):
    """``cfg`` with each tier's ``emulate`` at the design's rates as the job's node 0 gets them."""
    if cfg.design is None:
        return cfg
    tiers = cfg.tiers
    changes = {("global_" if n == "global" else n): replace(tiers.entry(n), emulate=run_emulation(cfg, n))
               for n in ("memory", "local", "global") if tiers.entry(n) is not None}
    return replace(cfg, tiers=replace(tiers, **changes))


def as_emulated(cfg, emulated_nodes: int):
    """``cfg`` with its tiers' ``emulate`` as a run of ``emulated_nodes`` paced each node: a job-wide
    rate becomes the node's share (node_emulation). Simulating a run as run (``--as-run``, tune's
    measured node) must give its nodes what the run gave them, not the whole job's aggregate."""
    tiers = cfg.tiers
    local = tiers.local and replace(tiers.local, emulate=node_emulation(cfg, "local", emulated_nodes))
    global_ = replace(tiers.global_, emulate=node_emulation(cfg, "global", emulated_nodes))
    return replace(cfg, tiers=replace(tiers, local=local, global_=global_))


def streams(kind: str, files: int, concurrency: int) -> int:
    """Streams of one node that each get the full rate under ``shared_by: none``."""
    return max(1, min(concurrency, files)) if kind == "drain" else max(1, files)


def limits(shared_by: str, rate_bps: float, *, kind: str, files: int, concurrency: int = 1) -> LinkLimits:
    """Link limits for ``kind`` ("write", "read" or "drain") at a configured ``rate_bps``."""
    if shared_by not in SHARINGS:
        raise ValueError(f"shared_by must be one of {SHARINGS}, got {shared_by!r}")
    if shared_by == "job":
        return LinkLimits(aggregate_bps=rate_bps)
    if shared_by == "node" or (shared_by == "rank" and kind == "drain"):
        return LinkLimits(node_bps=rate_bps)
    return LinkLimits(node_bps=rate_bps * streams(kind, files, concurrency))


def _per_stream(shared_by: str, kind: str) -> bool:
    return shared_by == "none" or (shared_by == "rank" and kind != "drain")


def node_load(shared_by: str, *, kind: str, file_bytes: float, node_bytes: float, files: int) -> float:
    """Bytes per node to put on the link so that its time is the slowest stream's.

    With a rate per stream (writes and reads under ``none``/``rank``) the node is
    done when its largest file is: ``file_bytes`` at ``rate``, i.e. ``file_bytes
    x files`` at the node cap of ``rate x files``. Otherwise the node's bytes.
    """
    if _per_stream(shared_by, kind) and kind != "drain":
        return file_bytes * max(1, files)
    return node_bytes


def bytes_sharing(shared_by: str, *, kind: str, file_bytes: float, node_bytes: float, job_bytes: float,
                  files: int, concurrency: int = 1) -> float:
    """Bytes that went through one bucket in a phase, for :func:`rate_from`.

    ``file_bytes``: the slowest (largest) stream's file; ``node_bytes``: one
    node's bytes; ``job_bytes``: every node's bytes in that phase.
    """
    if shared_by == "job":
        return job_bytes
    if not _per_stream(shared_by, kind):
        return node_bytes
    if kind == "drain":
        return node_bytes / streams(kind, files, concurrency)
    return file_bytes


def rate_from(seconds: float, shared_bytes: float) -> float | None:
    """The configured rate that moves ``shared_bytes`` through one bucket in ``seconds``."""
    if seconds <= 0 or shared_bytes <= 0:
        return None
    return shared_bytes / seconds
