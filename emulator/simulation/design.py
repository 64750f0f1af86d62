"""What is simulated: the job's nodes (in groups of identical ones) and every phase's cost.

Two shapes of job, from the same config:

- **full size** (the default): ``nodes x accelerators_per_node`` ranks, the
  config's TP and PP with data parallelism stretched to fill them, every rank
  writing its MLPerf-sized share of the full checkpoint (emulator/sizing.py).
- **as run** (``--as-run``): exactly what ``ckpt-emu run CONFIG`` emulates:
  the config's first ``active_ranks`` ranks at ``run.scale``, so the model can
  be checked against a real run.

A calibration (a run's results.json, e.g. ``tune``'s measurement of one node)
gives rates, never bytes: at full size every node writes its share of the
job's checkpoint, however many ranks the run started.

Rates come from the calibration when given, else from the tiers' ``emulate``
rates; :mod:`sharing` turns each into link limits. Every cost records where
it came from (``sources``) so reports can say what was measured, configured
or assumed.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import lru_cache

from emulator.config.design import DEFAULT_NIC
from emulator.errors import ConfigError, UserError
from emulator.simulation.inputs import Calibration, retention_requests, tier_latency, tier_sharing
from emulator.simulation.sharing import LinkLimits, as_emulated, limits, node_load, with_design_rates
from emulator.sizing import rank_coords, rank_size, writes
from emulator.units import GIB, parse_rate

#: GPU-to-host snapshot rate per accelerator without a calibration: device-to-host into
#: reused pinned buffers on one H100, measured at 48.6 GiB/s (the project's measurement notes)
DEFAULT_SNAPSHOT_GIB_S = 48.0


@dataclass(frozen=True)
class NodeGroup:
    """``nodes`` identical nodes; each writes ``files`` files, ``node_bytes`` in all, the largest ``file_bytes``."""

    nodes: int
    node_bytes: int
    file_bytes: int
    files: int


@dataclass(frozen=True)
class Options:
    """Everything besides the config that shapes the design (CLI flags)."""

    nodes: int
    accelerators_per_node: int = 8
    as_run: bool = False
    snapshot_gib_s: float = DEFAULT_SNAPSHOT_GIB_S
    global_gib_s: float | None = None  # aggregate global write bandwidth (overrides the config)
    nic_gib_s: float | None = None     # per-node cap on global writes (overrides the config)
    #: the run's own nodes and files (as run) at full size (bytes / run.scale): what ``tune`` plans with
    #: for the node it measured
    run_at_full_size: bool = False


@dataclass
class Design:
    groups: tuple
    ranks_per_node: int
    local: bool                    # a node-local tier that checkpoints go to first
    snapshot_bps: float            # per rank
    local_write: LinkLimits | None
    global_write: LinkLimits       # ranks' own writes to global (no local tier, or it is too small)
    drain: LinkLimits
    local_latency_s: float
    global_latency_s: float
    drain_waves: int               # ceil(files per node / drain.concurrency)
    coord_pre_s: float = 0.0       # collectives before the local write (barrier)
    coord_post_s: float = 0.0      # after the drain: gather, global manifest, broadcast
    housekeeping_s: float = 0.0    # retention after a checkpoint (the next one waits for it)
    recovery_local_s: float = 0.0  # restore from the local tier (every node at once)
    recovery_global: tuple = ()    # per group: restore of one replaced node from global
    recovery_global_all_s: float = 0.0  # every node restoring from global at once
    write_loads: dict = field(default_factory=dict)  # link bytes per node, per group: local/global
    #: the drain's read-back of what reached the global tier (drain.verify: checksum) at a configured
    #: or design read rate; None where it is not paced or a calibrated drain rate already holds it
    verify_read: LinkLimits | None = None
    #: what the next async checkpoint waits for of the previous one (checkpoint.async_waits_for)
    async_waits_for: str = "complete"
    #: the drain's read of the local device where reads and writes share it (not duplex): each byte
    #: read books write_rate / read_rate bytes of the local write link, as tiers/emulated.py does
    local_read_weight: float | None = None
    #: the drain's read of the local device on its own path (duplex); None where no read rate is known
    local_read: LinkLimits | None = None
    sources: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    @property
    def nodes(self) -> int:
        return sum(g.nodes for g in self.groups)

    @property
    def checkpoint_bytes(self) -> int:
        return sum(g.nodes * g.node_bytes for g in self.groups)


# --------------------------------------------------------------------------- node groups

def full_size_groups(cfg, nodes: int, per_node: int) -> tuple:
    """Groups of identical nodes for ``nodes x per_node`` ranks, DP stretched to fill them."""
    p = cfg.parallelism
    world = nodes * per_node
    if world % (p.tp * p.pp):
        raise UserError(f"--nodes x --accelerators-per-node = {world:,} is not a multiple of "
                        f"tp x pp = {p.tp * p.pp} (parallelism.tp, parallelism.pp)")
    try:
        par = replace(p, dp=world // (p.tp * p.pp), subset=False, ranks=None)
    except ConfigError as exc:
        raise ConfigError(f"parallelism.{exc}") from None

    @lru_cache(maxsize=None)
    def by_coords(stage: int, model_writer: bool, optimizer_writer: bool) -> int:
        dp = next(d for d in range(par.dp) if (writes(par, "model", d), writes(par, "optimizer", d))
                  == (model_writer, optimizer_writer))  # bytes depend on the stage and what the rank writes
        return rank_size(cfg.model, par, stage * p.tp + dp * p.tp * p.pp).total_bytes

    counts: Counter = Counter()
    for n in range(nodes):
        sizes = []
        for r in range(n * per_node, (n + 1) * per_node):
            c = rank_coords(r, par.tp, par.pp, par.dp)
            sizes.append(by_coords(c.pp, writes(par, "model", c.dp), writes(par, "optimizer", c.dp)))
        counts[(sum(sizes), max(sizes), len(sizes))] += 1
    return tuple(NodeGroup(k, b, f, n) for (b, f, n), k in sorted(counts.items()))


def as_run_groups(cfg, nodes: int, file_bytes: list | None = None) -> tuple:
    """The emulated run's nodes: its first ``active_ranks`` ranks at ``run.scale``, or the run's own
    file sizes when a calibration provides them."""
    ranks = cfg.parallelism.active_ranks
    if ranks % nodes:
        raise UserError(f"--as-run: the config runs {ranks} ranks, which {nodes} nodes cannot split evenly")
    per_node = ranks // nodes
    if file_bytes is None or len(file_bytes) != ranks:
        file_bytes = [int(rank_size(cfg.model, cfg.parallelism, r).total_bytes * cfg.run.scale)
                      for r in range(ranks)]
    counts: Counter = Counter()
    for n in range(nodes):
        sizes = file_bytes[n * per_node:(n + 1) * per_node]
        counts[(sum(sizes), max(sizes), len(sizes))] += 1
    return tuple(NodeGroup(k, b, f, n) for (b, f, n), k in sorted(counts.items()))


# --------------------------------------------------------------------------- costs

def _rate(tier_cfg, direction: str, calibrated: float | None, what: str, sources: dict,
          required: bool = True) -> float | None:
    """A tier's rate in bytes/s: calibrated, else configured, else an error (or None if optional)."""
    if calibrated is not None:
        sources[what] = "measured"
        return calibrated
    e = tier_cfg.emulate if tier_cfg is not None else None
    gib_s = getattr(e, f"{direction}_gib_s", None) if e is not None else None
    if gib_s is not None:
        sources[what] = "config"
        return gib_s * GIB
    sources[what] = "none"
    if required:
        name = "local" if what.startswith("local") else "global"
        raise UserError(f"tiers.{name}.emulate.{direction}_gib_s: needed to simulate without --calibrate "
                        f"(the config does not say how fast the {name} tier is)")
    return None


