"""A run of the design: what each of its nodes is paced at, before the run's clock.

The launcher resolves the design of a run once (emulator/design/model.py ``resolve`` with
``run_nodes``) and the ranks pace their tiers by this part of it: per node, each file tier's
``emulate`` (the node's share of its job node's devices and of shared links, emulator/design/links.py
``tier_emulation``), the global tier as the node reads it alone (a lost node's restore) and in a
restore storm (every node reading the state it holds), and the link
its peer copies leave through (the compute fabric, else the NIC), and the job's S3 requests each of
its own stands for (emulator/design/requests.py ``run_weights``); per tier, what the whole job node gets (what the report states of
the design); the snapshot each accelerator is paced at. All at the design's rates: the run's clock
(emulator/job/clock.py) divides them by its dilation.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from emulator.design import ladder, requests
from emulator.design.job import job_of
from emulator.design.links import run_peer_bps, tier_emulation


@dataclass(frozen=True)
class NodePacing:
    """One node of a run: ``tiers``: tier -> its ``emulate`` (None: not paced, as fast as the host);
    ``lone_global``: the global tier read by this node alone; ``peer_bps``: the link its peer sends go
    through (None: the design states none); ``peer_fabric``: that link is a compute fabric of its own,
    not the NIC the global tier's traffic goes through; ``requests``: the job's requests to the global
    tier's store each of the node's stands for (None: itself); ``restoring_global``: the global tier
    as this node reads it while every node restores the state it holds at once (a storm)."""

    tiers: dict
    lone_global: object = None
    peer_bps: float | None = None
    peer_fabric: bool = False
    requests: object = None
    restoring_global: object = None


@dataclass(frozen=True)
class Emulation:
    """``nodes``: each node of the run, in node order; ``whole``: tier -> the whole job node's
    ``emulate``; ``snapshot``: the design's snapshot (None: no design, the snapshot is this host's
    own copy, or MLPerf's protocol, which has none)."""

    nodes: tuple
    whole: dict
    snapshot: object = None

    def node(self, node: int) -> NodePacing:
        return self.nodes[node]

    def tier(self, name: str, node: int = 0, *, restoring: bool = False):
        """Tier ``name``'s ``emulate`` on node ``node`` (None: not paced); ``restoring``: the global
        tier's in a restore storm."""
        if restoring and name == "global":
            return self.nodes[node].restoring_global
        return self.nodes[node].tiers.get(name)

    def at_scale(self, factor: float, requests=None) -> "Emulation":
        """The same run at ``factor`` times the scale it was resolved at (run.wall_target's fit,
        emulator/rank/dilation.py): its rates are the design's at any scale, its capacities count the
        run's bytes, x ``factor``; ``requests``: what each of its requests stands for at that scale
        (None: as before)."""
        def capacity(e):
            return e if e is None or not e.capacity_gib else replace(e, capacity_gib=e.capacity_gib * factor)
        nodes = tuple(replace(n, tiers={name: capacity(e) for name, e in n.tiers.items()},
                              lone_global=capacity(n.lone_global), restoring_global=capacity(n.restoring_global),
                              requests=n.requests if requests is None else requests) for n in self.nodes)
        return replace(self, nodes=nodes)

    def paces_anything(self) -> bool:
        """Whether anything of the run is paced (a snapshot, or a tier): else it needs no dilation."""
        return self.snapshot is not None or any(e is not None for e in self.nodes[0].tiers.values())


def emulation_of(cfg, job, snapshot) -> Emulation:
    """The emulation of a run of ``cfg`` on ``job``'s emulated nodes, its snapshot paced at
    ``snapshot`` where the config has a design (MLPerf's protocol: none)."""
    names = [n for n in ladder.file_tiers() if cfg.tiers.entry(n) is not None]
    store = requests.run_store(cfg, job)
    weights = store.weights if store is not None and cfg.design is not None else None
    nodes = tuple(NodePacing({n: tier_emulation(cfg, n, job, run_node=i) for n in names},
                             tier_emulation(cfg, "global", job, run_node=i, alone_read=True),
                             run_peer_bps(cfg, job, i), cfg.design is not None and cfg.design.fabric_bps is not None,
                             weights, tier_emulation(cfg, "global", job, run_node=i, restoring=True))
                  for i in range(len(job.emulated)))
    whole_job = job_of(cfg, emulated_nodes=1)  # the report's design: a job node whole, as one run node sees it
    whole = {n: tier_emulation(cfg, n, whole_job, whole_node=True) for n in names}
    paced_snapshot = snapshot if cfg.design is not None and cfg.checkpoint.protocol != "mlperf" else None
    return Emulation(nodes, whole, paced_snapshot)


def rescaled(design, scale: float, asked: float):
    """The design of a run fitted from run.scale ``asked`` to ``scale`` (run.wall_target): its
    capacities in the run's bytes, and its requests weighed again, each standing for the job's at
    that scale (smaller files have fewer parts, each standing for more)."""
    weights = None
    if design.store is not None and any(n.requests is not None for n in design.emulation.nodes):
        weights = requests.run_weights(design.job, scale, design.store, verify=design.verify)
    return replace(design, emulation=design.emulation.at_scale(scale / asked, requests=weights))
