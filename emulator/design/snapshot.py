"""The snapshot: what the training loop waits for per checkpoint before its copies run on, as parts.

Published async blocking times are 10x to 70x a rank's bytes over a copy rate (docs/validation.md):
a snapshot has costs the bytes do not explain. Per rank, the job waiting for its slowest:

- ``fixed``:    per checkpoint, whatever its size: the state-dict walk's set-up, starting the
                background writer, waiting for the copies to finish;
- ``tensors``:  per tensor staged: each copy's call and launch, DCP's staging walk;
- ``bytes``:    the rank's staged bytes at its staging buffers' copy rate (``staging``: pinned, pageable
                or fresh buffers): what it writes, or with ``checkpoint.engine: dcp`` every tensor it
                holds (DCP stages them all before its planner deduplicates);
- ``planning``: DCP's save planning (engine ``dcp``): its collectives, ``ceil(log2 ranks)`` hops each,
                and the coordinator's deduplication and metadata per item of every rank's plan. It
                comes after the snapshot, before the writes: in a sync save's stall, in an async
                save's lag (DCP plans in its background writer);
- ``first save``: pinning the staging buffers, once (not in the steady state).

The defaults (:data:`DEFAULTS`) say where each comes from (:data:`SOURCES`); a design states any of
them (``design.node.snapshot``), and a run measures them (``tune``, ``simulate --calibrate``).
The tensors are counted as frameworks hold them: each parameter tensor, its master copy and each
optimizer state of it (DCP's, Megatron's and DLRover's state dicts; a ``uniform`` model's layers are
one tensor each).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from emulator import sizing
from emulator.config.design import DEFAULT_SNAPSHOT, STAGING_RATES
from emulator.units import parse_rate

#: DCP's collectives in a save: the plans gathered and scattered back, the results gathered and the
#: metadata's completion broadcast (torch/distributed/checkpoint/state_dict_saver.py)
PLAN_COLLECTIVES = 4

#: the parts' defaults, per engine where the engines differ
DEFAULTS = {
    "fixed_s": 0.14,
    "per_tensor_s": {"torch_save": 10e-6, "dcp": 200e-6},
    "pin_bps": parse_rate("2.6GiB/s", "pin_rate"),
    "plan_hop_s": 1e-3,
    "plan_item_s": 60e-6,
}
SOURCES = {
    "rate": "the staging's copy rate, one H100, measured: pinned 48.6, pageable 8.8, fresh (.cpu()) 0.9 GiB/s",
    "fixed_s": "DCP's async_save with a pinned caching stager on one H100: 0.22 s per save of 4 GiB in 8 "
               "tensors, of which 0.08 s are its bytes at the pinned rate",
    "per_tensor_s": "torch_save: a device-to-host copy's launch and call, about 10 us (assumed); dcp: DCP's "
                    "caching stager walked 0.2 ms a tensor here (torch 2.13, 3,000 tensors, one CPU rank)",
    "pin_bps": "DCP's pinned caching stager's first save on one H100: 1.74 s for 4 GiB, 1.52 s more than "
               "the second",
    "plan_hop_s": "assumed: a small message between two hosts, its pickling included",
    "plan_item_s": "DCP's create_global_plan here: 58 us an item over 512 ranks' plans; PyTorch's 1,856-GPU "
                   "post implies about 70 (its first, uncached plan's 370 s)",
}


@dataclass(frozen=True)
class Snapshot:
    """One rank's snapshot in a design: ``rate_bps`` per accelerator, ``fixed_s`` per checkpoint,
    ``per_tensor_s`` for each of its ``tensors``, ``plan_s`` of DCP's planning after it (0 without),
    the first save's pinning at ``pin_bps`` (inf: none)."""

    rate_bps: float
    fixed_s: float = 0.0
    per_tensor_s: float = 0.0
    tensors: int = 0
    plan_s: float = 0.0
    pin_bps: float = math.inf
    staging: str = "pinned"
    #: which bytes a rank stages: "written" (torch_save) or "held" (dcp: replicas too)
    staged: str = "written"

    def parts(self, rank_bytes: float) -> dict:
        """The blocking time's parts for a rank of ``rank_bytes`` staged bytes, in seconds."""
        return {"fixed": self.fixed_s, "tensors": self.tensors * self.per_tensor_s,
                "bytes": rank_bytes / self.rate_bps}

    def seconds(self, rank_bytes: float) -> float:
        return sum(self.parts(rank_bytes).values())

    def first_save_s(self, rank_bytes: float) -> float:
        """What the first checkpoint adds: pinning its staging buffers."""
        return 0.0 if self.staging != "pinned" else rank_bytes / self.pin_bps

    def scaled(self, rate: float, time: float) -> "Snapshot":
        """The snapshot at ``rate`` x the copy rate and ``time`` x its other parts (a run's pacing)."""
        return replace(self, rate_bps=self.rate_bps * rate, fixed_s=self.fixed_s * time,
                       per_tensor_s=self.per_tensor_s * time, plan_s=self.plan_s * time,
                       pin_bps=self.pin_bps * rate)


def tensors_per_rank(model, par) -> int:
    """The most tensors a rank holds, counted as frameworks hold them: each parameter tensor of its
    stage, its master copy, each optimizer state of it."""
    per_param = 1 + len(sizing.OPTIMIZER_STATES[model.optimizer]) + (sizing.master_dtype(model, par) is not None)
    return max(len(sizing.held_model_tensors(model, par, stage)) for stage in range(par.pp)) * per_param


