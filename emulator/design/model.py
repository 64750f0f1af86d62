"""The design: a config, a calibration and overrides resolved once into what every engine reads.

:func:`resolve` is the only way in. It fixes the job (nodes, layout, every node's bytes), every
link and who shares it (emulator/design/links.py), the tier ladder (each tier's every-N-th
checkpoint and retention), the failure classes (emulator/design/failures.py), the snapshot and the
base interval. The emulator paces its nodes by it, ``simulate`` shares its links event by event and
``plan`` computes its closed forms (emulator/design/costs.py): three engines, one design.

A calibration (a run's measured rates, :class:`Calibration`) replaces a link's rate where the run
could not reach the design's (the host limited it) and supplies the fixed costs a run measures
(barriers, manifests) and each class's measured recovery.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from emulator.config.design import DEFAULT_SNAPSHOT
from emulator.design.failures import SURVIVES, FailureModel, failure_model
from emulator.design.job import Job, as_run_job, job_of
from emulator.design.links import (LinkLimits, NodeLinks, TierLinks, node_links, pacing, run_links, run_nic_bps,
                                   tier_emulation)
from emulator.errors import UserError
from emulator.units import parse_rate

LADDER = ("memory", "peer", "local", "global")
#: a measured rate below this share of the design's was limited by the emulating host, not the design
HOST_BOUND = 0.9


@dataclass(frozen=True)
class Tier:
    """One rung of the ladder: takes every ``every``-th checkpoint, keeps ``keep`` of them."""

    name: str
    every: int
    keep: int


@dataclass(frozen=True)
class Snapshot:
    """Each accelerator's copy of its state to host memory: ``fixed_s`` + its bytes / ``rate_bps``."""

    rate_bps: float
    fixed_s: float = 0.0

    def seconds(self, rank_bytes: float) -> float:
        return self.fixed_s + rank_bytes / self.rate_bps


@dataclass
class Calibration:
    """What a run measured, per node at full size: its own copy rate into each tier, its restore
    rate from each tier, the snapshot rate per accelerator, fixed costs per checkpoint before
    the write and after the drain, each class's recovery, and the background interference.
    ``paced``: per tier, what the run's node was paced at (emulator/design/links.py ``pacing``): a
    design paced the same way is the one the run measured, and its measured rates stand."""

    source: str = ""
    snapshot_bps: float | None = None
    copy_bps: dict = field(default_factory=dict)
    read_bps: dict = field(default_factory=dict)
    fixed_pre_s: float = 0.0
    fixed_post_s: float = 0.0
    recovery_s: dict = field(default_factory=dict)
    interference_share: float = 0.0
    notes: list = field(default_factory=list)
    paced: dict = field(default_factory=dict)
    #: what each retention request took beyond its tier's latency (the host's file operations)
    retention_request_s: float = 0.0
    #: the run's run.dilation: ``--as-run`` paces the run as it ran, its designed rates / this
    dilation: float = 1.0


@dataclass(frozen=True)
class Design:
    """Everything an engine needs, at full size; nothing here is measured on this machine."""

    job: Job
    links: NodeLinks
    ladder: tuple
    failures: FailureModel
    snapshot: Snapshot
    modes: tuple
    base_interval_s: float
    replicas: int = 0
    restore_readers: str = "all"
    drain_concurrency: int = 4
    verify: str = "checksum"
    async_waits_for: str = "complete"
    fixed_pre_s: float = 0.0
    fixed_post_s: float = 0.0
    interference_share: float = 0.0
    measured_recovery_s: dict = field(default_factory=dict)
    sources: dict = field(default_factory=dict)
    notes: tuple = ()
    retention_request_s: float = 0.0
    #: the run itself (``simulate --as-run``): its nodes at run.scale, paced as the run paced them
    as_run: bool = False

    @property
    def tiers(self) -> tuple:
        return tuple(t.name for t in self.ladder)

    def tier(self, name: str) -> Tier | None:
        return next((t for t in self.ladder if t.name == name), None)

    def link(self, name: str) -> TierLinks | None:
        return self.links.of(name)

    def recovery_tier(self, cls: str) -> str:
        """The nearest tier that survives ``cls``: a process crash keeps host memory and the NVMe, a
        node loss its peers' copies, a group loss only global storage."""
        return next(t for t in self.tiers if t in SURVIVES[cls])

    def survives(self, cls: str, tier: str) -> bool:
        """Whether the copies on ``tier`` survive a failure of ``cls`` (failures.SURVIVES)."""
        return tier in SURVIVES[cls]


