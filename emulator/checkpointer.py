"""One rank's checkpointer: snapshot, local write, drain, manifests, in sync or async mode.

Every checkpoint runs the same pipeline; the modes differ only in how long
the training loop waits for it:

- sync: the loop waits for the whole pipeline (snapshot, ``torch.save`` to
  the local tier, the node's drain to the global tier, the global manifest).
- async: the loop waits only for the snapshot into reusable staging buffers;
  the rest runs on a background event-loop thread. Before staging the next
  checkpoint the loop waits for the previous one to finish (the staging
  buffers are reused, and the drain must beat the next checkpoint); that
  wait is stall, and counts as a deadline miss.

Ranks coordinate through a dedicated gloo group: receipts are gathered after
the local write (each node leader writes its node's local manifest, then
drains the node's files), drain results are gathered, and global rank 0
writes the global manifest only if every file of every rank arrived.
Collectives are called on every rank whatever happened (every tier call
before one is guarded), so one rank's failure makes the checkpoint
incomplete instead of hanging the job.

Failures, and why they end as they do:

- A local write that fails with ENOSPC goes straight to the global tier
  (``checkpoint.on_local_full: global``) or skips the checkpoint (``skip``);
  either way the node's local copy is incomplete and its leftovers are
  deleted at once, since a full disk is where they hurt.
- Global-tier work (drained files, direct writes, the global manifest) is
  retried on transient errors (faults.retrying). A checkpoint that still did
  not reach the global tier either lets training continue or ends the run
  with one line (``drain.on_failure``; "auto" fails in sync mode, where the
  loop was promised a durable checkpoint, and continues in async mode).
- ``resume()`` runs before training: checkpoints that are complete on every
  node's local tier but not on the global tier (a crash between the local
  manifest and the global one) are drained first.
- Fault injection (faults.py) hooks in at the named phases only.

The stall ends when the checkpoint is complete on the global tier; deleting
old checkpoints (retention) is housekeeping that runs afterwards, while the
loop trains. The next checkpoint's pipeline waits for it on every rank (a
barrier) before anything is written, so a tier never holds more than
``keep`` + 1 checkpoints.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field

import torch

from . import layout
from .drainer import Drainer
from .errors import UserError
from .faults import NO_FAULTS
from .retry import RetryPolicy, describe_error, is_no_space, retrying
from .tally import Tally
from .integrity import ChecksumSink

META_KEYS = ("preset", "scale", "tp", "pp", "dp", "zero_stage")


class CheckpointFailed(UserError):
    """A checkpoint did not reach the global tier and drain.on_failure says stop."""


class LoopThread:
    """A background thread running one asyncio event loop for the checkpoint pipeline."""

    def __init__(self, name: str = "ckpt-pipeline"):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def submit(self, coro) -> concurrent.futures.Future:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro):
        return self.submit(coro).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)


@dataclass
class CkptRecord:
    step: int
    mode: str
    rank: int
    node: int
    start: float
    stall_s: float = 0.0
    wait_s: float = 0.0
    snapshot_s: float = 0.0
    local_write_s: float = 0.0
    file_bytes: int = 0
    drain_s: float = 0.0
    complete_s: float = 0.0
    missed: bool = False
    local_complete: bool = False
    global_complete: bool = False
    error: str = ""
    seq: int = 0  # 1-based checkpoint number of this launch attempt, across modes
    written_to: str = ""  # where this rank's file went first: local, or global (no local tier / full)
    local_full: bool = False  # this rank's local write hit ENOSPC
    skipped: bool = False  # some rank's local tier was full and on_local_full is skip
    drain_retries: int = 0
    abandoned: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Event:
    rank: int
    kind: str
    start: float
    end: float


@dataclass
class Checkpointer:
    state: object  # RankState
    local: object  # Tier or None (write straight to global)
    global_: object  # Tier
    comm: object  # DistComm on the pipeline's own group
    keep: int = 2
    drain_concurrency: int = 4
    drain_verify: str = "size"
    metrics: object = None
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
    #: provenance written into manifests: the step ranges whose mutations the state holds
    first_step: int = 1
    lineage_base: list = field(default_factory=list)
    _inflight: concurrent.futures.Future = None
    _housekeeping: asyncio.Task = None  # retention etc. of the last checkpoint (not stall)
    _seq: int = 0

    def __post_init__(self):
        self.loop = self.loop or LoopThread()
        self.tally = self.tally or Tally(self.metrics)
        tp_pp = self.meta.get("tp", 1) * self.meta.get("pp", 1)
        self.mp_rank = self.comm.rank % tp_pp
        self.drainer = Drainer(self.local, self.global_, concurrency=self.drain_concurrency,
                               verify=self.drain_verify, metrics=self.metrics, node=self.comm.node,
                               policy=self.policy, tally=self.tally, spool_dir=self.spool_dir) \
            if self.local is not None else None

    # ------------------------------------------------------------------ training-loop side

    def checkpoint(self, step: int, mode: str) -> CkptRecord:
        """Take checkpoint ``step``; returns when the training loop may continue."""
        start = time.time()
        self._seq += 1
        rec = CkptRecord(step, mode, self.comm.rank, self.comm.node, start, seq=self._seq)
        if self._inflight is not None:
            rec.missed = not self._inflight.done()
            inflight, self._inflight = self._inflight, None
            inflight.result()
        self.faults.checkpoint_started(rec.seq)
        rec.wait_s = time.time() - start
        t = time.time()
        self.state.snapshot()
        rec.snapshot_s = time.time() - t
        self.faults.hit("staging", rec.seq)
        future = self.loop.submit(self._pipeline(rec))
        if mode == "sync":
            future.result()
        else:
            self._inflight = future
        rec.stall_s = time.time() - start
        self.records.append(rec)
        self.events.append(Event(self.comm.rank, "stall", start, start + rec.stall_s))
        if self.metrics:
            self.metrics.observe_stall(mode, rec.stall_s)
            self.metrics.add_stall_seconds(mode, rec.stall_s)
            self.metrics.observe_phase("snapshot", "local", rec.snapshot_s)  # host memory of this node
            if rec.missed:
                self.metrics.deadline_missed(mode)
        return rec

    def finish(self) -> float:
        """Wait for the checkpoint in flight (end of a mode); returns the seconds waited."""
        t = time.time()
        if self._inflight is not None:
            inflight, self._inflight = self._inflight, None
            inflight.result()
        self.loop.run(self._settle())
        return time.time() - t

    def resume(self) -> list:
        """Drain checkpoints complete locally but not globally (collective; before training)."""
        return self.loop.run(self._resume())

    def close(self) -> None:
        try:
            self.finish()
        finally:
            self.loop.close()

    # ------------------------------------------------------------------ background pipeline

    def _save(self, tier, key: str, rec: CkptRecord) -> tuple[int, str]:
        sink = ChecksumSink(tier.open_write(key))
        with sink:
            torch.save(self.state.payload(rec.step), sink)
            self.faults.hit("local_write", rec.seq)  # every byte written, nothing published yet
        return sink.bytes_written, sink.hexdigest

    async def _save_global(self, receipt: dict, key: str, rec: CkptRecord) -> None:
        """Write this rank's file straight to the global tier, retrying transient errors."""
        def on_retry(exc):
            rec.drain_retries += 1
            self.tally.count("drain_retry")
        try:
            receipt["size"], receipt["crc32c"] = await retrying(
                self.policy, f"write of {key} to the global tier",
                lambda: asyncio.to_thread(self._save, self.global_, key, rec), on_retry)
            receipt["where"] = "global"
        except Exception as exc:  # noqa: BLE001 - the checkpoint becomes incomplete, nothing torn
            receipt["error"] = f"global write failed: {describe_error(exc)}"

    async def _write_file(self, receipt: dict, key: str, rec: CkptRecord) -> None:
        if self.local is None:
            await self._save_global(receipt, key, rec)
            return
        try:
            receipt["size"], receipt["crc32c"] = await asyncio.to_thread(self._save, self.local, key, rec)
            receipt["where"] = "local"
        except Exception as exc:  # noqa: BLE001 - sinks abort on error: nothing half-written is visible
            if not is_no_space(exc):
                receipt["error"] = f"local write failed: {describe_error(exc)}"
                return
            receipt["local_full"] = True
            self.tally.count("local_full")
            if self.on_local_full == "global":
                await self._save_global(receipt, key, rec)
            else:
                receipt["skipped"] = True
                receipt["error"] = "skipped: local tier full (ENOSPC, checkpoint.on_local_full=skip)"

    async def _pipeline(self, rec: CkptRecord) -> CkptRecord:
        comm, co = self.comm, self.state.coords
        # the previous checkpoint's housekeeping, on every rank (node leaders delete), before
        # any rank writes: a tier never holds more than keep + 1 checkpoints
        await self._settle()
        await asyncio.to_thread(comm.barrier)
        key = layout.rank_file_key(rec.step, comm.rank, co.dp, self.mp_rank)
        receipt = {"rank": comm.rank, "node": comm.node, "key": key, "size": 0, "crc32c": "", "error": "",
                   "where": "", "local_full": False, "skipped": False}
        t0 = time.time()
        await self._write_file(receipt, key, rec)
        t1 = time.time()
        receipt["write_s"] = t1 - t0
        rec.local_write_s, rec.file_bytes = t1 - t0, receipt["size"]
        rec.written_to, rec.local_full = receipt["where"], receipt["local_full"]
        self.events.append(Event(comm.rank, "local_write", t0, t1))
        where = receipt["where"]
        if self.metrics and where:
            tier = self.local if where == "local" else self.global_
            self.metrics.observe_phase("local_write", where, rec.local_write_s, backend=tier.backend)
            self.metrics.add_bytes("write", where, receipt["size"], backend=tier.backend)

        receipts = await asyncio.to_thread(comm.all_gather, receipt)
        errors = [r["error"] for r in receipts if r["error"]]
        rec.skipped = any(r["skipped"] for r in receipts)
        if self.metrics and comm.rank == 0 and not errors:  # MLPerf style: all bytes / slowest rank
            slowest = max(r["write_s"] for r in receipts)
            self.metrics.set_throughput("save", rec.mode, sum(r["size"] for r in receipts) / max(slowest, 1e-9))
        entries = [layout.FileEntry(r["key"], r["rank"], r["size"], r["crc32c"]) for r in receipts]
        mine = [(e, r) for e, r in zip(entries, receipts) if r["node"] == comm.node]
        written = not errors  # a file missing anywhere: no drain, no manifest on any tier

        if self.local is not None:
            drain = None
            if comm.is_node_leader:
                if written and all(r["where"] == "local" for _, r in mine):
                    rec.local_complete = await self._guarded(
                        self._write_manifest(self.local, "local", rec.step, rec.mode, [e for e, _ in mine]))
                if written:
                    drain = await self.drainer.drain([e for e, r in mine if r["where"] == "local"],
                                                     after_file=lambda: self.faults.hit("drain", rec.seq))
                    self.events.append(Event(comm.rank, "drain", drain.start, drain.end))
                    if self.metrics and drain.ok and drain.files:
                        self.metrics.observe_phase("drain", "global", drain.seconds, backend=self.global_.backend)
                        self.metrics.add_bytes("write", "global", drain.bytes, backend=self.global_.backend)
            else:
                self.faults.hit("drain", rec.seq)
            gathered = await asyncio.to_thread(comm.all_gather, (drain, rec.local_complete))
            for d, local_ok in gathered:
                if d is None:
                    continue
                if d.node == comm.node:
                    rec.drain_s, rec.drain_retries = d.seconds, rec.drain_retries + d.retries
                    rec.abandoned, rec.local_complete = d.abandoned, local_ok
                if not d.ok:
                    errors.append(f"node {d.node} drain: {d.error}")

        ok = not errors
        if ok:
            self.faults.hit("manifest", rec.seq)  # rank 0: every file is on the global tier, no manifest
            if comm.rank == 0:
                try:
                    await retrying(self.policy, "global manifest", lambda: self._write_manifest(
                        self.global_, "global", rec.step, rec.mode, entries))
                except Exception as exc:  # noqa: BLE001
                    ok, errors = False, [f"global manifest: {describe_error(exc)}"]
        ok, error = await asyncio.to_thread(comm.broadcast, (ok, " ".join("; ".join(errors).split())[:500]))
        rec.global_complete, rec.error = ok, error
        rec.complete_s = time.time() - rec.start
        # the checkpoint is done: a sync loop may go on while old ones are deleted
        self._housekeeping = asyncio.get_running_loop().create_task(self._housekeep(rec, key))
        if not ok and not rec.skipped and self._stop_on_failure(rec.mode):
            raise CheckpointFailed(
                f"checkpoint at step {rec.step} ({rec.mode}) did not reach the global tier: {error} "
                f"(drain.on_failure={self.on_failure}; set drain.on_failure=continue to keep training)")
        return rec

    async def _housekeep(self, rec: CkptRecord, key: str) -> None:
        """After a checkpoint: free an incomplete local copy, apply retention, inject corruption."""
        if self.local is not None and self.comm.is_node_leader and not rec.local_complete:
            # this node's local copy can never become complete: free the space now
            await self._guarded(layout.delete_checkpoint(self.local, rec.step))
        await self._retention()
        await self._guarded(self.faults.after_checkpoint(rec.seq, rec.step, key,
                                                         {"local": self.local, "global": self.global_}))

    async def _settle(self) -> None:
        task, self._housekeeping = self._housekeeping, None
        if task is not None:
            await task  # never raises: every step is guarded

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

    def _manifest_meta(self, step: int) -> dict:
        return {**self.meta, "lineage": [list(r) for r in self.lineage_base] + [[self.first_step, step]]}

    async def _write_manifest(self, tier, name: str, step: int, mode: str, entries, meta: dict | None = None) -> None:
        manifest = layout.Manifest(step=step, files=sorted(entries, key=lambda e: e.rank), tier=name, mode=mode,
                                   world=self.comm.world_size, meta=meta or self._manifest_meta(step))
        await layout.write_manifest(tier, manifest)
        if self.metrics:
            self.metrics.checkpoint_complete(name, step, time.time())

    async def _retention(self) -> None:
        if self.local is not None and self.comm.is_node_leader:
            await self._guarded(layout.apply_retention(self.local, self.keep))
        if self.comm.rank == 0:
            await self._guarded(layout.apply_retention(self.global_, self.keep))

    # ------------------------------------------------------------------ resume

    def _compatible(self, manifest) -> bool:
        return manifest.world == self.comm.world_size and \
            all(manifest.meta.get(k) == self.meta.get(k) for k in META_KEYS if k in self.meta)

    async def _pending_local(self) -> dict:
        """This node's newest ``keep`` intact local checkpoints of this layout: {step: manifest}."""
        out = {}
        try:
            complete, _ = await layout.valid_steps(self.local)
            for step in complete[-self.keep:]:
                m = await layout.read_manifest(self.local, step)
                if m is not None and self._compatible(m):
                    out[step] = m
        except Exception:  # noqa: BLE001 - an unreadable local tier has nothing to resume
            self.tally.count("tier_error")
        return out

    async def _resume(self) -> list:
        comm = self.comm
        if self.local is None:
            return []
        local = await self._pending_local() if comm.is_node_leader else None
        glob = None
        if comm.rank == 0:
            try:
                glob = (await layout.valid_steps(self.global_))[0]
            except Exception:  # noqa: BLE001 - global unreachable now: the drains will come later
                self.tally.count("tier_error")
        views = await asyncio.to_thread(comm.all_gather, (local, glob))
        glob = views[0][1]
        leaders = [v for v, _ in views if v is not None]
        if glob is None or not leaders:
            return []
        common = set.intersection(*(set(v) for v in leaders))
        pending = sorted(s for s in common if s > max(glob, default=-1))[-self.keep:]
        records = []
        for step in pending:
            rec = CkptRecord(step, "resume", comm.rank, comm.node, time.time(), local_complete=True)
            drain, files = None, None
            if local is not None:
                files = local[step].files
                drain = await self.drainer.drain(files)
                self.events.append(Event(comm.rank, "drain", drain.start, drain.end))
            gathered = await asyncio.to_thread(comm.all_gather, (drain, files))
            entries = [e for _, fs in gathered if fs for e in fs]
            errors = [f"node {d.node} drain: {d.error}" for d, _ in gathered if d is not None and not d.ok]
            if sorted(e.rank for e in entries) != list(range(comm.world_size)):
                errors.append("the nodes' local manifests do not cover every rank")
            ok = not errors
            if ok and comm.rank == 0:
                m = local[step]
                try:
                    await retrying(self.policy, "global manifest", lambda: self._write_manifest(
                        self.global_, "global", step, m.mode, entries, meta=m.meta))
                except Exception as exc:  # noqa: BLE001
                    ok, errors = False, [f"global manifest: {describe_error(exc)}"]
            ok, error = await asyncio.to_thread(comm.broadcast, (ok, " ".join("; ".join(errors).split())[:500]))
            mine = next((d for d, _ in gathered if d is not None and d.node == comm.node), None)
            rec.drain_s = mine.seconds if mine else 0.0
            rec.global_complete, rec.error = ok, error
            rec.complete_s = time.time() - rec.start
            records.append(rec)
        await self._retention()
        return records
