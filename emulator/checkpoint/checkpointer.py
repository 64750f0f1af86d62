"""One rank's checkpointer: snapshot, local write, drain, manifests, in sync or async mode.

Every checkpoint runs the same pipeline; the modes differ only in how long
the training loop waits for it:

- sync: the loop waits for the whole pipeline (snapshot, ``torch.save`` to
  the local tier, the node's drain to the global tier, the global manifest).
- async: the loop waits only for the snapshot into reusable staging buffers
  (on a GPU, the device-to-host copy: ``d2h`` in the stall breakdown);
  the rest runs on a background event-loop thread. Before staging the next
  checkpoint the loop waits for the previous one (``async_waits_for``):
  ``complete``, its whole pipeline (the drain must beat the next checkpoint),
  or ``local_write``, only its file written (the staging buffers are free
  then) and the one before it complete: the previous drain keeps running,
  sharing the local device with the next write. Either wait is stall; a
  previous checkpoint not complete when the next one is due is a deadline miss.

Each checkpoint's pipeline has two stages: the write (``torch.save`` to the
local tier, receipts, the node's local manifest) and the drain (the node's
drain, its results, the global commit). Drains run in checkpoint order, and
the global commit of N + 1 comes after N's. The write stage's collectives use
``comm``; the drain stage's ``drain_comm``, a second gloo group when the two
stages of consecutive checkpoints may overlap, so no group ever sees
collectives of two pipelines interleaved in different orders on different ranks.

Ranks coordinate through a dedicated gloo group: receipts are gathered after
the local write (each node leader writes its node's local manifest, then
drains the node's files), drain results are gathered, and global rank 0
writes the global manifest only if every file of every rank arrived
(``commit_global``, shared with ``emulator.resume``). Collectives are called
on every rank whatever happened (every tier call before one is guarded), so
one rank's failure makes the checkpoint incomplete instead of hanging the job.

Failures, and why they end as they do:

- A local write that fails with ENOSPC goes straight to the global tier
  (``checkpoint.on_local_full: global``) or skips the checkpoint (``skip``);
  either way the node's local copy is incomplete and its leftovers are
  deleted at once, since a full disk is where they hurt.
- Global-tier work (drained files, direct writes, the global manifest) is
  retried on transient errors (``emulator.retry``). A checkpoint that still
  did not reach the global tier either lets training continue or ends the run
  with one line (``drain.on_failure``; "auto" fails in sync mode, where the
  loop was promised a durable checkpoint, and continues in async mode).
- Fault injection (``emulator.faults``) hooks in at the named phases only.

The stall ends when the checkpoint is complete on the global tier; deleting
old checkpoints (retention) is housekeeping that runs afterwards, while the
loop trains. The next checkpoint's pipeline waits for it on every rank (a
barrier) before anything is written, so a tier never holds more than
``keep`` + 1 checkpoints. With ``local_write`` the next write may start while
the previous checkpoint drains; its write stage first applies the local
retention again (the draining checkpoint is the newest complete one locally,
so it is kept), which keeps that bound on the local tier too.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import os
import time
from collections import deque
from dataclasses import dataclass, field

import torch
import torch.utils.serialization as serialization

from emulator.checkpoint import layout
from emulator.checkpoint.drainer import DEFAULT_VERIFY, Drainer, DrainResult
from emulator.checkpoint.injection import NO_FAULTS
from emulator.checkpoint.integrity import DEFAULT_READ_TIMEOUT_S, ChecksumSink
from emulator.checkpoint.loop import LoopThread
from emulator.checkpoint.records import CkptRecord, Event, Receipt
from emulator.checkpoint.resume import resume
from emulator.checkpoint.retry import RetryPolicy, describe_error, is_no_space, retrying
from emulator.checkpoint.schedule import Schedule
from emulator.checkpoint.tally import Tally
from emulator.errors import RunFailed
from emulator.metrics import NULL_METRICS
from tiers import paced
from tiers.base import unwrap
from tiers.emulated import anchored_at, counted_as, is_paced
from tiers.s3_requests import Bill, charge_task_to


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


class _Counter:
    """A sink that counts what torch.save writes (it hands over views of the tensors: no copy)."""

    def __init__(self):
        self.n = 0

    def write(self, data) -> int:
        n = memoryview(data).nbytes
        self.n += n
        return n

    def flush(self) -> None:
        pass


def serialized_size(state, step: int = 0) -> int:
    """The bytes of the rank's file: its tensors plus torch.save's structure (a zip entry and a pickle
    record a tensor), counted without writing or copying the tensors."""
    counter, config = _Counter(), serialization.config.save
    crc, config.compute_crc32 = config.compute_crc32, False  # the zip CRC reads every byte, changes none
    try:
        torch.save(state.payload(step), counter)
    finally:
        config.compute_crc32 = crc
    return counter.n


def design_bytes_weight(state, scale: float) -> float:
    """The design's bytes (of the rank, at ``scale``) per byte of the rank's file: its tiers book each
    byte moved at this weight, so the file takes the time the design gives the rank's state. The
    structure does not shrink with the scale (about 280 bytes a tensor): counted as bytes, it would
    lengthen every paced phase by its share / scale at full size (3 % for a Llama-3 70B rank at 0.005)."""
    return min(1.0, state.emulated_bytes * scale / max(1, serialized_size(state)))


class CheckpointFailed(RunFailed):
    """A checkpoint did not reach the global tier and drain.on_failure says stop."""


def save_rank_file(state, tier, key: str, step: int, *, after_write=None) -> tuple[int, str]:
    """The pipeline's write of one rank's file: ``torch.save`` of the staged payload through a
    CRC32C-computing sink into the tier's sink, which publishes it (durably) on commit.
    ``after_write()`` runs when every byte is written and nothing is published yet (fault
    injection). Returns (bytes, crc32c)."""
    sink = ChecksumSink(tier.open_write(key))
    with sink:
        torch.save(state.payload(step), sink)
        if after_write is not None:
            after_write()
    return sink.bytes_written, sink.hexdigest


@dataclass
class Checkpointer:
    state: object  # RankState
    local: object  # Tier or None (write straight to global)
    global_: object  # Tier
    comm: object  # DistComm on the pipeline's own group
    keep: int = 2
    drain_concurrency: int = 4
    drain_verify: str = DEFAULT_VERIFY
    metrics: object = NULL_METRICS
    meta: dict = field(default_factory=dict)
    loop: LoopThread = None
    records: list = field(default_factory=list)
    events: deque = field(default_factory=lambda: deque(maxlen=8000))  # bounded for soak runs
    on_local_full: str = "global"
    on_failure: str = "auto"
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    faults: object = NO_FAULTS
    tally: Tally = None
    #: where drains through a tier without files spool (None: the system's temporary folder)
    spool_dir: str | None = None
    #: a drain's read-back of one file is given up after this many seconds (checkpoint.read_timeout_s)
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    #: called as (record, "started") when a checkpoint begins and (record, "finished") once it is
    #: over, success or not (from the pipeline's thread): records that survive a kill
    on_record: object = None
    #: provenance written into manifests: the step ranges whose mutations the state holds
    first_step: int = 1
    lineage_base: list = field(default_factory=list)
    #: what the next async checkpoint waits for of the previous one: "complete" or "local_write"
    async_waits_for: str = "complete"
    #: the drain stage's collectives (None: ``comm``; a group of its own where stages overlap)
    drain_comm: object = None
    #: the node's host-memory tier (None: none), nearest of all
    memory: object = None
    #: which tiers take which checkpoint (None: every checkpoint to local, if any, and global)
    schedule: Schedule = None
    #: the peer tier (emulator/checkpoint/replicas.py PeerReplicas), None without one
    peer: object = None
    #: seconds the snapshot of this rank's state takes in the design, at the run's time factor
    #: (emulator/rank/dilation.py); None: the snapshot is this host's copy, unpaced
    snapshot_seconds: float | None = None
    _inflight: concurrent.futures.Future = None
    _written: concurrent.futures.Future = None  # the in-flight checkpoint's write stage
    _older: concurrent.futures.Future = None  # the checkpoint before it, still draining (overlap)
    _tail: asyncio.Task = None  # the newest pipeline (on the loop): the next drain waits for it
    _housekeeping: asyncio.Task = None  # retention etc. of the last checkpoint (not stall)
    _seq: int = 0
    #: node leaders: the most bytes the node's memory and peer tiers held at once (host memory)
    memory_tier_peak: int = 0
    _node_steps: dict = field(default_factory=dict)  # tier -> steps complete there on this node, by this run
    _counts: dict = field(default_factory=dict)  # checkpoints taken per mode (the schedule counts them)
    _drainers: dict = field(default_factory=dict)  # (source, dest) tier names -> Drainer
    #: one node retention at a time: one that finds a step's folder already emptied by another would
    #: return while that folder is still there, and the next write would find keep + 1 others
    _retaining: asyncio.Lock = field(default_factory=asyncio.Lock)

    def __post_init__(self):
        self.loop = self.loop or LoopThread()
        self.tally = self.tally or Tally(self.metrics)
        self.drain_comm = self.drain_comm or self.comm
        tp_pp = self.meta.get("tp", 1) * self.meta.get("pp", 1)
        self.mp_rank = self.comm.rank % tp_pp
        self.schedule = self.schedule or Schedule.two_tier(self.local is not None, self.keep)
        self.drainer = self._drainer("local", "global") if self.local is not None else None

    def tier(self, name: str):
        """The tier called ``name`` (memory, local, global), None where the run has none."""
        return {"memory": self.memory, "local": self.local, "global": self.global_}[name]

    def _drainer(self, source: str, dest: str) -> Drainer:
        """The node's copier from tier ``source`` to ``dest``; only copies to the global tier are
        the drain the metrics count (drains in flight, backlog, busy seconds)."""
        if (source, dest) not in self._drainers:
            self._drainers[source, dest] = Drainer(
                self.tier(source), self.tier(dest), concurrency=self.drain_concurrency, verify=self.drain_verify,
                metrics=self.metrics if dest == "global" else NULL_METRICS, node=self.comm.node,
                policy=self.policy, tally=self.tally, spool_dir=self.spool_dir, read_timeout_s=self.read_timeout_s)
        return self._drainers[source, dest]

    def drain_in_flight_since(self) -> float | None:
        """When the oldest drain to the global tier now in progress on this rank began (None: none)."""
        starts = [d.in_flight_since for (_, dest), d in self._drainers.items()
                  if dest == "global" and d.in_flight_since is not None]
        return min(starts, default=None)

    # ------------------------------------------------------------------ training-loop side

    def checkpoint(self, step: int, mode: str) -> CkptRecord:
        """Take checkpoint ``step``; returns when the training loop may continue."""
        self._seq += 1
        self._counts[mode] = count = self._counts.get(mode, 0) + 1
        rec = CkptRecord(step, mode, self.comm.rank, self.comm.node, time.time(), seq=self._seq,
                         due=list(self.schedule.due(count)))
        if self.on_record is not None:  # the emulator's journal: its time is not the job's stall
            self.on_record(rec, "started")
        start = rec.start = time.time()
        if self._inflight is not None:
            rec.missed = not self._inflight.done()
            self._wait_for_previous()
        self.faults.checkpoint_started(rec.seq)
        rec.wait_s = time.time() - start
        t = time.time()
        staged = self.state.snapshot(paced=self.snapshot_seconds is not None)
        self._pace_snapshot(rec, t)
        rec.snapshot_s = time.time() - t
        if staged.device_s > 0:  # a device's copy to host: the part of the stall the report calls d2h
            rec.d2h_s, rec.d2h_bytes = staged.device_s, staged.bytes
            self.events.append(Event(self.comm.rank, "d2h", t, t + staged.device_s))
        self.faults.hit("staging", rec.seq)
        written = concurrent.futures.Future()
        future = self.loop.submit(self._pipeline(rec, written))
        if mode == "sync":
            future.result()
        else:
            self._inflight, self._written = future, written
        rec.stall_s = time.time() - start
        self.records.append(rec)
        self.events.append(Event(self.comm.rank, "stall", start, start + rec.stall_s))
        self._observe_stall(rec)
        return rec

    def _pace_snapshot(self, rec: CkptRecord, start: float) -> None:
        """Hold the snapshot to the design's copy rate (and fixed cost), as the time factor says."""
        if self.snapshot_seconds is None:
            return
        paced.record("snapshot", start, start + self.snapshot_seconds)
        rec.paced["snapshot"] = self.snapshot_seconds
        left = start + self.snapshot_seconds - time.time()
        if left > 0:
            time.sleep(left)

    def _wait_for_previous(self) -> None:
        """Async: wait for what the next checkpoint needs of the one in flight (``async_waits_for``)."""
        inflight, self._inflight = self._inflight, None
        if self.async_waits_for == "complete" or inflight.done():
            inflight.result()  # raises what the pipeline raised (drain.on_failure)
            return
        self._written.result()  # the staging buffers are free: the drain may run on
        if self._older is not None:
            self._older.result()  # at most one drain behind the write
        self._older = inflight

    def _observe_stall(self, rec: CkptRecord) -> None:
        m = self.metrics
        m.observe_stall(rec.mode, rec.stall_s)
        m.add_stall_seconds(rec.mode, rec.stall_s)
        # the snapshot stages for the tier the file goes to first: the local one, or global without one
        tier, name = (self.local, "local") if self.local is not None else (self.global_, "global")
        m.observe_phase("snapshot", name, rec.snapshot_s, backend=tier.backend)
        if rec.d2h_s > 0:
            m.observe_phase("d2h", name, rec.d2h_s, backend=tier.backend)
        if rec.missed:
            m.deadline_missed(rec.mode)

    def in_flight(self) -> bool:
        """Whether an async checkpoint's write, drain or commit is still running on this rank."""
        return any(f is not None and not f.done() for f in (self._inflight, self._older))

    def finish(self) -> float:
        """Wait for the checkpoint in flight (end of a mode); returns the seconds waited."""
        t = time.time()
        for name in ("_older", "_inflight"):
            future = getattr(self, name)
            setattr(self, name, None)
            if future is not None:
                future.result()
        self.loop.run(self._settle())
        return time.time() - t

    def resume(self) -> list:
        """Drain checkpoints complete locally but not globally (collective; before training)."""
        with counted_as("drain"):
            return self.loop.run(resume(self))

    def close(self) -> None:
        try:
            self.finish()
        finally:
            self.loop.close()

    # ------------------------------------------------------------------ background pipeline

    async def _pipeline(self, rec: CkptRecord, written: concurrent.futures.Future) -> CkptRecord:
        previous, self._tail = self._tail, asyncio.current_task()
        bill = charge_task_to(Bill("checkpoint", self.metrics.count_s3_request))  # this task's S3 requests
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
        self._housekeeping = asyncio.get_running_loop().create_task(self._housekeep(rec, receipt.key, bill))
        if rec.global_due and not rec.global_complete and not rec.skipped and self._stop_on_failure(rec.mode):
            raise CheckpointFailed(
                f"checkpoint at step {rec.step} ({rec.mode}) did not reach the global tier: {rec.error} "
                f"(drain.on_failure={self.on_failure}; set drain.on_failure=continue to keep training)")
        return rec

    async def _write_stage(self, rec: CkptRecord) -> tuple[Receipt, list[Receipt]]:
        """This rank's file, every rank's receipt, the node's local manifest (node leaders)."""
        # the previous checkpoint's housekeeping, on every rank (node leaders delete), before
        # any rank writes: a tier never holds more than keep + 1 checkpoints
        await self._settle()
        if self.async_waits_for == "local_write" and any(
                len(steps) > self.schedule.keep[name] for name, steps in self._node_steps.items()):
            # the last retention ran before the previous checkpoint was complete here; the one
            # draining now is the newest complete one, so this keeps it
            await self._retain_node_tiers()
        begun = await self._node_barrier()
        with counted_as("local_write"), anchored_at(begun):
            receipt = await self._write_rank_file(rec, begun)
        receipts = await asyncio.to_thread(self.comm.all_gather, receipt)
        rec.skipped = any(r.skipped for r in receipts)
        errors = [r.error for r in receipts if r.error]
        if self.comm.rank == 0 and not errors:  # MLPerf style: all bytes / slowest rank
            slowest = max(r.write_s for r in receipts)
            self.metrics.set_throughput("save", rec.mode, sum(r.size for r in receipts) / max(slowest, 1e-9))
        mine = [r for r in receipts if r.node == self.comm.node]
        first = Schedule.first(rec.due)
        if first != "global" and self.comm.is_node_leader and not errors and all(r.where == first for r in mine):
            rec.local_complete = await self._guarded(self._write_manifest(
                self.tier(first), first, rec.step, rec.mode, [r.entry for r in mine], self._node_meta(rec)))
            if rec.local_complete:
                self._node_steps.setdefault(first, set()).add(rec.step)
        if first != "global" and self.comm.is_node_leader:
            self._tier_done(rec, first, rec.local_complete, rec.local_write_s, rec.paced.get("local_write"))
        return receipt, receipts

    async def _from_node_leader(self, rec: CkptRecord, name: str) -> dict:
        """Every rank takes its node leader's view of tier ``name`` (the leader wrote the node's
        manifest there); collective on ``drain_comm``."""
        comm = self.drain_comm
        views = await asyncio.to_thread(comm.all_gather, (comm.node, comm.is_node_leader, rec.tiers.get(name)))
        rec.tiers[name] = next(v for node, leader, v in views if leader and node == comm.node)
        return rec.tiers[name]

    def _tier_done(self, rec: CkptRecord, name: str, complete: bool, seconds: float,
                   paced_s: float | None = None, *, stream_s: float | None = None) -> None:
        """Note the checkpoint's outcome on tier ``name``: the record's per-tier view and its lag
        (``stream_s``: of ``seconds``, the bytes' stream; the rest is the software around it)."""
        lag = time.time() - (rec.start + rec.wait_s) if complete else 0.0
        rec.tiers[name] = {"complete": bool(complete), "lag_s": lag, "seconds": seconds, "paced": paced_s}
        if stream_s is not None:
            rec.tiers[name]["stream_s"] = stream_s
        if complete and self.comm.is_node_leader:  # one observation per node
            self.metrics.observe_tier_lag(name, lag)

    async def _drain_stage(self, rec: CkptRecord, receipts: list[Receipt], bill: Bill) -> None:
        """The node's drain, then the global commit; on ``drain_comm``."""
        errors = [r.error for r in receipts if r.error]
        first = Schedule.first(rec.due)
        if first != "global":
            rec.local_complete = (await self._from_node_leader(rec, first))["complete"]
        if "peer" in rec.due and self.peer is not None:
            await self._replicate(rec, receipts, written=not errors and first == "memory")
        if first == "memory" and "local" in rec.due and self.local is not None:
            await self._persist(rec, receipts, written=not errors)
        if rec.global_due:
            if first != "global":
                source = "local" if rec.tiers.get("local", {}).get("complete") else first
                errors += await self._drain_node(rec, receipts, written=not errors, source=source, where=first)
            rec.global_complete, rec.error = await self.commit_global(
                rec.step, rec.mode, [r.entry for r in receipts], errors, seq=rec.seq)
            self._tier_done(rec, "global", rec.global_complete, rec.drain_s,
                            rec.paced.get("drain") if first != "global" else rec.paced.get("local_write"))
        else:
            rec.error = " ".join("; ".join(errors).split())[:500]
        now = time.time()
        rec.complete_s = now - rec.start
        if rec.global_complete:
            rec.durable_at, rec.lag_s = now, now - (rec.start + rec.wait_s)
            self.metrics.observe_durability_lag(rec.mode, rec.lag_s)
        rec.requests = bill.counts()
        if self.on_record is not None:
            self.on_record(rec, "finished")

    async def _node_barrier(self) -> float:
        """A barrier that also says when this node's write phase began: when its last rank arrived
        (one clock per node). A rank the host schedules late starts after that, and its lateness is
        the host's, while the node's device is busy with the others' bytes from that moment on."""
        arrived = await asyncio.to_thread(self.comm.all_gather, (self.comm.node, time.time()))
        return max(t for node, t in arrived if node == self.comm.node)

    async def _write_rank_file(self, rec: CkptRecord, begun: float) -> Receipt:
        """This rank's file, to the local tier (or global: no local tier, or a full one); its write
        is timed from ``begun``, when every rank of its node was ready to write."""
        comm = self.comm
        key = layout.rank_file_key(rec.step, comm.rank, self.state.coords.dp, self.mp_rank)
        receipt = Receipt(comm.rank, comm.node, key)
        t0 = min(begun, time.time())
        await self._write_file(receipt, rec)
        t1 = time.time()
        receipt.write_s = rec.local_write_s = t1 - t0
        if receipt.where and is_paced(self.tier(receipt.where)):
            rec.paced["local_write"] = paced.seconds("local_write", t0, t1)
        rec.file_bytes, rec.written_to, rec.local_full = receipt.size, receipt.where, receipt.local_full
        self.events.append(Event(comm.rank, "local_write", t0, t1))
        if receipt.where:
            tier = self.tier(receipt.where)
            self.metrics.observe_phase("local_write", receipt.where, rec.local_write_s, backend=tier.backend)
            self.metrics.add_bytes("write", receipt.where, receipt.size, backend=tier.backend)
        return receipt

    async def _write_file(self, receipt: Receipt, rec: CkptRecord) -> None:
        first = Schedule.first(rec.due)
        if first == "global":
            await self._save_global(receipt, rec)
            return
        try:
            receipt.size, receipt.crc32c = await asyncio.to_thread(self._save, self.tier(first), receipt.key, rec)
            receipt.where = first
        except Exception as exc:  # noqa: BLE001 - sinks abort on error: nothing half-written is visible
            if not is_no_space(exc):
                receipt.error = f"{first} write failed: {describe_error(exc)}"
                return
            receipt.local_full = True
            self.tally.count("local_full")
            if self.on_local_full == "global":
                await self._save_global(receipt, rec)
            else:
                receipt.skipped = True
                receipt.error = f"skipped: {first} tier full (ENOSPC, checkpoint.on_local_full=skip)"

    def _save(self, tier, key: str, rec: CkptRecord) -> tuple[int, str]:
        return save_rank_file(self.state, tier, key, rec.step,
                              after_write=lambda: self.faults.hit("local_write", rec.seq))

    async def _save_global(self, receipt: Receipt, rec: CkptRecord) -> None:
        """Write this rank's file straight to the global tier, retrying transient errors."""
        def on_retry(exc):
            rec.drain_retries += 1
            self.tally.count("drain_retry")
        try:
            receipt.size, receipt.crc32c = await retrying(
                self.policy, f"write of {receipt.key} to the global tier",
                lambda: asyncio.to_thread(self._save, self.global_, receipt.key, rec), on_retry)
            receipt.where = "global"
        except Exception as exc:  # noqa: BLE001 - the checkpoint becomes incomplete, nothing torn
            receipt.error = f"global write failed: {describe_error(exc)}"

    async def _replicate(self, rec: CkptRecord, receipts: list[Receipt], *, written: bool) -> None:
        """Every rank sends its memory copy to the same local rank of its node's holders; every rank
        learns whether its node's copies arrived whole at every holder (collective)."""
        mine = next(r for r in receipts if r.rank == self.comm.rank)
        entry = mine.entry if written and rec.local_complete and mine.where == "memory" else None
        t0 = time.time()
        with counted_as("replicate"):
            ok, seconds, stream_s, spans = await self.peer.replicate(self.drain_comm, self.memory, rec.step, entry,
                                                                      self.manifest_meta(rec.step))
        self._tier_done(rec, "peer", ok, seconds, paced.covered(spans, t0, time.time())
                        if self.peer.transport.pacer is not None else None, stream_s=stream_s)
        if ok and self.comm.is_node_leader:
            self.metrics.observe_phase("replicate", "peer", seconds, backend="gloo")
            self.metrics.checkpoint_complete("peer", rec.step, time.time())

    async def _persist(self, rec: CkptRecord, receipts: list[Receipt], *, written: bool) -> None:
        """Node leaders copy the node's files from memory to the local tier (verified), then write
        its manifest there; every rank learns its node's outcome."""
        comm, ok, seconds, paced_s = self.drain_comm, False, 0.0, None
        if comm.is_node_leader and written and rec.local_complete:
            files = [r.entry for r in receipts if r.node == comm.node and r.where == "memory"]
            drainer = self._drainer("memory", "local")
            with counted_as("persist"), anchored_at(time.time()):
                copy = await drainer.drain(files)
            paced_s = drainer.paced_seconds("persist", copy, [f.size for f in files])
            ok = copy.ok and await self._guarded(
                self._write_manifest(self.local, "local", rec.step, rec.mode, files, self._node_meta(rec)))
            seconds = copy.seconds
            if ok:
                self._node_steps.setdefault("local", set()).add(rec.step)
                self.metrics.observe_phase("persist", "local", seconds, backend=self.local.backend)
        if comm.is_node_leader:
            self._tier_done(rec, "local", ok, seconds, paced_s)
        await self._from_node_leader(rec, "local")

    async def _drain_node(self, rec: CkptRecord, receipts: list[Receipt], *, written: bool,
                          source: str = "local", where: str = "local") -> list[str]:
        """Node leaders drain their node's files (written to tier ``where``) from tier ``source``;
        everyone learns every node's outcome."""
        comm = self.drain_comm
        mine = [r for r in receipts if r.node == comm.node]
        drain = None
        if comm.is_node_leader:
            if written:
                drainer, files = self._drainer(source, "global"), [r.entry for r in mine if r.where == where]
                with counted_as("drain"), anchored_at(time.time()):
                    drain = await drainer.drain(files, after_file=lambda: self.faults.hit("drain", rec.seq))
                drain.paced_s = drainer.paced_seconds("drain", drain, [f.size for f in files])
                self._record_drain(drain)
        else:
            self.faults.hit("drain", rec.seq)
        errors = []
        for d, local_ok in await asyncio.to_thread(comm.all_gather, (drain, rec.local_complete)):
            if d is None:
                continue
            if d.node == comm.node:
                rec.drain_s, rec.drain_retries = d.seconds, rec.drain_retries + d.retries
                if d.paced_s is not None:
                    rec.paced["drain"] = d.paced_s
                rec.abandoned, rec.local_complete = d.abandoned, local_ok
            if not d.ok:
                errors.append(f"node {d.node} drain: {d.error}")
        return errors

    def _record_drain(self, drain: DrainResult) -> None:
        self.events.append(Event(self.comm.rank, "drain", drain.start, drain.end))
        if drain.ok and drain.files:
            self.metrics.observe_phase("drain", "global", drain.seconds, backend=self.global_.backend)
            self.metrics.add_bytes("write", "global", drain.bytes, backend=self.global_.backend)

    async def commit_global(self, step: int, mode: str, entries, errors: list[str], *,
                            seq: int | None = None, meta: dict | None = None) -> tuple[bool, str]:
        """If no rank reported an error, rank 0 writes the global manifest (retried); then every
        rank learns the outcome: (complete on the global tier, the reason if not)."""
        ok = not errors
        if ok:
            if seq is not None:
                self.faults.hit("manifest", seq)  # rank 0: every file is on the global tier, no manifest
            if self.comm.rank == 0:
                try:
                    await retrying(self.policy, "global manifest", lambda: self._write_manifest(
                        self.global_, "global", step, mode, entries, meta))
                except Exception as exc:  # noqa: BLE001
                    ok, errors = False, [f"global manifest: {describe_error(exc)}"]
        reason = " ".join("; ".join(errors).split())[:500]
        return await asyncio.to_thread(self.drain_comm.broadcast, (ok, reason))

    # ------------------------------------------------------------------ after a checkpoint

    async def _housekeep(self, rec: CkptRecord, key: str, bill: Bill) -> None:
        """After a checkpoint: free an incomplete local copy, apply retention, inject corruption;
        its S3 requests are the checkpoint's too (``bill``)."""
        if self.comm.is_node_leader and self.memory is not None:  # before retention: the most held
            held = [self.memory] + ([self.peer.store] if self.peer is not None else [])
            self.memory_tier_peak = max(self.memory_tier_peak, sum(map(folder_bytes, held)))
        if self.comm.is_node_leader:
            for name in ("memory", "local"):
                if name in rec.due and self.tier(name) is not None and not rec.tiers.get(name, {}).get("complete"):
                    # this node's copy there can never become complete: free the space now
                    await self._guarded(layout.delete_checkpoint(self.tier(name), rec.step))
        await self.retention()
        await self._guarded(self.faults.after_checkpoint(
            rec.seq, rec.step, key, {"memory": self.memory, "local": self.local, "global": self.global_}))
        rec.requests = bill.counts()

    async def _settle(self) -> None:
        """Wait for the newest housekeeping (the write and the drain stage may both wait for it)."""
        if self._housekeeping is not None:
            await self._housekeeping  # never raises: every step is guarded

    def _stop_on_failure(self, mode: str) -> bool:
        return self.on_failure == "fail" or (self.on_failure == "auto" and mode == "sync")

    async def _guarded(self, coro) -> bool:
        """Run a tier operation whose failure must not stop the pipeline (or skip a collective)."""
        try:
            await coro
            return True
        except Exception:  # noqa: BLE001 - counted; the step simply stays incomplete there
            self.tally.count("tier_error")
            return False

    def _node_meta(self, rec: CkptRecord) -> dict:
        """A node tier's manifest meta: also the tiers the checkpoint is due on (resume reads it)."""
        return {**self.manifest_meta(rec.step), "due": list(rec.due)}

    def manifest_meta(self, step: int) -> dict:
        return {**self.meta, "lineage": [list(r) for r in self.lineage_base] + [[self.first_step, step]]}

    async def _write_manifest(self, tier, name: str, step: int, mode: str, entries, meta: dict | None = None) -> None:
        manifest = layout.Manifest(step=step, files=sorted(entries, key=lambda e: e.rank), tier=name, mode=mode,
                                   world=self.comm.world_size, meta=meta or self.manifest_meta(step))
        await layout.write_manifest(tier, manifest)
        self.metrics.checkpoint_complete(name, step, time.time())

    async def retention(self) -> None:
        if self.comm.is_node_leader:
            await self._retain_node_tiers()
        if self.comm.rank == 0:
            await self._guarded(layout.apply_retention(self.global_, self.schedule.keep["global"]))

    async def _retain_node_tiers(self) -> None:
        """Node leaders: retention on the node's tiers (each keeps its own count), forgetting the
        steps it deleted. With peers, memory also keeps the steps of the copies this node holds
        for its peers: a lost node gets its copy of such a step back, and every rank must restore
        the same step."""
        async with self._retaining:
            for name in ("memory", "local"):
                tier = self.tier(name)
                if tier is None:
                    continue

                async def retain(name=name, tier=tier):
                    protect = await self._held_peer_steps() if name == "memory" else set()
                    deleted = await layout.apply_retention(tier, self.schedule.keep[name], protect=protect)
                    self._node_steps.setdefault(name, set()).difference_update(deleted)
                await self._guarded(retain())

    async def _held_peer_steps(self) -> set[int]:
        """The steps of the copies this node holds for its peers (none without a peer tier)."""
        if self.peer is None:
            return set()
        return set((await layout.valid_steps(self.peer.store))[0])
