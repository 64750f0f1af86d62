"""The modelled job: its nodes, the layout that fills them, and every node's checkpoint bytes.

A job is ``nodes x accelerators_per_node`` ranks. Its data parallelism is what those ranks give,
world / (tp x pp), not a preset's: ``design.job.nodes: 128`` on a TP8 preset is DP128, and each node
holds its share of that job's checkpoint (emulator/sizing.py). Nodes holding the same bytes form
one group, so 12,500 alike nodes cost one entry; under ZeRO-0 or with pipeline stages of unequal
size, nodes differ. A run emulates the job's first ranks (``parallelism.ranks``, subset mode) on
its own nodes: ``emulated`` are those nodes, at full size.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from emulator.config import ParallelismConfig
from emulator.errors import ConfigError, UserError
from emulator.sizing import rank_coords, rank_size, size_key


@dataclass(frozen=True)
class NodeGroup:
    """``nodes`` alike nodes; each writes ``files`` files, ``node_bytes`` in all, the largest ``file_bytes``,
    and holds ``held_bytes`` of state (what it reads back when every rank restores its own)."""

    nodes: int
    node_bytes: int
    file_bytes: int
    files: int
    held_bytes: int = 0


@dataclass(frozen=True)
class Job:
    """The whole job (``groups``: every node) and the nodes a run emulates of it (``emulated``)."""

    nodes: int
    accelerators_per_node: int
    layout: ParallelismConfig
    groups: tuple
    emulated: tuple
    #: per emulated node, the bytes of the job's node it is part of: it is paced at that node's share
    #: of a shared link (a run of 2 ranks is part of a node of 8)
    emulated_as: tuple = ()
    #: per emulated node, the state the job's node it is part of holds (what it reads in a restore storm)
    emulated_holds: tuple = ()

    @property
    def accelerators(self) -> int:
        return self.nodes * self.accelerators_per_node

    @property
    def checkpoint_bytes(self) -> int:
        return sum(g.nodes * g.node_bytes for g in self.groups)

    @property
    def heaviest(self) -> NodeGroup:
        """The group of the nodes with the most bytes: a checkpoint, or a restore, is over when they are."""
        return max(self.groups, key=lambda g: (g.node_bytes, g.file_bytes))

    def restore_loads(self, readers: str) -> list:
        """(nodes, bytes) each node reads when every node restores at once: with every rank reading
        (``all``), the state it holds (a replica's weights included: under ZeRO-0 every data-parallel
        replica reads its leader's files); with one reader per data-parallel group, the files its
        ranks wrote."""
        if readers != "all":
            return [(g.nodes, g.node_bytes) for g in self.groups]
        return [(g.nodes, max(g.held_bytes, g.node_bytes)) for g in self.groups]

    def restore_bytes(self, run_node: int, readers: str) -> int:
        """The bytes the job's node that run node ``run_node`` is part of reads in a restore storm
        (:meth:`restore_loads`)."""
        written = self.emulated_as[run_node]
        return written if readers != "all" else max(written, self.emulated_holds[run_node])

    @property
    def moving_nodes(self) -> int:
        """Nodes with bytes to move: under ZeRO-0 only the ones holding data-parallel rank 0's state."""
        return sum(g.nodes for g in self.groups if g.node_bytes > 0)


def job_layout(parallelism: ParallelismConfig, nodes: int, per_node: int, where: str = "design.job.nodes"):
    """The layout of ``nodes x per_node`` ranks: the config's (TP, PP, ZeRO, shard group, writers), DP
    what the ranks give."""
    p = parallelism
    world = nodes * per_node
    if world % (p.tp * p.pp):
        raise UserError(f"{where}: {nodes:,} nodes x {per_node} accelerators = {world:,} ranks is not a "
                        f"multiple of tp x pp = {p.tp * p.pp} (parallelism.tp, parallelism.pp)")
    dp = world // (p.tp * p.pp)
    if dp == p.dp:
        return p
    try:
        return replace(p, dp=dp)
    except ConfigError as exc:
        raise ConfigError(f"parallelism.{exc}") from None


def _groups(sizes_by_node) -> tuple:
    """Nodes of the same bytes as one group each; ``sizes_by_node``: per node, its ranks' (written, held)."""
    counts: Counter = Counter()
    for sizes in sizes_by_node:
        written = [w for w, _ in sizes]
        counts[(sum(written), max(written, default=0), len(sizes), sum(h for _, h in sizes))] += 1
    return tuple(NodeGroup(k, b, f, n, h) for (b, f, n, h), k in sorted(counts.items()))


def _rank_bytes(model, layout: ParallelismConfig):
    """(written, held) bytes of a rank of ``layout``: ranks of one pipeline stage that write the same
    parts hold the same bytes, so a job of 100,000 ranks costs a few sizing calls."""
    cache: dict = {}

    def bytes_of(rank: int) -> tuple:
        c = rank_coords(rank, layout.tp, layout.pp, layout.dp)
        key = size_key(layout, c)
        if key not in cache:
            s = rank_size(model, layout, rank)
            cache[key] = (s.total_bytes, s.held_bytes)
        return cache[key]
    return bytes_of


def job_of(cfg, *, nodes: int | None = None, accelerators_per_node: int | None = None,
           emulated_nodes: int = 1) -> Job:
    """The job of ``cfg``: ``nodes`` (else the design's, else the preset's ranks over a node) of
    ``accelerators_per_node`` (else the design's, else 8), and the ``emulated_nodes`` a run of it
    starts (its ``active_ranks`` split evenly)."""
    d = cfg.design
    per_node = accelerators_per_node or (d.accelerators_per_node if d is not None else 8)
    if nodes is None and d is not None:
        nodes = d.nodes
    if nodes is None:  # the config's own layout, a node at a time (the last one may be partial)
        layout = cfg.parallelism
        if accelerators_per_node is None and layout.active_ranks >= layout.world_size:
            per_node = -(-layout.world_size // emulated_nodes)  # the run is the job: its nodes are the job's
        nodes = max(1, -(-layout.world_size // per_node))
    else:
        layout = job_layout(cfg.parallelism, nodes, per_node)
    bytes_of = _rank_bytes(cfg.model, layout)
    world = layout.world_size
    groups = _groups([bytes_of(r) for r in range(n * per_node, min(world, (n + 1) * per_node))]
                     for n in range(nodes))
    emulated, emulated_as, emulated_holds = _emulated(layout, per_node, emulated_nodes, bytes_of)
    return Job(nodes, per_node, layout, groups, emulated, emulated_as, emulated_holds)


def _emulated(layout, per_node: int, emulated_nodes: int, bytes_of) -> tuple:
    ranks = min(layout.active_ranks, layout.world_size)
    if emulated_nodes < 1 or ranks % emulated_nodes:
        raise UserError(f"the run's {ranks} ranks do not split evenly over {emulated_nodes} nodes")
    per = ranks // emulated_nodes
    nodes = [[bytes_of(r) for r in range(n * per, (n + 1) * per)] for n in range(emulated_nodes)]
    emulated = tuple(NodeGroup(1, sum(w for w, _ in s), max((w for w, _ in s), default=0), len(s),
                               sum(h for _, h in s)) for s in nodes)
    world = layout.world_size

    def job_node_bytes(j: int, which: int) -> int:  # which: 0 written, 1 held
        return sum(bytes_of(r)[which] for r in range(j * per_node, min(world, (j + 1) * per_node)))
    part_of = [(n * per) // per_node for n in range(emulated_nodes)]
    return (emulated, tuple(job_node_bytes(j, 0) for j in part_of), tuple(job_node_bytes(j, 1) for j in part_of))


def as_run_job(job: Job, scale: float) -> Job:
    """The run itself as a job: its emulated nodes, their bytes at ``run.scale`` (``simulate --as-run``)."""
    counts: Counter = Counter()
    for g in job.emulated:
        counts[(round(g.node_bytes * scale), round(g.file_bytes * scale), g.files, round(g.held_bytes * scale))] += 1
    groups = tuple(NodeGroup(k, b, f, n, h) for (b, f, n, h), k in sorted(counts.items()))
    return replace(job, nodes=len(job.emulated), accelerators_per_node=max(g.files for g in job.emulated),
                   groups=groups)


def with_nodes(job: Job, cfg, nodes: int) -> Job:
    """The same job on ``nodes`` nodes (a sweep or a flag): its layout stretched to fill them."""
    return job_of(replace(cfg, parallelism=job.layout), nodes=nodes,
                  accelerators_per_node=job.accelerators_per_node, emulated_nodes=len(job.emulated))
