"""The peer tier as the pipeline uses it: a node's checkpoint copied into other nodes' memory.

``PeerReplicas`` wraps the transport (emulator/checkpoint/peer.py) with what a
checkpoint needs around it. ``replicate`` is collective: every rank sends its
file from the memory tier to the same local rank of each holder node, every rank
learns which nodes' copies arrived whole at every holder, and each holder's
leader indexes what its node received in its store (one manifest per step
listing every held file, which ``fetch_back`` reads). ``fetch_back`` is the
replacement's side after a node loss: its ranks get their files back from the
first surviving holder into their memory tier, and its leader writes the memory
tier's manifest there, so a restore reads them like any memory checkpoint.

A holder's store is a folder beside its memory tier (``<memory path>-peers``):
it is host memory too, lost with the node.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace

from emulator.checkpoint import layout
from emulator.checkpoint.peer import PeerTransport
from emulator.checkpoint.placement import PeerLayout
from emulator.job.rank_tiers import memory_tier_config
from tiers import make_tier, paced
from tiers.directory import DirOptions
from tiers.emulated import counted_as


def store_config(memory_cfg):
    """The holder's store: the memory tier's folder with ``-peers`` appended (host memory too),
    recycling its files' pages as the memory tier does (``memory_cfg`` as the run builds it)."""
    path = memory_cfg.options.path.rstrip("/") + "-peers"
    return replace(memory_cfg, options=DirOptions(path, recycle=memory_cfg.options.recycle), emulate=None,
                   interval_steps=None, keep=None)


@dataclass
class Fetched:
    """One rank's part of a fetch after a node loss: every rank's errors, its seconds, of them the
    streams' (emulator/checkpoint/peer.py ``PeerResult.stream_s``), and the time any node's paced
    sends and writes of the fetch covered (the NIC's time: the rest is this host's, once)."""

    errors: list = field(default_factory=list)
    seconds: float = 0.0
    stream_s: float = 0.0
    paced_s: float = 0.0