def ladder_of(cfg) -> tuple:
    every, keep = cfg.tier_every, cfg.checkpoint.keep
    out = []
    for name in cfg.tiers.configured():
        entry = cfg.tiers.entry(name)
        out.append(Tier(name, every[name], getattr(entry, "keep", None) or keep))
    return tuple(out)


def _snapshot(cfg, override_bps: float | None, cal: Calibration | None, sources: dict, notes: list) -> Snapshot:
    d = cfg.design
    spec = d.snapshot if d is not None else None
    if cal is not None and cal.snapshot_bps:
        sources["snapshot"] = "measured"
        return Snapshot(cal.snapshot_bps, spec.fixed_s if spec else 0.0)
    if override_bps:
        sources["snapshot"] = "flag"
        return Snapshot(override_bps, spec.fixed_s if spec else 0.0)
    if spec is not None and spec.stated:
        sources["snapshot"] = "design"
        return Snapshot(spec.rate_bps, spec.fixed_s)
    sources["snapshot"] = "assumed"
    notes.append(f"snapshot: no design.node.snapshot; assumed {DEFAULT_SNAPSHOT} per accelerator "
                 "(device-to-host into pinned buffers on one H100)")
    return Snapshot(parse_rate(DEFAULT_SNAPSHOT, "design.node.snapshot.rate"), spec.fixed_s if spec else 0.0)


def _calibrated(links: NodeLinks, cal: Calibration | None, sources: dict, notes: list,
                paced: dict | None = None, first: str | None = None) -> NodeLinks:
    """Where the run's node was paced as this design paces it (``paced``: tier -> :func:`pacing`), the
    run measured this design: what it reached of its pace is the host's efficiency, and the tier's
    links are scaled by it, so that every sharing (a lone reader, a storm, unequal nodes) keeps the
    design's dynamics at the run's speed. A run of another design sets a rate only where it could not
    reach the design's node alone (below 90 %: its host's limit): a node device's rate outright, a
    shared link's per-node cap (its aggregate holds)."""
    if cal is None:
        return links
    tiers = dict(links.tiers)
    for name, t in links.tiers.items():
        copy, read = cal.copy_bps.get(name), cal.read_bps.get(name)
        same = name in cal.paced and paced is not None and _same_pace(cal.paced[name], paced.get(name))
        if not read and copy and t.source == "none" and t.read is None:
            read = copy
            notes.append(f"{name}: no restore from it measured; its reads are planned at its measured write rate")
        # a shared store nothing paced was seen from one node: its aggregate is unknown, so the job is
        # credited with no more than that node's rate (never every node at it: that would flatter it)
        unknown = t.source == "none" and name == "global"
        changes = {}
        if copy:  # against what the run's node was paced at (this design), else the design's node alone
            pace = cal.paced[name][0 if name == first else 1] if same else t.drain.node_rate(1)
            if same:
                eff = min(1.0, copy / pace)
                changes["write"], changes["drain"] = t.write.scaled(eff), t.drain.scaled(eff)
                notes.append(f"{name}: a run of this design reached {copy / 1e9:.3g} GB/s of the {pace / 1e9:.3g} "
                             f"GB/s it was paced at ({eff:.1%}): its links planned at that share")
            elif copy < HOST_BOUND * pace or t.source == "none":
                changes["write"] = changes["drain"] = LinkLimits(copy if unknown else t.drain.aggregate_bps, copy)
                notes.append(f"{name}: an unpaced store measured from one node at {copy / 1e9:.3g} GB/s: the job "
                             "is credited with that rate, its aggregate being unknown" if unknown else
                             f"{name}: the run reached {copy / 1e9:.3g} GB/s of its node's "
                             f"{pace / 1e9:.3g} GB/s: the host limited it; planned at the measured rate")
            if changes:
                sources[f"{name}_write"] = "measured"
        if read and t.read is None:  # reads not paced: the host's rate, under the write's aggregate
            changes["read"] = LinkLimits(read if unknown else t.drain.aggregate_bps, read)
            sources[f"{name}_read"] = "measured"
            notes.append(f"{name}: reads have no rate in the design; the run's {read / 1e9:.3g} GB/s per node"
                         + ("" if t.drain.aggregate_bps == float("inf") else ", under the write's aggregate"))
        elif read:
            same_read = same and cal.paced[name][2]
            pace = cal.paced[name][2] if same_read else t.read.node_rate(1)
            if same_read:
                changes["read"] = t.read.scaled(min(1.0, read / pace))
            elif read < HOST_BOUND * pace or t.source == "none":
                changes["read"] = LinkLimits(t.read.aggregate_bps, read)
            if "read" in changes:
                sources[f"{name}_read"] = "measured"
        if changes:
            tiers[name] = replace(t, **changes)
    return replace(links, tiers=tiers)