def _recovery(tier_cfg, read: LinkLimits | None, groups, files: int, alone: bool, nic_bps: float | None = None,
              design_limits: LinkLimits | None = None) -> list:
    """Seconds to restore each group's nodes from a tier at its ``read`` limits: every node at once, or
    one node ``alone``. ``design_limits``: the design's aggregate and NIC, which replace the tier's
    configured sharing."""
    if read is None and design_limits is None:
        return [0.0 for _ in groups]
    sb = "node" if design_limits is not None else tier_sharing(tier_cfg)
    lim = design_limits or read
    if nic_bps:
        lim = LinkLimits(lim.aggregate_bps, min(nic_bps, lim.node_bps))
    active = 1 if alone else sum(g.nodes for g in groups)
    rate = lim.node_rate(active)
    lat = 2 * tier_latency(tier_cfg)  # manifest, then the file
    return [node_load(sb, kind="read", file_bytes=g.file_bytes, node_bytes=g.node_bytes, files=g.files) / rate + lat
            for g in groups]


def _override(lim: LinkLimits, opts: Options, nic_bps: float) -> LinkLimits:
    agg = opts.global_gib_s * GIB if opts.global_gib_s else lim.aggregate_bps
    return LinkLimits(agg, min(lim.node_bps, nic_bps))  # both limits hold