@dataclass
class PeerReplicas:
    layout: PeerLayout
    transport: PeerTransport
    store: object  # Tier: the copies this node holds for others
    keep: int
    ranks_per_node: int
    #: (seconds, arrived) of the last replication on this rank
    last: dict = field(default_factory=dict)

    @classmethod
    def build(cls, cfg, keep: int, comm, group, scope, *, pacer=None) -> "PeerReplicas":
        """The peer tier of ``cfg`` (its placement, the memory tier beside whose folder it keeps its
        copies), keeping ``keep`` copies of each node it holds (its rung's, in the run's design)."""
        peer = cfg.tiers.peer
        layout_ = PeerLayout(comm.nodes, peer.replicas, peer.placement, peer.jump)
        transport = PeerTransport(group, ranks_per_node=comm.local_world_size, pacer=pacer)
        store = make_tier(store_config(memory_tier_config(cfg)), scope=scope)
        return cls(layout_, transport, store, keep, comm.local_world_size)

    def holders(self, node: int) -> list[int]:
        return self.layout.holders(node)

    async def replicate(self, comm, memory, step: int, entry, meta: dict) -> tuple[bool, float, float, list]:
        """Collective (``comm`` is the pipeline's group, the transport has its own): send this rank's
        file (``entry``; None: it has none to send) to its holders, who index it with the
        checkpoint's ``meta`` (its layout and lineage, the same on every rank). Returns (this node's
        copies arrived whole at every holder, seconds, of them the streams' seconds, and the paced
        sends of this node's ranks and its sources': a stream waits on its node's NIC behind the
        node's other ranks, and on its source's sends, paced in other processes)."""
        t0 = time.time()
        result = await asyncio.to_thread(self.transport.send_replicas, self.layout,
                                         [entry] if entry is not None else [], memory, self.store)
        got = [(r.node, r.key, r.size, r.crc32c) for r in result.received]
        mine = paced.spans("replicate", t0, time.time())
        everyone = await asyncio.to_thread(comm.all_gather, (comm.node, comm.local_rank, got, mine))
        if comm.is_node_leader:
            await self._index(step, comm, everyone, meta)
        arrived = self._arrived(everyone, comm.node)
        mine_and_sources = {comm.node, *self.layout.sources(comm.node)}  # my NIC's senders, and my sources'
        spans = [s for node, *_, theirs in everyone if node in mine_and_sources for s in theirs]
        return arrived and entry is not None and result.ok, time.time() - t0, result.stream_s, spans

    def _arrived(self, everyone: list, node: int) -> bool:
        """Whether every holder of ``node`` received a file from each of its ranks."""
        for holder in self.holders(node):
            files = sum(1 for h, _, got, _ in everyone if h == holder for src, *_ in got if src == node)
            if files != self.ranks_per_node:
                return False
        return True

    async def _index(self, step: int, comm, everyone: list, meta: dict) -> None:
        """Leader of a holder: the manifest of every file its node received for ``step``."""
        entries = [layout.FileEntry(key, src * self.ranks_per_node + local, size, crc)
                   for h, local, got, _ in everyone if h == comm.node for src, key, size, crc in got]
        if not entries:
            return
        manifest = layout.Manifest(step=step, files=sorted(entries, key=lambda e: e.rank), tier="peer",
                                   mode="peer", world=comm.world_size, meta=meta)
        await layout.write_manifest(self.store, manifest)
        await layout.apply_retention(self.store, self.keep)

    async def fetch_back(self, comm, lost: tuple, memory) -> Fetched:
        """Collective after a node loss: each lost node's ranks get their newest held files back
        from a surviving holder into ``memory``; their leader writes the memory manifest, with the
        meta the copy was indexed with (a restarted job's own lineage no longer reaches back)."""
        with counted_as("fetch"):  # the memory tier's waits for what it fetches (to_thread copies it)
            return await self._fetch_back(comm, lost, memory)

    async def _fetch_back(self, comm, lost: tuple, memory) -> Fetched:
        t0 = time.time()
        held, steps = await self._held(comm, lost)
        result = await asyncio.to_thread(self.transport.fetch_back, self.layout, lost, held, self.store, memory)
        got = [(comm.rank, r.key, r.size, r.crc32c) for r in result.received]
        mine = paced.spans("fetch", t0, time.time())
        everyone = await asyncio.to_thread(comm.all_gather, (comm.node, steps, got, mine))
        if comm.node in lost and comm.is_node_leader:
            entries = [layout.FileEntry(key, rank, size, crc) for node, _, got, _ in everyone if node == comm.node
                       for rank, key, size, crc in got]
            step, meta = next((s[comm.node] for _, s, _, _ in everyone if comm.node in s), (None, None))
            if step is not None and len(entries) == self.ranks_per_node:
                manifest = layout.Manifest(step=step, files=sorted(entries, key=lambda e: e.rank), tier="memory",
                                           mode="peer", world=comm.world_size, meta=meta)
                await layout.write_manifest(memory, manifest)
        spans = [span for *_, theirs in everyone for span in theirs]  # the holders' sends, the replacements' writes
        return Fetched(result.errors, time.time() - t0, result.stream_s, paced.covered(spans, t0, time.time()))

    async def _held(self, comm, lost: tuple) -> tuple[dict, dict]:
        """On a holder's rank: lost node -> its same-local-rank file of the newest step held whole,
        and lost node -> (that step, the meta it was indexed with)."""
        held, steps = {}, {}
        for node in lost:
            if self.layout.server(node, lost) != comm.node:
                continue
            rank = node * self.ranks_per_node + comm.local_rank
            for step in sorted((await layout.list_steps(self.store))[0], reverse=True):
                manifest = await layout.read_manifest(self.store, step)
                mine = [e for e in manifest.files if e.rank // self.ranks_per_node == node] if manifest else []
                if len(mine) == self.ranks_per_node:
                    held[node], steps[node] = [e for e in mine if e.rank == rank], (step, manifest.meta)
                    break
        return held, steps
