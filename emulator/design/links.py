"""Every link of a design and what one node gets of it: the one place a node's rate is decided.

A node's own devices are its host memory (a copy into it), its local NVMe (its ranks share it;
reads and writes share it too unless ``duplex``) and its NIC (peer copies and global traffic leave
through it). The global storage is an aggregate shared max-min fair by the nodes moving bytes at
that moment, each capped by its NIC: k nodes that each move B bytes take B*k/A, or B/NIC where the
NIC binds first; nodes with fewer bytes finish first and leave their share to the others. A drain
also reads each node's files from its NVMe (or host memory), so that tier's read rate caps it too.

A tier is described by ``design:`` (emulator/config/design.py) or, at a lower level, by its
``emulate:`` knobs, which mean the same: ``shared_by: node`` is the node's device or link, ``job``
the job's aggregate, ``rank`` a rate per rank process, ``none`` a rate per stream. The emulator
paces its nodes (:func:`tier_emulation`), the simulator shares its links and the planner
computes its finish times (:func:`fair_finish`) from the same :class:`TierLinks`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from emulator.config import EmulateConfig
from emulator.config.design import DEFAULT_NIC
from emulator.design import ladder
from emulator.units import BINARY, DECIMAL, GIB, parse_rate, rate_family

SHARINGS = ("none", "rank", "node", "job")


@dataclass(frozen=True)
class LinkLimits:
    """Limits of one link: an aggregate shared by the nodes using it and a cap per node, bytes/s."""

    aggregate_bps: float = math.inf
    node_bps: float = math.inf

    def node_rate(self, active_nodes: int) -> float:
        """What each node gets when ``active_nodes`` transfer at once (fair share)."""
        return min(self.node_bps, self.aggregate_bps / max(1, active_nodes))

    def capped(self, node_bps: float) -> "LinkLimits":
        return LinkLimits(self.aggregate_bps, min(self.node_bps, node_bps))

    def scaled(self, factor: float) -> "LinkLimits":
        """Both limits x ``factor``: every byte over the link takes 1 / factor as long."""
        return LinkLimits(self.aggregate_bps * factor, self.node_bps * factor)


def node_share(aggregate_bps: float, nic_bps: float, concurrent_nodes: int) -> float:
    """Bytes/s one node gets when ``concurrent_nodes`` use a link of ``aggregate_bps`` behind a NIC."""
    return LinkLimits(aggregate_bps, nic_bps).node_rate(concurrent_nodes)


def fair_finish(limits: LinkLimits, loads) -> list:
    """Seconds until each load is moved when all start at once: ``loads`` are (nodes, bytes per node);
    max-min fair, every active node at min(cap, aggregate / active nodes), the smallest done first."""
    order = sorted(range(len(loads)), key=lambda i: loads[i][1])
    active = sum(n for n, b in loads if b > 0)
    finish, t, moved = [0.0] * len(loads), 0.0, 0.0
    for i in order:
        nodes, b = loads[i]
        if b <= 0:
            continue
        t += (b - moved) / limits.node_rate(active)
        moved, finish[i] = b, t
        active -= nodes
    return finish


@dataclass(frozen=True)
class TierLinks:
    """One tier as a node sees it: the ranks' writes into it, the node's reads (restores), a drain's
    copies into it, whether reads and writes share one device, per-request latency, capacity."""

    write: LinkLimits
    read: LinkLimits | None
    drain: LinkLimits
    duplex: bool = False
    latency_s: float = 0.0
    capacity_bytes: int | None = None
    #: the units the rates were written in, for output (units.fmt_rate)
    family: str = DECIMAL
    #: "design" (design:), "config" (emulate: knobs) or "none" (not paced: as fast as the host)
    source: str = "design"

    def shared_device(self) -> LinkLimits | None:
        """A node's own device where its reads and writes share it (not duplex, both rates known): one
        link per node whose streams, reads and writes alike, share the write rate (a read books
        :attr:`read_cost` bytes per byte, as the emulator's one bucket does). None otherwise."""
        if self.duplex or self.read is None or math.isinf(self.write.node_bps):
            return None
        return LinkLimits(aggregate_bps=self.write.node_bps)

    @property
    def read_cost(self) -> float:
        """Bytes of a shared device's write time one byte read takes: write rate / read rate."""
        return self.write.node_bps / self.read.node_bps


@dataclass(frozen=True)
class NodeLinks:
    """Every tier's links, the NIC the node's global traffic goes through, and the compute fabric its
    peer copies go through where the design states one (else the NIC, shared with the global traffic)."""

    tiers: dict
    nic_bps: float
    nic_stated: bool
    nic_family: str = "bits"
    fabric_bps: float | None = None

    @property
    def peer_bps(self) -> float:
        """The link a node's peer copies (and a restore's broadcasts) go through."""
        return self.fabric_bps or self.nic_bps

    def of(self, name: str) -> TierLinks | None:
        return self.tiers.get(name)


def _limits(shared_by: str, rate_bps: float, *, kind: str, files: int, concurrency: int) -> LinkLimits:
    """A knob's rate as link limits for ``kind`` (write, read, drain): ``job`` the aggregate, ``node`` the
    node's cap, ``rank`` a rate per rank (a drain is the node leader's one process), ``none`` per stream."""
    if shared_by == "job":
        return LinkLimits(aggregate_bps=rate_bps)
    if shared_by == "node" or (shared_by == "rank" and kind == "drain"):
        return LinkLimits(node_bps=rate_bps)
    streams = max(1, min(concurrency, files)) if kind == "drain" else max(1, files)
    return LinkLimits(node_bps=rate_bps * streams)


def _from_knobs(e, nic_bps: float, *, files: int, concurrency: int, is_global: bool) -> TierLinks:
    if e is None or not e.write_gib_s:
        free = LinkLimits(node_bps=math.inf)
        return TierLinks(free, None, free, True, 0.0, None, DECIMAL, "none")
    nic = nic_bps if is_global else math.inf
    write, read = e.write_gib_s * GIB, (e.read_gib_s or 0) * GIB
    kw = dict(files=files, concurrency=concurrency)
    return TierLinks(_limits(e.shared_by, write, kind="write", **kw).capped(nic),
                     _limits(e.shared_by, read, kind="read", **kw).capped(nic) if read else None,
                     _limits(e.shared_by, write, kind="drain", **kw).capped(nic),
                     e.duplex, (e.latency_ms + e.jitter_ms / 2) / 1000,
                     int(e.capacity_gib * GIB) if e.capacity_gib else None, BINARY, "config")  # knobs: GiB/s


def _family(text: dict, *keys) -> str:
    for k in keys:
        if text.get(k) is not None:
            return rate_family(text[k])
    return DECIMAL


def shared_store(write_bps: float, read_bps: float, nic_bps: float, *, latency_s: float = 0.0,
                 family: str = DECIMAL) -> TierLinks:
    """A global storage of aggregate ``write_bps`` and ``read_bps`` for the job, each node behind its NIC."""
    w, r = LinkLimits(write_bps, nic_bps), LinkLimits(read_bps, nic_bps)
    return TierLinks(w, r, w, True, latency_s, None, family, "design")


def _from_design(part, name: str, nic_bps: float, text: dict) -> TierLinks:
    if name == "global":
        return shared_store(part.write_bps, part.read_bps, nic_bps, latency_s=part.latency_s,
                            family=_family(text, "write", "read"))
    w, r = LinkLimits(node_bps=part.write_bps), LinkLimits(node_bps=part.read_bps)
    duplex = getattr(part, "duplex", False)
    return TierLinks(w, r, w, duplex, getattr(part, "latency_s", 0.0), part.capacity_bytes,
                     _family(text, "write", "read"), "design")


def _design_part(design, name: str):
    if design is None:
        return None, {}
    node = design.text.get("node") or {}
    part = {"memory": design.memory, "local": design.local, "global": design.global_}.get(name)
    text = (design.text.get("global") if name == "global" else node.get(name)) or {}
    return part, text


def nic_of(cfg) -> tuple[float, bool, str]:
    """(bytes/s, stated, family) of each node's NIC: the design's, else an assumed 400 Gb/s (never unlimited)."""
    d = cfg.design
    if d is not None and d.nic_stated:
        return d.nic_bps, True, rate_family((d.text.get("node") or {}).get("nic"))
    return parse_rate(DEFAULT_NIC, "design.node.nic"), False, "bits"


def peer_link_of(cfg) -> tuple[float, bool, str]:
    """(bytes/s, stated, family) of the link a node's peer copies go through: the design's compute
    fabric where it states one, else the NIC (:func:`nic_of`)."""
    d = cfg.design
    if d is not None and d.fabric_bps is not None:
        return d.fabric_bps, True, rate_family((d.text.get("node") or {}).get("fabric"))
    return nic_of(cfg)


def node_links(cfg, *, files: int) -> NodeLinks:
    """Every configured tier's links for a node of ``files`` ranks: the design's part where it has one,
    else the tier's emulate: knobs (the peer tier: its sends over the fabric, else the NIC)."""
    nic, stated, nic_family = nic_of(cfg)
    tiers = {}
    for name in cfg.tiers.configured():
        if name == "peer":
            rate, peer_stated, family = peer_link_of(cfg)
            cap = LinkLimits(node_bps=rate)
            tiers[name] = TierLinks(cap, cap, cap, True, 0.0, None, family, "design" if peer_stated else "none")
            continue
        part, text = _design_part(cfg.design, name)
        if part is not None:
            tiers[name] = _from_design(part, name, nic, text)
        else:
            t = _from_knobs(cfg.tiers.entry(name).emulate, nic, files=files,
                            concurrency=cfg.drain.concurrency, is_global=name == "global")
            if t.capacity_bytes:  # emulate: counts a run's bytes (at run.scale); the design's are full size
                t = replace(t, capacity_bytes=int(t.capacity_bytes / cfg.run.scale))
            tiers[name] = t
    return NodeLinks(_drain_read(tiers, cfg), nic, stated, nic_family,
                     cfg.design.fabric_bps if cfg.design is not None else None)


def drain_source(cfg) -> str | None:
    """The node tier a drain reads each node's files from, as the checkpointer picks it: the NVMe where
    the ladder has one, else the nearest tier: the farthest node tier holding files (None: the ranks
    write global storage directly)."""
    names = [n for n in ladder.node_file_tiers() if cfg.tiers.entry(n) is not None]
    return names[-1] if names else None


def _drain_read(tiers: dict, cfg) -> dict:
    """The global tier's drain capped, per node, by the read rate of the tier it reads (a node drains no
    faster than it reads its own files)."""
    source = tiers.get(drain_source(cfg) or "")
    g = tiers.get("global")
    if g is None or source is None or source.read is None or math.isinf(source.read.node_bps):
        return tiers
    return {**tiers, "global": replace(g, drain=g.drain.capped(source.read.node_bps))}


def lone_drain_seconds(sizes: list, *, write_bps: float, source_read_bps: float | None, read_back_bps: float | None,
                       latency_s: float, concurrency: int, shared_device: bool) -> float:
    """One node's drain of files of ``sizes`` with nothing else on its links (emulator/design/costs.py's
    drain, for one node): every byte at the copy's rate, the destination's write or the source's read
    where slower (a node drains no faster than it reads its own files: :func:`_drain_read`); the
    read-back at ``read_back_bps`` (None: not verified), of every file where the destination's reads
    and writes share one device, else of the smallest, alone at the end; a request latency at each
    end of every wave of ``concurrency`` files."""
    copy = min(r for r in (write_bps, source_read_bps) if r)
    verify = (sum(sizes) if shared_device else min(sizes)) / read_back_bps if read_back_bps else 0.0
    waves = -(-len(sizes) // concurrency)
    return sum(sizes) / copy + verify + 2 * waves * latency_s


# --------------------------------------------------------------------------- what a run's node is paced at

def _share(limits: LinkLimits, job, node_bytes: int, alone: bool = False, loads: list | None = None) -> float:
    """The rate a job node of ``node_bytes`` gets of a shared link: alone, min(NIC, aggregate); with
    every node of the job moving its bytes at once (``loads``: (nodes, bytes) each; default the bytes
    each wrote), its bytes over its fair finish time (its mean rate)."""
    if alone or math.isinf(limits.aggregate_bps):
        return limits.node_rate(1)
    if node_bytes <= 0:
        return limits.node_rate(max(1, job.moving_nodes))
    loads = loads if loads is not None else [(g.nodes, g.node_bytes) for g in job.groups]
    finish = fair_finish(limits, loads + [(0, node_bytes)])[-1]  # a probe of no nodes: its finish time
    return node_bytes / finish


def paced_share(limits: LinkLimits, job) -> float:
    """The rate the run's first node is paced at on a link, every node of the job moving its bytes at once
    (:func:`tier_emulation`): what a measurement of that node can reach."""
    return _share(limits, job, job.emulated_as[0] if job.emulated_as else job.heaviest.node_bytes)


def node_fraction(job, run_node: int) -> float:
    """The part of its job node that node ``run_node`` of a run is: its ranks' bytes over those of the
    job's node they belong to (1 for a whole node). A run of 4 of a node's 8 ranks is paced at half the
    node's devices and of its share of shared links, so its figures are the whole node's."""
    whole = job.emulated_as[run_node] if job.emulated_as else 0
    mine = job.emulated[run_node].node_bytes
    return mine / whole if 0 < mine < whole else 1.0


def paced_part(cfg, name: str, job, run_node: int = 0) -> float:
    """The part of its job node's rates node ``run_node`` of a run is paced at on tier ``name``: its
    :func:`node_fraction` on a tier the design describes (and for peer sends, through the NIC the
    design states); 1 on a tier its knobs describe (the run's own node) or that nothing paces."""
    d = cfg.design
    described = d is not None and peer_link_of(cfg)[1] if name == "peer" else _design_part(d, name)[0] is not None
    return node_fraction(job, run_node) if described else 1.0


def tier_emulation(cfg, name: str, job, *, run_node: int = 0, alone_read: bool = False,
                   whole_node: bool = False, restoring: bool = False) -> EmulateConfig | None:
    """Tier ``name``'s ``emulate`` for node ``run_node`` of a run of ``job``: its own devices at their
    rates, shared by its ranks; the global storage at its share when every node of the job moves its
    bytes at once (or, ``alone_read``, its rate reading alone: a lost node's restore; ``restoring``,
    its reads at its share when every node restores the state it holds at once). A run node that
    is part of a design node gets that part of it (:func:`node_fraction`; ``whole_node``: the job
    node's own, as the report states the design). Knobs describe the run's own node: one other than
    ``shared_by: job`` is returned as written, a job's rate is the node's share of it. Capacity is in
    the bytes a run moves (x run.scale)."""
    tier = cfg.tiers.entry(name)
    part, text = _design_part(cfg.design, name)
    share = 1.0 if whole_node else paced_part(cfg, name, job, run_node)
    readers = cfg.checkpoint.restore_readers if restoring else None  # a storm's reads, else the writes'
    if part is None:
        e = tier.emulate if tier is not None else None
        if e is None or (e.shared_by != "job" and not alone_read):
            return e
        links = _from_knobs(e, nic_of(cfg)[0], files=job.emulated[run_node].files,
                            concurrency=cfg.drain.concurrency, is_global=name == "global")
        return _paced(e, links, job, run_node, alone_read, readers)
    links = node_links(cfg, files=job.emulated[run_node].files).of(name)
    e = EmulateConfig(write_gib_s=part.write_bps / GIB, read_gib_s=part.read_bps / GIB,
                      latency_ms=getattr(part, "latency_s", 0.0) * 1000, shared_by="node",
                      duplex=links.duplex,
                      capacity_gib=part.capacity_bytes * cfg.run.scale / GIB
                      if getattr(part, "capacity_bytes", None) else None)
    if name != "global":
        return _part(e, share)
    e = _paced(e, links, job, run_node, alone_read, readers)
    if cfg.design.nic_stated and cfg.tiers.peer is not None and cfg.design.fabric_bps is None:
        e = replace(e, nic_gib_s=cfg.design.nic_bps / GIB)  # the drain leaves through the NIC the peer copies use
    return _part(e, share)


def _paced(e: EmulateConfig, links: TierLinks, job, run_node: int, alone_read: bool,
           restore_readers: str | None = None) -> EmulateConfig:
    """``e`` at the node's share of the job's links: its reads of the bytes each node wrote (a drain's
    read-back), or, with ``restore_readers``, of what each node reads in a restore storm."""
    node_bytes = job.emulated_as[run_node]
    write = _share(links.drain, job, node_bytes) if e.write_gib_s else None
    reads, loads = node_bytes, None
    if restore_readers is not None:
        reads, loads = job.restore_bytes(run_node, restore_readers), job.restore_loads(restore_readers)
    read = _share(links.read, job, reads, alone=alone_read, loads=loads) if links.read is not None else None
    return replace(e, shared_by="node", write_gib_s=write / GIB if write else e.write_gib_s,
                   read_gib_s=read / GIB if read else e.read_gib_s)


def _part(e: EmulateConfig, share: float) -> EmulateConfig:
    """A node's ``emulate`` for ``share`` of it: its rates, NIC and capacity x ``share``."""
    if share == 1:
        return e
    times = lambda v: None if v is None else v * share  # noqa: E731
    return replace(e, write_gib_s=times(e.write_gib_s), read_gib_s=times(e.read_gib_s),
                   nic_gib_s=times(e.nic_gib_s), capacity_gib=times(e.capacity_gib))


def run_peer_bps(cfg, job, run_node: int = 0) -> float | None:
    """The link node ``run_node`` of a run of ``job`` sends its peer copies through (bytes/s): the
    design's fabric, else its NIC, for the part of its job node the run node is; None where the
    design states neither."""
    rate, stated, _ = peer_link_of(cfg)
    if cfg.design is None or not stated:
        return None
    return rate * paced_part(cfg, "peer", job, run_node)


def pacing(cfg, name: str, job, run_node: int = 0) -> tuple:
    """(write, drain, read bytes/s, shared_by) node ``run_node`` of a run of ``job`` is paced at on tier
    ``name``: its own rates, as a run of it is given them (None where not paced; a peer's copies: the
    NIC), for the whole job node it is part of (a part of a node gets that part of them, and its
    calibration counts its rates for the whole node: :func:`node_fraction`). A run measured under
    the same pacing as a design measured that design itself, with the host's costs, and what it
    reached over these is the host's efficiency (emulator/design/model.py)."""
    nic = nic_of(cfg)[0]
    if name == "peer":
        link = peer_link_of(cfg)[0]
        return link, link, link, "node"
    e = tier_emulation(cfg, name, job, run_node=run_node, whole_node=True)
    if e is None or not e.write_gib_s:
        return None, None, None, "none"
    t = _from_knobs(e, nic, files=job.emulated[run_node].files, concurrency=cfg.drain.concurrency,
                    is_global=name == "global")
    return t.write.node_rate(1), t.drain.node_rate(1), t.read.node_rate(1) if t.read else None, e.shared_by


def run_links(cfg, job) -> NodeLinks:
    """Every tier as a run paces its nodes: what ``simulate --as-run`` shares, so it reproduces the run
    rather than the job the run is part of. A run of the whole job shares the job's links (each node
    at its share when all move, a lone reader at its NIC); a run of some of its nodes, or of part of
    a node, gives each its share of the job's (:func:`tier_emulation`, the heaviest node's)."""
    node = max(range(len(job.emulated)), key=lambda i: job.emulated[i].node_bytes)
    files = job.emulated[node].files
    links = node_links(cfg, files=files)
    whole = all(paced_part(cfg, name, job, node) == 1 for name in links.tiers)
    if len(job.emulated) == job.nodes and whole:  # capacities in the bytes the run moves
        scale = cfg.run.scale
        return replace(links, tiers={n: replace(t, capacity_bytes=t.capacity_bytes and int(t.capacity_bytes * scale))
                                     for n, t in links.tiers.items()})
    tiers = dict(links.tiers)
    link = run_peer_bps(cfg, job, node) or links.peer_bps  # the peer sends' (the run's tiers cap their own)
    for name, t in tiers.items():
        if name == "peer":
            part = link / links.peer_bps
            tiers[name] = replace(t, write=t.write.scaled(part), read=t.read.scaled(part), drain=t.drain.scaled(part))
            continue
        e = tier_emulation(cfg, name, job, run_node=node)
        knobs = _from_knobs(e, links.nic_bps, files=files, concurrency=cfg.drain.concurrency,
                            is_global=name == "global")
        tiers[name] = replace(knobs, family=t.family, source=t.source)
    if links.fabric_bps is not None:
        return replace(links, tiers=tiers, fabric_bps=link)
    return replace(links, tiers=tiers, nic_bps=link)