def nic_bps(cfg, opts: Options, notes: list) -> float:
    """Each node's link to the global tier: ``--nic-gib-s``, else the design's, else a 400 Gb/s NIC.
    Never unlimited: one node must not take a whole file system's bandwidth; an assumed NIC is stated."""
    if opts.nic_gib_s:
        return opts.nic_gib_s * GIB
    if cfg.design is not None:
        if not cfg.design.nic_stated:
            notes.append(f"design.node.nic: not given; assumed {DEFAULT_NIC} per node")
        return cfg.design.nic_bps
    notes.append(f"no per-node link given (--nic-gib-s or design.node.nic): assumed {DEFAULT_NIC} per node")
    return parse_rate(DEFAULT_NIC, "design.node.nic")


def _housekeeping(cfg, files_per_node: int, world_files: int, local_lat: float, global_lat: float,
                  local: bool, per_request: float) -> float:
    g, lo = retention_requests(cfg, files_per_node, world_files, local)
    return g * (global_lat + per_request) + lo * (local_lat + per_request)


def _local_fits(cfg, groups, scale: float, notes: list) -> bool:
    """Whether keep + 1 checkpoints fit the local tier's emulated capacity (counted at run.scale)."""
    e = cfg.tiers.local.emulate
    if e is None or e.capacity_gib is None:
        return True
    capacity = e.capacity_gib * GIB / cfg.run.scale * scale  # the config counts run bytes
    need = (cfg.checkpoint.keep + 1) * max(g.node_bytes for g in groups)
    if need <= capacity:
        return True
    if cfg.checkpoint.on_local_full == "skip":
        raise UserError(f"tiers.local.emulate.capacity_gib: {capacity / GIB:,.1f} GiB per node cannot hold "
                        f"keep + 1 = {cfg.checkpoint.keep + 1} checkpoints ({need / GIB:,.1f} GiB) and "
                        f"checkpoint.on_local_full is skip: no checkpoint would ever be taken")
    notes.append(f"local tier: {capacity / GIB:,.1f} GiB per node cannot hold keep + 1 checkpoints "
                 f"({need / GIB:,.1f} GiB): every checkpoint goes straight to the global tier "
                 f"(checkpoint.on_local_full: global)")
    return False


#: a measured job-wide rate below this share of the configured one was limited by the emulating
#: host, not by the shared tier: it becomes a per-node cap under the configured aggregate
HOST_BOUND = 0.9


def _groups(cfg, opts: Options, cal) -> tuple[tuple, float]:
    """The node groups and the byte scale they are counted at: the run's files as run (or those at full
    size), else the job's checkpoint spread over ``opts.nodes`` as sizing lays it out (a calibration's
    bytes are one run's)."""
    if opts.as_run or opts.run_at_full_size:
        file_bytes = cal.rank_file_bytes if cal is not None else None
        groups, f = as_run_groups(cfg, opts.nodes, file_bytes), cfg.run.scale
        if opts.as_run:
            return groups, f
        return tuple(NodeGroup(g.nodes, round(g.node_bytes / f), round(g.file_bytes / f), g.files)
                     for g in groups), 1.0
    return full_size_groups(cfg, opts.nodes, opts.accelerators_per_node), 1.0


