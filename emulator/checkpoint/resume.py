"""Resume: before training, drain checkpoints an earlier run left complete on every node's local
tier but not on the global tier (a crash between the local manifests and the global one), of those
the schedule sends to global (a node manifest's ``due``).

Collective, like the pipeline: node leaders read their local tier, rank 0 the
global one; every rank then walks the same pending steps (newest ``keep``),
each node drains its files, and the drain stage's ``commit_global`` writes the
global manifest (with the original checkpoint's mode and meta) only if every
node's drain succeeded and the local manifests cover every rank.
"""
from __future__ import annotations

import asyncio
import time

from emulator.checkpoint import layout
from emulator.checkpoint.layout import META_KEYS
from emulator.checkpoint.records import CkptRecord, Event
from tiers.emulated import counted_as


def compatible(ctx, manifest) -> bool:
    """A checkpoint of this run's layout (world size, preset, scale, parallelism)."""
    return manifest.world == ctx.comm.world_size and \
        all(manifest.meta.get(k) == ctx.meta.get(k) for k in META_KEYS if k in ctx.meta)


async def pending_local(ctx) -> dict:
    """This node's newest ``keep`` intact local checkpoints of this layout: {step: manifest}."""
    out, local = {}, ctx.tier("local")
    try:
        complete, _ = await layout.valid_steps(local)
        for step in complete[-ctx.config.keep:]:
            m = await layout.read_manifest(local, step)
            # a checkpoint the schedule never sent to global (tiers.global.interval_steps) stays local
            if m is not None and compatible(ctx, m) and "global" in m.meta.get("due", ("global",)):
                out[step] = m
    except Exception:  # noqa: BLE001 - an unreadable local tier has nothing to resume
        ctx.tally.count("tier_error")
    return out


async def _views(ctx) -> tuple[dict | None, list | None, list]:
    """(this node's pending local checkpoints, the global tier's complete steps, every leader's view)."""
    local = await pending_local(ctx) if ctx.comm.is_node_leader else None
    glob = None
    if ctx.comm.rank == 0:
        try:
            glob = (await layout.valid_steps(ctx.tier("global")))[0]
        except Exception:  # noqa: BLE001 - global unreachable now: the drains will come later
            ctx.tally.count("tier_error")
    views = await asyncio.to_thread(ctx.comm.all_gather, (local, glob))
    return local, views[0][1], [v for v, _ in views if v is not None]


async def resume(ctx, drains, retention) -> list[CkptRecord]:
    """Drain (``drains``: emulator/checkpoint/drain_stage.py) and commit every pending step of the rank
    (``ctx``: emulator/checkpoint/context.py), then apply ``retention``; one record per step tried."""
    if ctx.tier("local") is None:
        return []
    local, glob, leaders = await _views(ctx)
    if glob is None or not leaders:
        return []
    common = set.intersection(*(set(v) for v in leaders))
    pending = sorted(s for s in common if s > max(glob, default=-1))[-ctx.config.keep:]
    records = [await _resume_step(ctx, drains, step, local) for step in pending]
    await retention.apply()
    return records


async def _resume_step(ctx, drains, step: int, local: dict | None) -> CkptRecord:
    comm = ctx.comm
    rec = CkptRecord(step, "resume", comm.rank, comm.node, time.time(), local_complete=True)
    drain, files = None, None
    if local is not None:
        files = local[step].files
        with counted_as("drain"):  # the drain's requests, not the listing of what is pending
            drain = await drains.drainer("local", "global").drain(files)
        ctx.events.append(Event(comm.rank, "drain", drain.start, drain.end))
    gathered = await asyncio.to_thread(comm.all_gather, (drain, files))
    entries = [e for _, fs in gathered if fs for e in fs]
    errors = [f"node {d.node} drain: {d.error}" for d, _ in gathered if d is not None and not d.ok]
    if sorted(e.rank for e in entries) != list(range(comm.world_size)):
        errors.append("the nodes' local manifests do not cover every rank")
    m = local[step] if local is not None else None
    rec.global_complete, rec.error = await drains.commit_global(
        step, m.mode if m else "", entries, errors, meta=m.meta if m else None)
    mine = next((d for d, _ in gathered if d is not None and d.node == comm.node), None)
    rec.drain_s = mine.seconds if mine else 0.0
    rec.complete_s = time.time() - rec.start
    return rec
