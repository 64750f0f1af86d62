"""The copies a node makes between the first write and the drain: its memory copy sent to its peers'
memory (the peer tier, emulator/checkpoint/replicas.py), and copied from memory to its NVMe (verified,
then the node's manifest there). Every rank learns its node's outcome on each."""
from __future__ import annotations

import time

from emulator.checkpoint.records import CkptRecord, Receipt
from tiers import paced
from tiers.emulated import anchored_at, counted_as


async def replicate(ctx, rec: CkptRecord, receipts: list[Receipt], *, written: bool) -> None:
    """Every rank sends its memory copy to the same local rank of its node's holders; every rank
    learns whether its node's copies arrived whole at every holder (collective)."""
    peer = ctx.peer
    mine = next(r for r in receipts if r.rank == ctx.comm.rank)
    entry = mine.entry if written and rec.local_complete and mine.where == "memory" else None
    t0 = time.time()
    with counted_as("replicate"):
        ok, seconds, stream_s, spans = await peer.replicate(ctx.drain_comm, ctx.tier("memory"), rec.step, entry,
                                                             ctx.manifest_meta(rec.step))
    ctx.tier_done(rec, "peer", ok, seconds, paced.covered(spans, t0, time.time())
                  if peer.transport.pacer is not None else None, stream_s=stream_s)
    if ok and ctx.comm.is_node_leader:
        full_s = ctx.metrics.clock.phase(seconds, rec.tiers["peer"]["paced"])
        ctx.metrics.observe_phase("replicate", "peer", full_s, backend="gloo")
        ctx.metrics.checkpoint_complete("peer", rec.step, time.time())


async def persist(ctx, drains, rec: CkptRecord, receipts: list[Receipt], *, written: bool) -> None:
    """Node leaders copy the node's files from memory to the local tier (``drains``' copier, verified),
    then write its manifest there; every rank learns its node's outcome."""
    comm, ok, seconds, paced_s = ctx.drain_comm, False, 0.0, None
    local = ctx.tier("local")
    if comm.is_node_leader and written and rec.local_complete:
        files = [e for r in receipts if r.node == comm.node and r.where == "memory" for e in r.node_entries]
        drainer = drains.drainer("memory", "local")
        with counted_as("persist"), anchored_at(time.time()):
            copy = await drainer.drain(files)
        paced_s = drainer.paced_seconds("persist", copy, [f.size for f in files])
        ok = copy.ok and await ctx.guarded(
            ctx.write_manifest(local, "local", rec.step, rec.mode, files, ctx.node_meta(rec)))
        seconds = copy.seconds
        if ok:
            ctx.node_steps.setdefault("local", set()).add(rec.step)
            ctx.metrics.observe_phase("persist", "local", ctx.metrics.clock.phase(seconds, paced_s),
                                      backend=local.backend)
    if comm.is_node_leader:
        ctx.tier_done(rec, "local", ok, seconds, paced_s)
    await ctx.from_node_leader(rec, "local")