def _tier_limits(tier_cfg, rate: float, kind: str, files: int, conc: int, run_nodes: int, what: str,
                 sources: dict, notes: list) -> LinkLimits:
    """Link limits for a phase (a write, a drain or a read); a job-shared rate that one emulated node
    could not reach stays the aggregate, and what the node reached becomes its cap."""
    sb = tier_sharing(tier_cfg)
    lim = limits(sb, rate, kind=kind, files=files, concurrency=conc)
    e = tier_cfg.emulate
    direction = "read" if kind == "read" else "write"
    gib_s = getattr(e, f"{direction}_gib_s", None) if e is not None else None
    configured = gib_s * GIB if gib_s else None
    if sb == "job" and sources.get(what) == "measured" and configured and rate < HOST_BOUND * configured:
        lim = LinkLimits(configured, rate / max(1, run_nodes))
        notes.append(f"{what}: the run reached {rate / GIB:.3g} GiB/s of the configured job-wide "
                     f"{configured / GIB:g} GiB/s: the emulating host limited it; simulated as "
                     f"{lim.node_bps / GIB:.3g} GiB/s per node under the configured aggregate")
    return lim


def _global_links(cfg, opts: Options, c, files: int, local: bool, sources: dict, notes: list):
    """(global_write, drain) limits: ranks writing straight to the global tier, and drains."""
    t = cfg.tiers
    direct = _rate(t.global_, "write", c.global_write_bps or c.drain_bps, "global_write", sources,
                   required=not local)
    drain = _rate(t.global_, "write", c.drain_bps or c.global_write_bps, "drain", sources,
                  required=local) if local else direct
    conc = cfg.drain.concurrency
    gw = _tier_limits(t.global_, direct or drain, "write", files, conc, c.nodes, "global_write", sources, notes)
    dr = _tier_limits(t.global_, drain or direct, "drain", files, conc, c.nodes, "drain", sources, notes)
    nic = nic_bps(cfg, opts, notes)
    return _override(gw, opts, nic), _override(dr, opts, nic)


def design_links(cfg, opts: Options) -> tuple[LinkLimits, LinkLimits] | None:
    """(write, read) limits of the global tier from ``cfg.design``: the job's aggregate behind each
    node's NIC (emulator/design/links.py); flags override either. None without a design."""
    d = cfg.design
    if d is None or d.global_ is None:
        return None
    nic = nic_bps(cfg, opts, [])  # the note on an assumed one is made with the write links
    write = opts.global_gib_s * GIB if opts.global_gib_s else d.global_.write_bps
    return LinkLimits(write, nic), LinkLimits(d.global_.read_bps, nic)


def _verify_read(cfg, opts: Options, local: bool, global_read: float | None, sources: dict,
                 design) -> LinkLimits | None:
    """The read link a drain's checksum read-back uses, when the drain's rate is configured (a
    measured drain rate already includes the read-back)."""
    if not local or cfg.drain.verify != "checksum" or sources.get("drain") == "measured":
        return None
    if design is not None:
        return design[1]
    if global_read is None:
        return None
    return _override(limits(tier_sharing(cfg.tiers.global_), global_read, kind="drain",
                            files=1, concurrency=cfg.drain.concurrency), opts, nic_bps(cfg, opts, []))


def _write_loads(cfg, groups, local: bool) -> dict:
    def load(tier_cfg, g):
        return node_load(tier_sharing(tier_cfg), kind="write", file_bytes=g.file_bytes, node_bytes=g.node_bytes,
                         files=g.files)
    return {"local": [load(cfg.tiers.local, g) for g in groups] if local else [],
            "global": [load(cfg.tiers.global_, g) for g in groups]}


def _local_read(cfg, files: int, write_bps: float | None, read_bps: float | None) -> dict:
    """How a drain reads the local device: a weight on the write link where one device serves both
    (not duplex, both rates known, buckets shared by more than one call), else its own read link."""
    tier = cfg.tiers.local
    e, sb = tier.emulate, tier_sharing(tier)
    if not read_bps:
        return {}
    if e is not None and not e.duplex and write_bps and sb != "none":
        return {"local_read_weight": write_bps / read_bps}
    return {"local_read": limits(sb, read_bps, kind="drain", files=files, concurrency=cfg.drain.concurrency)}


