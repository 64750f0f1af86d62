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

from emulator.design import ladder, requests
from emulator.design.emulation import Emulation, emulation_of
from emulator.design.failures import FailureModel, failure_model
from emulator.design.job import Job, as_run_job, job_of
from emulator.design.ladder import Rung, ladder_of
from emulator.design.links import (LinkLimits, NodeLinks, TierLinks, node_links, pacing, run_links, run_peer_bps,
                                   tier_emulation)
from emulator.design.snapshot import Snapshot, snapshot_of
from emulator.design.overrides import Overrides, applied
from emulator.errors import UserError

#: a measured rate below this share of the design's was limited by the emulating host, not the design
HOST_BOUND = 0.9


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
    #: checkpoint.engine dcp: DCP's planning per item of every rank's plan, as the run measured it
    plan_item_s: float | None = None


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
    #: the training step at full size, and the steps between checkpoints of the ladder's first rung
    step_seconds: float = 0.0
    interval_steps: int = 1
    #: the design of a run (``resolve(..., run=True)``): what each of its nodes is paced at
    emulation: Emulation | None = None
    #: global storage as an object store's requests meet it (emulator/design/requests.py; None: no requests)
    store: object = None

    @property
    def tiers(self) -> tuple:
        return tuple(t.name for t in self.ladder)

    def tier(self, name: str) -> Rung | None:
        return next((t for t in self.ladder if t.name == name), None)

    def link(self, name: str) -> TierLinks | None:
        return self.links.of(name)

    def recovery_tier(self, cls: str) -> str:
        """The nearest tier that survives ``cls``: a process crash keeps host memory and the NVMe, a
        node loss its peers' copies, a group loss only global storage."""
        return next(t for t in self.tiers if ladder.survives(cls, t))

    def restore_order(self, cls: str) -> tuple:
        """(tier, alone) a run's recovery from a failure of ``cls`` reads, nearest first: the node's own
        file tiers (after a node loss, a replacement's memory holds what its peers sent back), then
        global storage, which after a node loss the lost nodes read ``alone`` (the others restore
        nearer), and after a crash or a group loss every node reads at once (a storm)."""
        own = tuple((t, False) for t in self.tiers if t in ladder.node_file_tiers())
        return own + (("global", cls == "node"),)

    def survives(self, cls: str, tier: str) -> bool:
        """Whether the copies on ``tier`` survive a failure of ``cls`` (its rung kind's ``survives``)."""
        return ladder.survives(cls, tier)


