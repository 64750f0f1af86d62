"""After a checkpoint: what the node's tiers held at most, an incomplete copy freed at once, each
tier's retention (each keeps its own count: the schedule's), and injected corruption.

Retention is housekeeping, not stall: it runs while the loop trains, and the next checkpoint's
pipeline waits for it before anything is written, so a tier never holds more than keep + 1."""
from __future__ import annotations

import asyncio
import os

from emulator.checkpoint import layout
from emulator.checkpoint.records import CkptRecord
from emulator.design import ladder
from tiers.base import unwrap
from tiers.s3_requests import Bill


def folder_bytes(tier) -> int:
    """Bytes of the files under a directory tier's folder (0 for a tier without one)."""
    root = getattr(unwrap(tier), "root", None)
    if root is None:
        return 0
    total = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            try:
                total += os.stat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass  # deleted while we looked
    return total


class Retention:
    def __init__(self, ctx):
        self.ctx = ctx
        #: node leaders: the most bytes the node's memory and peer tiers held at once (host memory)
        self.memory_tier_peak = 0
        #: one node retention at a time: one that finds a step's folder already emptied by another
        #: would return while that folder is still there, and the next write would find keep + 1 others
        self._retaining = asyncio.Lock()

    async def after(self, rec: CkptRecord, key: str, bill: Bill) -> None:
        """After a checkpoint: free an incomplete node copy, apply retention, inject corruption; its
        S3 requests are the checkpoint's too (``bill``)."""
        ctx = self.ctx
        memory = ctx.tier("memory")
        if ctx.comm.is_node_leader and memory is not None:  # before retention: the most held
            held = [memory] + ([ctx.peer.store] if ctx.peer is not None else [])
            self.memory_tier_peak = max(self.memory_tier_peak, sum(map(folder_bytes, held)))
        if ctx.comm.is_node_leader:
            for name in ladder.node_file_tiers():
                if name in rec.due and ctx.tier(name) is not None and not rec.tiers.get(name, {}).get("complete"):
                    # this node's copy there can never become complete: free the space now
                    await ctx.guarded(layout.delete_checkpoint(ctx.tier(name), rec.step))
        await self.apply()
        await ctx.guarded(ctx.faults.after_checkpoint(
            rec.seq, rec.step, key, {n: ctx.tier(n) for n in ladder.file_tiers()}))
        rec.requests = bill.counts()

    async def apply(self) -> None:
        """Each tier's retention: node leaders the node's tiers, rank 0 global storage."""
        ctx = self.ctx
        if ctx.comm.is_node_leader:
            await self.node_tiers()
        if ctx.comm.rank == 0:
            await ctx.guarded(layout.apply_retention(ctx.tier("global"), ctx.schedule.keep["global"]))

    def node_tiers_over(self) -> bool:
        """Whether a node tier holds more complete steps of this run than it keeps (a retention ran
        before the previous checkpoint was complete there)."""
        return any(len(steps) > self.ctx.schedule.keep[name] for name, steps in self.ctx.node_steps.items())

    async def node_tiers(self) -> None:
        """Node leaders: retention on the node's tiers (each keeps its own count), forgetting the
        steps it deleted. With peers, memory also keeps the steps of the copies this node holds
        for its peers: a lost node gets its copy of such a step back, and every rank must restore
        the same step."""
        ctx = self.ctx
        async with self._retaining:
            for name in ladder.node_file_tiers():
                tier = ctx.tier(name)
                if tier is None:
                    continue

                async def retain(name=name, tier=tier):
                    protect = await self._held_peer_steps() if name == "memory" else set()
                    deleted = await layout.apply_retention(tier, ctx.schedule.keep[name], protect=protect)
                    ctx.node_steps.setdefault(name, set()).difference_update(deleted)
                await ctx.guarded(retain())

    async def _held_peer_steps(self) -> set[int]:
        """The steps of the copies this node holds for its peers (none without a peer tier)."""
        if self.ctx.peer is None:
            return set()
        return set((await layout.valid_steps(self.ctx.peer.store))[0])