def _same_pace(a, b) -> bool:
    """Two :func:`pacing` tuples alike (rates within a millionth)."""
    if a is None or b is None or a[3] != b[3] or a[1] is None:
        return False
    return all(x == y or (x and y and abs(x - y) <= 1e-6 * max(x, y)) for x, y in zip(a[:3], b[:3]))


def resolve(cfg, *, nodes: int | None = None, accelerators_per_node: int | None = None,
            emulated_nodes: int = 1, calibration: Calibration | None = None,
            global_write_bps: float | None = None, nic_bps: float | None = None,
            snapshot_bps: float | None = None, mttf_hours: float | None = None,
            node_loss_fraction: float | None = None, group_loss_fraction: float | None = None,
            restart_s: float | dict | None = None, base_interval_s: float | None = None,
            as_run: bool = False, dilation: float | None = None) -> Design:
    """The design of ``cfg``, with a calibration and the commands' overrides (None: the config's).
    ``as_run``: the run of ``cfg`` itself, its ``emulated_nodes`` nodes at ``run.scale`` paced as the
    run paced them at its ``dilation`` (else the calibration's, else run.dilation's; ``simulate
    --as-run``: the model checked against an emulated run)."""
    sources, notes = {}, list(calibration.notes) if calibration is not None else []
    job = job_of(cfg, nodes=nodes, accelerators_per_node=accelerators_per_node, emulated_nodes=emulated_nodes)
    paced = {name: pacing(cfg, name, job) for name in cfg.tiers.configured()}
    if as_run:
        links, job = run_links(cfg, job), as_run_job(job, cfg.run.scale)
    else:
        links = node_links(cfg, files=job.heaviest.files)
    links = _overridden(links, global_write_bps, nic_bps)
    if not links.nic_stated and nic_bps is None:
        notes.append("design.node.nic: not given; assumed 400Gb/s per node")
    first = next((t for t in links.tiers if t != "peer"), None)
    links = _calibrated(links, calibration, sources, notes, paced, first)
    snapshot = _snapshot(cfg, snapshot_bps, calibration, sources, notes)
    if as_run:
        factor = _run_dilation(cfg, calibration, dilation)
        links, snapshot = as_paced_here(links, paced, factor, cfg.run.scale * factor), \
            _snapshot_as_run(cfg, snapshot, factor)
    for name, t in links.tiers.items():
        sources.setdefault(f"{name}_write", t.source)
    fm = failure_model(cfg.design.failures if cfg.design is not None else None, job.accelerators,
                       mttf_hours=mttf_hours, node_loss_fraction=node_loss_fraction,
                       group_loss_fraction=group_loss_fraction, restart_s=restart_s)
    interval = base_interval_s if base_interval_s is not None else \
        cfg.checkpoint.interval_steps * cfg.training.step_seconds
    if not interval > 0:
        raise UserError("the base interval is 0 (training.step_seconds is 0): give an interval")
    cal = calibration or Calibration()
    return Design(job=job, links=links, ladder=ladder_of(cfg), failures=fm,
                  snapshot=snapshot, modes=tuple(cfg.checkpoint.modes), base_interval_s=interval,
                  replicas=cfg.tiers.peer.replicas if cfg.tiers.peer is not None else 0,
                  restore_readers=cfg.checkpoint.restore_readers, drain_concurrency=cfg.drain.concurrency,
                  verify=cfg.drain.verify, async_waits_for=cfg.checkpoint.async_waits_for,
                  fixed_pre_s=cal.fixed_pre_s, fixed_post_s=cal.fixed_post_s,
                  interference_share=cal.interference_share,
                  measured_recovery_s={} if as_run else dict(cal.recovery_s),
                  sources=sources, notes=tuple(notes), retention_request_s=cal.retention_request_s, as_run=as_run)