def _snapshot(cfg, job, flagged: bool, cal: Calibration | None, sources: dict, notes: list) -> Snapshot:
    """The design's snapshot (emulator/design/snapshot.py): its rate measured, else the design's (a flag
    restates it there, emulator/design/overrides.py); DCP's planning per item as a run measured it, where
    one did."""
    kw = {"sources": sources, "notes": notes, "plan_item_s": cal.plan_item_s if cal is not None else None}
    if cal is not None and cal.snapshot_bps:
        return snapshot_of(cfg, job, rate_bps=cal.snapshot_bps, rate_source="measured", **kw)
    snapshot = snapshot_of(cfg, job, **kw)
    if flagged:
        sources["snapshot"] = "flag"
    return snapshot


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
            as_run: bool = False, dilation: float | None = None, run: bool = False,
            overrides: Overrides | None = None) -> Design:
    """The design of ``cfg``, with a calibration and the commands' overrides (``overrides``, or each
    by its keyword; None: the config's), applied on its ``design:`` first (emulator/design/overrides.py).
    ``as_run``: the run of ``cfg`` itself, its ``emulated_nodes`` nodes at ``run.scale`` paced as the
    run paced them at its ``dilation`` (else the calibration's, else run.dilation's; ``simulate
    --as-run``: the model checked against an emulated run). ``run``: the design a run of ``cfg`` on
    ``emulated_nodes`` nodes reads (the launcher's), with each node's pacing (:class:`Emulation`);
    its steps may take no time."""
    given = Overrides(nodes, accelerators_per_node, global_write_bps, nic_bps, snapshot_bps, mttf_hours,
                      node_loss_fraction, group_loss_fraction, restart_s)
    flags = given.over(overrides) if overrides else given
    cfg = applied(cfg, flags)
    sources, notes = {}, list(calibration.notes) if calibration is not None else []
    job = job_of(cfg, emulated_nodes=emulated_nodes)
    paced = {name: pacing(cfg, name, job) for name in cfg.tiers.configured()}
    snapshot = _snapshot(cfg, job, flags.snapshot is not None, calibration, sources, notes)  # the full-size job's rank
    full_job = job
    if as_run:
        links, job = run_links(cfg, job), as_run_job(job, cfg.run.scale)
    else:
        links = node_links(cfg, files=job.heaviest.files)
    if not links.nic_stated:
        notes.append("design.node.nic: not given; assumed 400Gb/s per node")
    first = next((t for t in links.tiers if t != "peer"), None)
    links = _calibrated(links, calibration, sources, notes, paced, first)
    if as_run:
        factor = _run_dilation(cfg, calibration, dilation)
        links, snapshot = as_paced_here(links, paced, factor, cfg.run.scale * factor), \
            _snapshot_as_run(cfg, snapshot, factor)
    for name, t in links.tiers.items():
        sources.setdefault(f"{name}_write", t.source)
    fm = failure_model(cfg.design.failures if cfg.design is not None else None, job.accelerators)
    interval = base_interval_s if base_interval_s is not None else \
        cfg.checkpoint.interval_steps * cfg.training.step_seconds
    if not interval > 0 and not run:
        raise UserError("the base interval is 0 (training.step_seconds is 0): give an interval")
    cal = calibration or Calibration()
    return Design(job=job, links=links, ladder=ladder_of(cfg), failures=fm,
                  snapshot=snapshot, modes=tuple(cfg.checkpoint.modes), base_interval_s=interval,
                  replicas=cfg.tiers.peer.replicas if cfg.tiers.peer is not None else 0,
                  restore_readers=cfg.checkpoint.restore_readers, drain_concurrency=cfg.drain.concurrency,
                  verify=cfg.drain.verify, async_waits_for=cfg.checkpoint.async_waits_for,
                  fixed_pre_s=cal.fixed_pre_s + snapshot.plan_s, fixed_post_s=cal.fixed_post_s,
                  interference_share=cal.interference_share,
                  measured_recovery_s={} if as_run else dict(cal.recovery_s),
                  sources=sources, notes=tuple(notes), retention_request_s=cal.retention_request_s, as_run=as_run,
                  step_seconds=cfg.training.step_seconds, interval_steps=cfg.checkpoint.interval_steps,
                  emulation=emulation_of(cfg, job, snapshot) if run else None,
                  store=_store(cfg, full_job, cfg.run.scale * factor) if as_run else requests.store_of(cfg))


def _store(cfg, job, time_factor: float):
    """The store as the run of ``cfg`` on ``job``'s emulated nodes met it: its ceilings per second of
    the run (``time_factor``), each request weighed as the job's it stood for."""
    store = requests.run_store(cfg, job)
    return store and replace(store, put_per_s=store.put_per_s and store.put_per_s / time_factor,
                             get_per_s=store.get_per_s and store.get_per_s / time_factor)


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
    """The snapshot as the run paced it: the design's rate (stated or assumed) / the factor, its other
    parts x the time factor; without a design, the host's copy, as measured. DCP's planning is the
    run's own, inside its measured writes (their rate), not paced: none here."""
    if cfg.design is None:
        return replace(snapshot, fixed_s=0.0, per_tensor_s=0.0, plan_s=0.0)
    return replace(snapshot.scaled(1 / factor, cfg.run.scale * factor), plan_s=0.0)


def run_emulation(cfg, name: str, *, run_node: int = 0, run_nodes: int = 1, alone_read: bool = False,
                  whole_node: bool = False):
    """Tier ``name``'s ``emulate`` for node ``run_node`` of a run of ``cfg`` on ``run_nodes`` nodes: what
    that node of the design's job gets (emulator/design/links.py ``tier_emulation``; ``whole_node``:
    the job node's own, where the run node is part of one)."""
    job = job_of(cfg, emulated_nodes=run_nodes)
    return tier_emulation(cfg, name, job, run_node=run_node, alone_read=alone_read, whole_node=whole_node)


def run_peer_link(cfg, *, run_node: int = 0, run_nodes: int = 1) -> float | None:
    """Bytes/s of the link node ``run_node`` of a run of ``cfg`` sends its peer copies through: the
    design's fabric, else its NIC, for its part of its job node (emulator/design/links.py
    ``run_peer_bps``); None unstated."""
    return run_peer_bps(cfg, job_of(cfg, emulated_nodes=run_nodes), run_node)