def build_design(cfg, opts: Options, cal=None) -> Design:
    """The design for ``cfg`` under ``opts``; ``cal`` (calibrate.Calibration) replaces configured rates."""
    if opts.nodes < 1:
        raise UserError(f"--nodes: must be >= 1, got {opts.nodes}")
    if opts.accelerators_per_node < 1:
        raise UserError(f"--accelerators-per-node: must be >= 1, got {opts.accelerators_per_node}")
    sources, notes = {}, list(cal.notes) if cal is not None else []
    cfg = with_design_rates(cfg)
    as_run = opts.as_run or opts.run_at_full_size
    if as_run and cal is None:  # the run's nodes at the rates the run paced them at (a share of a
        cfg = as_emulated(cfg, opts.nodes)  # job-wide rate); a calibration's rates are the job's already
    groups, scale = _groups(cfg, opts, cal)
    files, t = max(g.files for g in groups), cfg.tiers
    local = t.local is not None and _local_fits(cfg, groups, scale, notes)
    c = cal if cal is not None else Calibration()  # no calibration: configured rates only
    sources["snapshot"] = "measured" if c.snapshot_bps is not None else "assumed"
    local_write, rate = None, None
    if local:
        rate = _rate(t.local, "write", c.local_write_bps, "local_write", sources)
        local_write = _tier_limits(t.local, rate, "write", files, 1, c.nodes, "local_write", sources, notes)
    global_write, drain = _global_links(cfg, opts, c, files, local, sources, notes)
    design = None if as_run else design_links(cfg, opts)
    if design is not None:  # the design's rates, not the emulated node's share of them, nor a calibration
        global_write = drain = design[0]
        sources.update(global_write="design", drain="design", global_read="design")
    l_lat, g_lat = tier_latency(t.local) if local else 0.0, tier_latency(t.global_)
    local_read = _rate(t.local, "read", c.local_read_bps, "local_read", sources, required=False) if local else None
    global_read = _rate(t.global_, "read", c.global_read_bps, "global_read", sources, required=False)
    read = {name: _tier_limits(tier, r, "read", files, 1, c.nodes, f"{name}_read", sources, notes)
            if r is not None else None
            for name, tier, r in (("local", t.local, local_read), ("global", t.global_, global_read))}
    for name, r in (("local", local_read), ("global", global_read)):
        if r is None and (name == "global" or local):
            notes.append(f"{name} reads: no rate configured or measured; restores from it cost only the restart")
    world_files = sum(g.nodes * g.files for g in groups)
    nic = nic_bps(cfg, opts, [])  # stated once, with the write links
    return Design(
        groups=groups, ranks_per_node=files, local=local,
        snapshot_bps=c.snapshot_bps if c.snapshot_bps is not None else opts.snapshot_gib_s * GIB,
        local_write=local_write, global_write=global_write, drain=drain,
        local_latency_s=l_lat, global_latency_s=g_lat, drain_waves=math.ceil(files / cfg.drain.concurrency),
        coord_pre_s=c.coord_pre_s, coord_post_s=c.coord_post_s,
        housekeeping_s=_housekeeping(cfg, files, world_files, l_lat, g_lat, local, c.retention_request_s),
        recovery_local_s=max(_recovery(t.local, read["local"], groups, files, alone=False)) if local else 0.0,
        recovery_global=tuple(_recovery(t.global_, read["global"], groups, files, alone=True, nic_bps=nic,
                                        design_limits=design and design[1])),
        recovery_global_all_s=max(_recovery(t.global_, read["global"], groups, files, alone=False, nic_bps=nic,
                                            design_limits=design and design[1])),
        write_loads=_write_loads(cfg, groups, local),
        verify_read=_verify_read(cfg, opts, local, global_read, sources, design),
        async_waits_for=cfg.checkpoint.async_waits_for,
        **(_local_read(cfg, files, rate, local_read) if local else {}), sources=sources, notes=notes)
