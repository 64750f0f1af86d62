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
Collectives are called on every rank whatever happened, so one rank's failure
makes the checkpoint incomplete instead of hanging the job.
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
from .drainer import DrainResult, Drainer
from .integrity import ChecksumSink


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
    _inflight: concurrent.futures.Future = None

    def __post_init__(self):
        self.loop = self.loop or LoopThread()
        tp_pp = self.meta.get("tp", 1) * self.meta.get("pp", 1)
        self.mp_rank = self.comm.rank % tp_pp
        self.drainer = Drainer(self.local, self.global_, concurrency=self.drain_concurrency,
                               verify=self.drain_verify, metrics=self.metrics, node=self.comm.node) \
            if self.local is not None else None

    # ------------------------------------------------------------------ training-loop side

    def checkpoint(self, step: int, mode: str) -> CkptRecord:
        """Take checkpoint ``step``; returns when the training loop may continue."""
        start = time.time()
        rec = CkptRecord(step, mode, self.comm.rank, self.comm.node, start)
        if self._inflight is not None:
            rec.missed = not self._inflight.done()
            self._inflight.result()
            self._inflight = None
        rec.wait_s = time.time() - start
        t = time.time()
        self.state.snapshot()
        rec.snapshot_s = time.time() - t
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
            self._inflight.result()
            self._inflight = None
        return time.time() - t

    def close(self) -> None:
        self.finish()
        self.loop.close()

    # ------------------------------------------------------------------ background pipeline

    def _save(self, tier, key: str, step: int) -> tuple[int, str]:
        sink = ChecksumSink(tier.open_write(key))
        with sink:
            torch.save(self.state.payload(step), sink)
        return sink.bytes_written, sink.hexdigest

    async def _pipeline(self, rec: CkptRecord) -> CkptRecord:
        comm, co = self.comm, self.state.coords
        key = layout.rank_file_key(rec.step, comm.rank, co.dp, self.mp_rank)
        first_tier, first_name = (self.local, "local") if self.local is not None else (self.global_, "global")
        receipt = {"rank": comm.rank, "node": comm.node, "key": key, "size": 0, "crc32c": "", "error": ""}
        t0 = time.time()
        try:
            receipt["size"], receipt["crc32c"] = await asyncio.to_thread(self._save, first_tier, key, rec.step)
        except Exception as exc:  # e.g. ENOSPC: the checkpoint becomes incomplete, nothing torn
            receipt["error"] = f"{first_name} write failed: {type(exc).__name__}: {exc}"
        t1 = time.time()
        receipt["write_s"] = t1 - t0
        rec.local_write_s, rec.file_bytes = t1 - t0, receipt["size"]
        self.events.append(Event(comm.rank, "local_write", t0, t1))
        if self.metrics and not receipt["error"]:
            self.metrics.observe_phase("local_write", first_name, rec.local_write_s, backend=first_tier.backend)
            self.metrics.add_bytes("write", first_name, receipt["size"], backend=first_tier.backend)

        receipts = await asyncio.to_thread(comm.all_gather, receipt)
        errors = [r["error"] for r in receipts if r["error"]]
        if self.metrics and comm.rank == 0 and not errors:  # MLPerf style: all bytes / slowest rank
            slowest = max(r["write_s"] for r in receipts)
            self.metrics.set_throughput("save", rec.mode, sum(r["size"] for r in receipts) / max(slowest, 1e-9))
        entries = [layout.FileEntry(r["key"], r["rank"], r["size"], r["crc32c"]) for r in receipts]
        node_entries = [e for e, r in zip(entries, receipts) if r["node"] == comm.node]
        node_ok = not any(r["error"] for r in receipts if r["node"] == comm.node)

        if self.local is not None:
            if comm.is_node_leader and node_ok:
                await self._write_manifest(self.local, "local", rec, node_entries)
            rec.local_complete = node_ok
            drain = None
            if comm.is_node_leader:
                if node_ok:
                    drain = await self.drainer.drain(node_entries)
                else:
                    now = time.time()
                    drain = DrainResult(comm.node, False, now, now, error="local checkpoint incomplete")
                self.events.append(Event(comm.rank, "drain", drain.start, drain.end))
                if self.metrics and drain.ok:
                    self.metrics.observe_phase("drain", "global", drain.seconds, backend=self.global_.backend)
                    self.metrics.add_bytes("write", "global", drain.bytes, backend=self.global_.backend)
            drains = [d for d in await asyncio.to_thread(comm.all_gather, drain) if d is not None]
            mine = next(d for d in drains if d.node == comm.node)
            rec.drain_s = mine.seconds
            errors += [f"node {d.node} drain: {d.error}" for d in drains if not d.ok]

        ok = not errors
        if comm.rank == 0 and ok:
            try:
                await self._write_manifest(self.global_, "global", rec, entries)
            except Exception as exc:
                ok, errors = False, [f"global manifest: {type(exc).__name__}: {exc}"]
        ok, error = await asyncio.to_thread(comm.broadcast, (ok, "; ".join(errors)[:500]))
        rec.global_complete, rec.error = ok, error
        rec.complete_s = time.time() - rec.start
        await self._retention()
        return rec

    async def _write_manifest(self, tier, name: str, rec: CkptRecord, entries) -> None:
        manifest = layout.Manifest(step=rec.step, files=entries, tier=name, mode=rec.mode,
                                   world=self.comm.world_size, meta=self.meta)
        await layout.write_manifest(tier, manifest)
        if self.metrics:
            self.metrics.checkpoint_complete(name, rec.step, time.time())

    async def _retention(self) -> None:
        if self.local is not None and self.comm.is_node_leader:
            await layout.apply_retention(self.local, self.keep)
        if self.comm.rank == 0:
            await layout.apply_retention(self.global_, self.keep)