def held_bytes_per_rank(model, par) -> int:
    """The most bytes a rank holds (what DCP stages), over the stages."""
    return max(sum(sizing.tensor_bytes(t) for part in sizing.HELD.values() for t in part(model, par, stage))
               for stage in range(par.pp))


def planning_seconds(ranks: int, tensors: int, hop_s: float, item_s: float) -> float:
    """DCP's save planning: its collectives' hops, each rank's local plan, and the coordinator's pass
    over every rank's items (its deduplication and the global metadata)."""
    hops = PLAN_COLLECTIVES * math.ceil(math.log2(ranks)) if ranks > 1 else 0
    return hops * hop_s + item_s * tensors * (ranks + 1)


def _value(spec, key: str, engine: str, sources: dict):
    stated = getattr(spec, key, None) if spec is not None else None
    if stated is not None:
        sources[f"snapshot_{key}"] = "design"
        return stated
    sources[f"snapshot_{key}"] = "default"
    default = DEFAULTS[key]
    return default[engine] if isinstance(default, dict) else default


def snapshot_of(cfg, job, *, rate_bps: float | None = None, rate_source: str = "design",
                sources: dict | None = None, notes: list | None = None, plan_item_s: float | None = None) -> Snapshot:
    """The snapshot of a rank of ``job`` (the most bytes and tensors of any) in ``cfg``'s design: its
    rate (``rate_bps`` where a flag or a calibration gives one), the parts the design states, the
    defaults for the others."""
    sources = {} if sources is None else sources
    notes = [] if notes is None else notes
    spec = cfg.design.snapshot if cfg.design is not None else None
    engine = cfg.checkpoint.engine
    if rate_bps is None:
        staging = spec.staging if spec is not None else "pinned"
        rate_bps = spec.rate_bps if spec is not None else parse_rate(DEFAULT_SNAPSHOT, "design.node.snapshot.rate")
        rate_source = "design" if spec is not None and spec.stated else "assumed"
        if rate_source == "assumed":
            notes.append(f"snapshot: no design.node.snapshot.rate; assumed {STAGING_RATES[staging]} per accelerator "
                         f"({staging} staging buffers, measured on one H100)")
    sources["snapshot"] = rate_source
    model, par = cfg.model, job.layout
    tensors = tensors_per_rank(model, par)
    plan_s = 0.0
    if engine == "dcp":
        item_s = _value(spec, "plan_item_s", engine, sources)
        if plan_item_s is not None:
            item_s, sources["snapshot_plan_item_s"] = plan_item_s, "measured"
        plan_s = planning_seconds(job.accelerators, tensors, _value(spec, "plan_hop_s", engine, sources), item_s)
    return Snapshot(rate_bps, _value(spec, "fixed_s", engine, sources), _value(spec, "per_tensor_s", engine, sources),
                    tensors, plan_s, _value(spec, "pin_bps", engine, sources),
                    spec.staging if spec is not None else "pinned", "held" if engine == "dcp" else "written")


def staged_bytes(design) -> float:
    """The most bytes a rank of the design's job stages: its largest file, or (engine dcp) what it
    holds (each group's ranks alike: its held bytes over its ranks)."""
    groups = design.job.groups
    if design.snapshot.staged == "held":
        return max(max(g.held_bytes / max(1, g.files), g.file_bytes) for g in groups)
    return max(g.file_bytes for g in groups)


def figures(design) -> dict:
    """The design's snapshot by its parts, for plan's and simulate's outputs (seconds, one rank)."""
    snap, rank_bytes = design.snapshot, staged_bytes(design)
    return {"parts_s": snap.parts(rank_bytes), "planning_s": snap.plan_s, "tensors": snap.tensors,
            "rank_bytes": rank_bytes, "staging": snap.staging, "first_save_s": snap.first_save_s(rank_bytes),
            "describe": describe(snap, rank_bytes)}


def describe(snapshot: Snapshot, rank_bytes: float) -> str:
    """'fixed 140 ms + 1,740 tensors x 10 us 17 ms + 2.42 GB at 8.8 GiB/s 256 ms' (one rank)."""
    p = snapshot.parts(rank_bytes)
    ms = lambda s: f"{s * 1e3:.3g} ms"  # noqa: E731
    return (f"fixed {ms(p['fixed'])} + {snapshot.tensors:,} tensors x {snapshot.per_tensor_s * 1e6:.3g} us "
            f"{ms(p['tensors'])} + {rank_bytes / 1e9:.3g} GB at {snapshot.rate_bps / 2**30:.3g} GiB/s {ms(p['bytes'])}")


def summary(design) -> dict | None:
    """results.json's ``snapshot``: the design's parts for its heaviest rank at full size (what a run
    paces, x its time factor) and where each part's figure comes from; None where nothing paces it
    (no design, MLPerf's protocol)."""
    if design.emulation is not None and design.emulation.snapshot is None:
        return None
    snap, rank_bytes = design.snapshot, staged_bytes(design)
    sources = {k: v for k, v in design.sources.items() if k.startswith("snapshot")}
    return {"parts_s": snap.parts(rank_bytes), "seconds": snap.seconds(rank_bytes), "rank_bytes": rank_bytes,
            "tensors": snap.tensors, "per_tensor_s": snap.per_tensor_s, "rate_bps": snap.rate_bps,
            "staging": snap.staging, "staged": snap.staged, "planning_s": snap.plan_s,
            "first_save_s": snap.first_save_s(rank_bytes), "describe": describe(snap, rank_bytes),
            "sources": {k: SOURCES.get("rate" if k == "snapshot" else k.removeprefix("snapshot_"), v)
                        if v in ("default", "assumed") else v for k, v in sources.items()}}
