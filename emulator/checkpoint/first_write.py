"""The write to the first tier: every rank's file into the nearest file tier the checkpoint is due on
(host memory, the NVMe, or global storage directly), through the run's engine
(emulator/checkpoint/rank_file.py); every rank's receipt; the node's manifest there.

A rank's write is timed from the moment its node's last rank was ready (one clock per node). A
first tier that is full (ENOSPC) sends the file to global storage or skips the checkpoint
(``on_local_full``); a direct write to global storage is retried on transient errors.
"""
from __future__ import annotations

import asyncio
import time

from emulator.checkpoint import layout
from emulator.checkpoint.records import CkptRecord, Event, Receipt
from emulator.checkpoint.retry import RetryPolicy, describe_error, is_no_space, retrying
from emulator.checkpoint.schedule import Schedule
from tiers import paced
from tiers.emulated import anchored_at, counted_as, is_paced, settle_requests


class FirstWrite:
    def __init__(self, ctx, engine):
        self.ctx, self.engine = ctx, engine
        tp_pp = ctx.meta.get("tp", 1) * ctx.meta.get("pp", 1)
        self.mp_rank = ctx.comm.rank % tp_pp

    async def run(self, rec: CkptRecord) -> tuple[Receipt, list[Receipt]]:
        """This rank's file, every rank's receipt, the node's manifest on the first tier (node leaders)."""
        ctx = self.ctx
        begun = await self._node_barrier()
        with counted_as("local_write"), anchored_at(begun):
            receipt = await self._write_rank_file(rec, begun)
        receipts = await asyncio.to_thread(ctx.comm.all_gather, receipt)
        rec.skipped = any(r.skipped for r in receipts)
        errors = [r.error for r in receipts if r.error]
        if ctx.comm.rank == 0 and not errors:  # MLPerf style: all bytes / slowest rank, at full size
            slowest = max(r.full_s for r in receipts)
            ctx.metrics.set_throughput("save", rec.mode, sum(r.full_bytes for r in receipts) / max(slowest, 1e-9))
        mine = [r for r in receipts if r.node == ctx.comm.node]
        first = Schedule.first(rec.due)
        if first != "global" and ctx.comm.is_node_leader and not errors and all(r.where == first for r in mine):
            rec.local_complete = await ctx.guarded(ctx.write_manifest(
                ctx.tier(first), first, rec.step, rec.mode, [e for r in mine for e in r.node_entries],
                ctx.node_meta(rec)))
            if rec.local_complete:
                ctx.node_steps.setdefault(first, set()).add(rec.step)
        if first != "global" and ctx.comm.is_node_leader:
            ctx.tier_done(rec, first, rec.local_complete, rec.local_write_s, rec.paced.get("local_write"))
        return receipt, receipts

    async def _node_barrier(self) -> float:
        """A barrier that also says when this node's write phase began: when its last rank arrived
        (one clock per node). A rank the host schedules late starts after that, and its lateness is
        the host's, while the node's device is busy with the others' bytes from that moment on."""
        comm = self.ctx.comm
        arrived = await asyncio.to_thread(comm.all_gather, (comm.node, time.time()))
        return max(t for node, t in arrived if node == comm.node)

    async def _write_rank_file(self, rec: CkptRecord, begun: float) -> Receipt:
        """This rank's file, to the first tier (or global: a full one); its write is timed from
        ``begun``, when every rank of its node was ready to write."""
        ctx = self.ctx
        comm = ctx.comm
        key = layout.rank_file_key(rec.step, comm.rank, ctx.state.coords.dp, self.mp_rank)
        receipt = Receipt(comm.rank, comm.node, key)
        t0 = min(begun, time.time())
        await self._write_file(receipt, rec)
        if receipt.where == "global":  # straight to an object store: the job's write ends with its last request
            await asyncio.to_thread(settle_requests, ctx.tier("global"))
        t1 = time.time()
        receipt.write_s = rec.local_write_s = t1 - t0
        if receipt.where and is_paced(ctx.tier(receipt.where)):
            rec.paced["local_write"] = paced.seconds("local_write", t0, t1)
        rec.file_bytes, rec.written_to, rec.local_full = receipt.total_bytes, receipt.where, receipt.local_full
        ctx.events.append(Event(comm.rank, "local_write", t0, t1))
        clock = ctx.metrics.clock  # the metrics serve full-size figures
        receipt.full_s = clock.phase(receipt.write_s, rec.paced.get("local_write"))
        receipt.full_bytes = clock.bytes(receipt.total_bytes)
        if receipt.where:
            tier = ctx.tier(receipt.where)
            ctx.metrics.observe_phase("local_write", receipt.where, receipt.full_s, backend=tier.backend)
            ctx.metrics.add_bytes("write", receipt.where, receipt.full_bytes, backend=tier.backend)
        return receipt

    async def _write_file(self, receipt: Receipt, rec: CkptRecord) -> None:
        ctx = self.ctx
        first = Schedule.first(rec.due)
        if first == "global":
            await self._save_global(receipt, rec)
            return
        try:
            await asyncio.to_thread(self._save, ctx.tier(first), receipt, rec)
            receipt.where = first
        except Exception as exc:  # noqa: BLE001 - sinks abort on error: nothing half-written is visible
            if not is_no_space(exc) or not self.engine.falls_back:
                receipt.error = f"{first} write failed: {describe_error(exc)}"
                return
            receipt.local_full = True
            ctx.tally.count("local_full")
            if ctx.config.on_local_full == "global":
                await self._save_global(receipt, rec)
            else:
                receipt.skipped = True
                receipt.error = f"skipped: {first} tier full (ENOSPC, checkpoint.on_local_full=skip)"

    def _save(self, tier, receipt: Receipt, rec: CkptRecord) -> None:
        self.engine.write(self.ctx.state, tier, receipt, rec,
                          after_write=lambda: self.ctx.faults.hit("local_write", rec.seq))

    async def _save_global(self, receipt: Receipt, rec: CkptRecord) -> None:
        """Write this rank's file straight to the global tier, retrying transient errors."""
        ctx = self.ctx

        def on_retry(exc):
            rec.drain_retries += 1
            ctx.tally.count("drain_retry")
        policy = ctx.config.policy if self.engine.falls_back else RetryPolicy(retries=0)  # collective: once
        try:
            await retrying(policy, f"write of {receipt.key} to the global tier",
                           lambda: asyncio.to_thread(self._save, ctx.tier("global"), receipt, rec), on_retry)
            receipt.where = "global"
        except Exception as exc:  # noqa: BLE001 - the checkpoint becomes incomplete, nothing torn
            receipt.error = f"global write failed: {describe_error(exc)}"