def _run_dilation(cfg, calibration: Calibration | None, dilation: float | None) -> float:
    """The dilation the run of ``cfg`` ran at: given, else its results' (a calibration), else its config's."""
    if dilation:
        return dilation
    if calibration is not None and calibration.source:
        return calibration.dilation
    if cfg.run.dilation.factor is None:
        raise UserError("--as-run: the run chose its dilation (run.dilation: auto); give --calibrate "
                        "RESULTS_JSON of that run, or --set run.dilation=D as it ran")
    return cfg.run.dilation.factor


def as_paced_here(links: NodeLinks, paced: dict, factor: float, time_factor: float) -> NodeLinks:
    """The links as a run at run.dilation ``factor`` paces them: each tier it paced (``paced``:
    emulator/design/links.py ``pacing``) at its rates / the factor, every request latency x the time
    factor (emulator/job/rank_tiers.py ``paced`` does the same to the run's tiers); the NIC too."""
    tiers = {}
    for name, t in links.tiers.items():
        if (paced.get(name) or (None,))[0] is None:
            tiers[name] = t  # not paced: as fast as the host, whatever the dilation
            continue
        slow = 1 / factor
        tiers[name] = replace(t, write=t.write.scaled(slow), drain=t.drain.scaled(slow),
                              read=t.read and t.read.scaled(slow), latency_s=t.latency_s * time_factor)
    return replace(links, tiers=tiers, nic_bps=links.nic_bps / factor)


def _snapshot_as_run(cfg, snapshot: Snapshot, factor: float) -> Snapshot:
    """The snapshot as the run paced it: the design's rate (stated or assumed) / the factor, its fixed
    cost x the time factor; without a design, the host's copy, as measured."""
    if cfg.design is None:
        return snapshot
    return Snapshot(snapshot.rate_bps / factor, snapshot.fixed_s * cfg.run.scale * factor)


def _overridden(links: NodeLinks, global_write_bps: float | None, nic_bps: float | None) -> NodeLinks:
    """The flags' global aggregate and NIC (``simulate --global-bandwidth``, ``--nic``) over the config's."""
    if global_write_bps is None and nic_bps is None:
        return links
    tiers = dict(links.tiers)
    nic = nic_bps or links.nic_bps
    g = tiers.get("global")
    if g is not None:
        agg = global_write_bps or g.drain.aggregate_bps
        w = LinkLimits(agg, min(nic, g.drain.node_bps) if nic_bps is None else nic)
        r = g.read and LinkLimits(g.read.aggregate_bps, nic if nic_bps else g.read.node_bps)
        tiers["global"] = replace(g, write=w, drain=w, read=r)
    if nic_bps is not None and "peer" in tiers:
        cap = LinkLimits(node_bps=nic)
        tiers["peer"] = replace(tiers["peer"], write=cap, read=cap, drain=cap)
    return replace(links, tiers=tiers, nic_bps=nic, nic_stated=links.nic_stated or nic_bps is not None)


def overridden(design: Design, *, global_write_bps: float | None = None, nic_bps: float | None = None) -> Design:
    """``design`` with the global aggregate and the NIC the flags give (a sweep's row of bandwidths)."""
    return replace(design, links=_overridden(design.links, global_write_bps, nic_bps))


def run_emulation(cfg, name: str, *, run_node: int = 0, run_nodes: int = 1, alone_read: bool = False,
                  whole_node: bool = False):
    """Tier ``name``'s ``emulate`` for node ``run_node`` of a run of ``cfg`` on ``run_nodes`` nodes: what
    that node of the design's job gets (emulator/design/links.py ``tier_emulation``; ``whole_node``:
    the job node's own, where the run node is part of one)."""
    job = job_of(cfg, emulated_nodes=run_nodes)
    return tier_emulation(cfg, name, job, run_node=run_node, alone_read=alone_read, whole_node=whole_node)


def run_nic(cfg, *, run_node: int = 0, run_nodes: int = 1) -> float | None:
    """Bytes/s of the NIC node ``run_node`` of a run of ``cfg`` sends its peer copies through: the
    design's, for its part of its job node (emulator/design/links.py ``run_nic_bps``); None unstated."""
    return run_nic_bps(cfg, job_of(cfg, emulated_nodes=run_nodes), run_node)
