"""One rank's checkpointer: a small base that runs one pipeline per checkpoint, sync or async,
through one mechanism per concern (the way torchtitan's checkpointer is put together):

- the snapshot into staging buffers (``snapshot.py``),
- the write of every rank's file to the first tier (``first_write.py``), by the run's engine
  (``rank_file.py``: how the ranks write a checkpoint's files, e.g. ``torch_save``),
- the copies between a node's tiers, to its peers' memory and its NVMe (``node_copies.py``),
- the drain to global storage and the global commit (``drain_stage.py``),
- retention after it (``retention.py``),
- what the training loop waits for, sync or async (``inflight.py``),
- the rank's journal of its checkpoints, outside their stall (``journal.py``),

sharing the rank's tiers, collectives, settings (``PipelineConfig``) and books (``context.py``).

Every checkpoint runs the same pipeline; the modes differ only in how long the training loop waits
for it: sync for all of it, async for the snapshot (and the previous checkpoint, as
``async_waits_for`` says; a previous checkpoint not complete when the next one is due is a deadline
miss). Each pipeline has two stages: the write (the ranks' files, receipts, the node's manifest)
and the drain (the node's copies, its drain, the global commit). Drains run in checkpoint order,
and the global commit of N + 1 comes after N's. The write stage's collectives use ``comm``; the
drain stage's ``drain_comm``, a second gloo group when the two stages of consecutive checkpoints
may overlap, so no group ever sees collectives of two pipelines interleaved in different orders on
different ranks. Collectives are called on every rank whatever happened (every tier call before
one is guarded), so one rank's failure makes the checkpoint incomplete instead of hanging the job.

Failures: a first tier full (ENOSPC) sends the file to global storage or skips the checkpoint
(``checkpoint.on_local_full``); global-tier work is retried on transient errors (emulator/checkpoint/
retry.py); a checkpoint that still did not reach the global tier lets training continue or ends the
run with one line (``drain.on_failure``: "auto" fails in sync mode, where the loop was promised a
durable checkpoint). Fault injection (emulator/checkpoint/injection.py) hooks in at named phases.

The stall ends when the checkpoint is complete on the global tier; retention is housekeeping that
runs afterwards, while the loop trains. The next checkpoint's pipeline waits for it on every rank
before anything is written, so a tier never holds more than ``keep`` + 1 checkpoints. With
``local_write`` the next write may start while the previous checkpoint drains; its write stage
first applies the node tiers' retention again (the draining checkpoint is the newest complete one
there, so it is kept), which keeps that bound there too.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import time
from dataclasses import replace

from emulator.checkpoint import node_copies
from emulator.checkpoint.context import PipelineConfig, RankContext
from emulator.checkpoint.drain_stage import Drains
from emulator.checkpoint.first_write import FirstWrite
from emulator.checkpoint.inflight import InFlight
from emulator.checkpoint.injection import NO_FAULTS
from emulator.checkpoint.journal import Journal
from emulator.checkpoint.loop import LoopThread
from emulator.checkpoint.rank_file import DEFAULT as DEFAULT_ENGINE
from emulator.checkpoint.records import CkptRecord, Event, Receipt
from emulator.checkpoint.resume import resume
from emulator.checkpoint.retention import Retention
from emulator.checkpoint.schedule import Schedule
from emulator.checkpoint.snapshot import Snapshotter
from emulator.checkpoint.tally import Tally
from emulator.errors import RunFailed
from emulator.metrics import NULL_METRICS
from tiers.s3_requests import Bill, charge_task_to


class CheckpointFailed(RunFailed):
    """A checkpoint did not reach the global tier and drain.on_failure says stop."""


class Checkpointer:
    """A rank's checkpoints: ``checkpoint`` on the training loop's side, the pipeline on ``loop``.

    ``local``, ``global_``, ``memory``: the rank's tiers (None: not configured); ``peer``: the peer
    tier's replicas; ``schedule``: which tiers take which checkpoint (None: every checkpoint to the
    local tier, if any, and the global one); ``engine``: how the ranks write their files
    (emulator/checkpoint/rank_file.py); ``on_record(record, event)``: the rank's journal, "started"
    and "finished" (emulator/checkpoint/journal.py); ``config`` and ``settings``: the
    :class:`PipelineConfig` (``keep=3`` stands for ``config=PipelineConfig(keep=3)``)."""

    def __init__(self, state, local, global_, comm, *, memory=None, peer=None, schedule: Schedule | None = None,
                 metrics=NULL_METRICS, faults=NO_FAULTS, tally: Tally | None = None, meta: dict | None = None,
                 on_record=None, drain_comm=None, loop: LoopThread | None = None, engine=DEFAULT_ENGINE,
                 config: PipelineConfig | None = None, **settings):
        config = replace(config or PipelineConfig(), **settings)
        self.ctx = RankContext(
            state=state, comm=comm, drain_comm=drain_comm or comm,
            tiers={"memory": memory, "local": local, "global": global_},
            schedule=schedule or Schedule.two_tier(local is not None, config.keep), config=config,
            metrics=metrics, tally=tally or Tally(metrics), faults=faults, meta=dict(meta or {}), peer=peer)
        self.journal = Journal(on_record)
        self.loop = loop or LoopThread()
        self.records: list[CkptRecord] = []
        self.snapshot = Snapshotter(self.ctx, config.snapshot_seconds, engine)
        self.first_write = FirstWrite(self.ctx, engine)
        self.drains = Drains(self.ctx)
        self.retention = Retention(self.ctx)
        self.inflight = InFlight(config.async_waits_for)
        self._tail: asyncio.Task | None = None  # the newest pipeline (on the loop): the next drain waits for it
        self._housekeeping: asyncio.Task | None = None  # retention etc. of the last checkpoint (not stall)
        self._seq = 0
        self._counts: dict = {}  # checkpoints taken per mode (the schedule counts them)

    # ------------------------------------------------------------------ what the rank reads of it

    @property
    def events(self):
        return self.ctx.events

    @property
    def tally(self):
        return self.ctx.tally

    @property
    def memory_tier_peak(self) -> int:
        return self.retention.memory_tier_peak

    def continue_lineage(self, *, first_step: int | None = None, base: list | None = None) -> None:
        """What the manifests say the state holds: the steps from ``first_step`` on, after ``base``
        (the step ranges of the checkpoint it was restored from)."""
        if first_step is not None:
            self.ctx.first_step = first_step
        if base is not None:
            self.ctx.lineage_base = base

    def lineage(self, step: int) -> list:
        """The step ranges whose mutations the state holds at ``step`` (as a manifest says them)."""
        return self.ctx.manifest_meta(step)["lineage"]

    def forget_node_steps(self) -> None:
        """The node's tiers were lost: none of the steps this run completed there is left."""
        self.ctx.node_steps.clear()

    def drain_in_flight_since(self) -> float | None:
        return self.drains.in_flight_since()

    # ------------------------------------------------------------------ training-loop side

    def checkpoint(self, step: int, mode: str) -> CkptRecord:
        """Take checkpoint ``step``; returns when the training loop may continue."""
        ctx = self.ctx
        self._seq += 1
        self._counts[mode] = count = self._counts.get(mode, 0) + 1
        rec = CkptRecord(step, mode, ctx.comm.rank, ctx.comm.node, time.time(), seq=self._seq,
                         due=list(ctx.schedule.due(count)))
        self.journal.started(rec)  # before its writes and the stall's clock: the emulator's, not the job's
        start = rec.start = time.time()
        rec.missed = self.inflight.pending()
        self.inflight.wait_for_previous()
        ctx.faults.checkpoint_started(rec.seq)
        rec.wait_s = time.time() - start
        self.snapshot.take(rec)
        ctx.faults.hit("staging", rec.seq)
        written = concurrent.futures.Future()
        self.inflight.started(mode, self.loop.submit(self._pipeline(rec, written)), written)
        rec.stall_s = time.time() - start
        self.records.append(rec)
        ctx.events.append(Event(ctx.comm.rank, "stall", start, start + rec.stall_s))
        self._observe_stall(rec)
        return rec

    def _observe_stall(self, rec: CkptRecord) -> None:
        m, ctx = self.ctx.metrics, self.ctx
        full = m.clock.record(rec)  # the metrics serve full-size figures
        m.observe_stall(rec.mode, full["stall_s"])
        m.add_stall_seconds(rec.mode, full["stall_s"])
        # the snapshot stages for the tier the file goes to first: the local one, or global without one
        name = "local" if ctx.tier("local") is not None else "global"
        backend = ctx.tier(name).backend
        m.observe_phase("snapshot", name, full["snapshot_s"], backend=backend)
        if rec.d2h_s > 0:
            m.observe_phase("d2h", name, full["d2h_s"], backend=backend)
        if rec.missed:
            m.deadline_missed(rec.mode)

    def in_flight(self) -> bool:
        """Whether an async checkpoint's write, drain or commit is still running on this rank."""
        return self.inflight.any()

    def finish(self) -> float:
        """Wait for the checkpoint in flight (end of a mode); returns the seconds waited."""
        t = time.time()
        self.inflight.finish()
        self.loop.run(self._settle())
        return time.time() - t

    def resume(self) -> list:
        """Drain checkpoints complete locally but not globally (collective; before training)."""
        return self.loop.run(resume(self.ctx, self.drains, self.retention))

    def close(self) -> None:
        try:
            self.finish()
        finally:
            try:
                self.journal.close()
            finally:
                self.loop.close()

    # ------------------------------------------------------------------ background pipeline

    async def _pipeline(self, rec: CkptRecord, written: concurrent.futures.Future) -> CkptRecord:
        previous, self._tail = self._tail, asyncio.current_task()
        bill = charge_task_to(Bill("checkpoint", self.ctx.metrics.count_s3_request))  # this task's S3 requests
        try:
            receipt, receipts = await self._write_stage(rec)
        finally:
            written.set_result(None)  # the loop may stage the next checkpoint
        if previous is not None:
            t = time.time()
            await asyncio.wait({previous})  # drains in checkpoint order; its outcome is the loop's
            rec.queue_s = time.time() - t
        # the previous checkpoint's housekeeping (global retention), before this drain adds a step
        await self._settle()
        await self._drain_stage(rec, receipts, bill)
        # the checkpoint is done: a sync loop may go on while old ones are deleted
        self._housekeeping = asyncio.get_running_loop().create_task(self.retention.after(rec, receipt.key, bill))
        if rec.global_due and not rec.global_complete and not rec.skipped and \
                self.ctx.config.stops_on_failure(rec.mode):
            raise CheckpointFailed(
                f"checkpoint at step {rec.step} ({rec.mode}) did not reach the global tier: {rec.error} "
                f"(drain.on_failure={self.ctx.config.on_failure}; set drain.on_failure=continue to keep training)")
        return rec

    async def _write_stage(self, rec: CkptRecord) -> tuple[Receipt, list[Receipt]]:
        # the previous checkpoint's housekeeping, on every rank (node leaders delete), before
        # any rank writes: a tier never holds more than keep + 1 checkpoints
        await self._settle()
        if self.ctx.config.async_waits_for == "local_write" and self.retention.node_tiers_over():
            # the last retention ran before the previous checkpoint was complete here; the one
            # draining now is the newest complete one, so this keeps it
            await self.retention.node_tiers()
        return await self.first_write.run(rec)

    async def _drain_stage(self, rec: CkptRecord, receipts: list[Receipt], bill: Bill) -> None:
        """The node's copies and drain, then the global commit; on ``drain_comm``."""
        ctx = self.ctx
        errors = [r.error for r in receipts if r.error]
        first = Schedule.first(rec.due)
        if first != "global":
            rec.local_complete = (await ctx.from_node_leader(rec, first))["complete"]
        if "peer" in rec.due and ctx.peer is not None:
            await node_copies.replicate(ctx, rec, receipts, written=not errors and first == "memory")
        if first == "memory" and "local" in rec.due and ctx.tier("local") is not None:
            await node_copies.persist(ctx, self.drains, rec, receipts, written=not errors)
        if rec.global_due:
            if first != "global":
                source = "local" if rec.tiers.get("local", {}).get("complete") else first
                errors += await self.drains.node(rec, receipts, written=not errors, source=source, where=first)
            rec.global_complete, rec.error = await self.drains.commit_global(
                rec.step, rec.mode, [e for r in receipts for e in r.entries], errors, seq=rec.seq)
            ctx.tier_done(rec, "global", rec.global_complete, rec.drain_s,
                          rec.paced.get("drain") if first != "global" else rec.paced.get("local_write"))
        else:
            rec.error = " ".join("; ".join(errors).split())[:500]
        now = time.time()
        rec.complete_s = now - rec.start
        if rec.global_complete:
            rec.durable_at, rec.lag_s = now, now - (rec.start + rec.wait_s)
        await ctx.observe_lags(rec)
        rec.requests = bill.counts()
        self.journal.finished(rec)  # written beside the loop: neither this stall nor the next waits for it

    async def _settle(self) -> None:
        """Wait for the newest housekeeping (the write and the drain stage may both wait for it)."""
        if self._housekeeping is not None:
            await self._housekeeping  # never raises: every step is guarded
