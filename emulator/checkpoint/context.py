"""What a rank's checkpoint mechanisms share: its tiers, its collectives, its settings, its books.

The checkpointer (emulator/checkpoint/checkpointer.py) is a small base that runs one pipeline per
checkpoint through mechanisms of one concern each: the snapshot, the write of the ranks' files to
the first tier, the copies between a node's tiers, the drain to global storage, retention. Each
reads and records through this context: the tiers by name, the pipeline's settings
(:class:`PipelineConfig`), which steps each of the node's tiers holds, each tier's outcome on the
checkpoint's record, the manifests it writes.
"""
from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field

from emulator.checkpoint import layout
from emulator.checkpoint.drainer import DEFAULT_VERIFY
from emulator.checkpoint.integrity import DEFAULT_READ_TIMEOUT_S
from emulator.checkpoint.records import CkptRecord
from emulator.checkpoint.retry import RetryPolicy
from emulator.checkpoint.schedule import Schedule


@dataclass(frozen=True)
class PipelineConfig:
    """How a rank's pipeline runs: retention when no schedule says (``keep``), the drain's
    concurrency and verification, what a full first tier and a failed drain do, what the next async
    checkpoint waits for, the drain's read-back timeout, its spool folder, its retries, and the
    snapshot's paced seconds (None: the host's copy, unpaced)."""

    keep: int = 2
    drain_concurrency: int = 4
    drain_verify: str = DEFAULT_VERIFY
    #: the first tier full (ENOSPC): write the file to "global" instead, or "skip" the checkpoint
    on_local_full: str = "global"
    #: a checkpoint that could not reach the global tier: "continue", "fail", or "auto" (fail in sync)
    on_failure: str = "auto"
    #: what the next async checkpoint waits for of the previous one: "complete" or "local_write"
    async_waits_for: str = "complete"
    #: a drain's read-back of one file is given up after this many seconds (checkpoint.read_timeout_s)
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    #: where drains through a tier without files spool (None: the system's temporary folder)
    spool_dir: str | None = None
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    #: seconds the snapshot of this rank's state takes in the design, on the run's clock
    #: (emulator/job/clock.py); None: the snapshot is this host's copy, unpaced
    snapshot_seconds: float | None = None

    def stops_on_failure(self, mode: str) -> bool:
        """Whether a checkpoint of ``mode`` that did not reach the global tier ends the run."""
        return self.on_failure == "fail" or (self.on_failure == "auto" and mode == "sync")


@dataclass
class RankContext:
    """One rank's tiers (``tiers``: name -> tier or None), collectives (``comm`` for the write
    stage, ``drain_comm`` for the drain stage), schedule and settings, and its books."""

    state: object  # RankState
    comm: object
    drain_comm: object
    tiers: dict
    schedule: Schedule
    config: PipelineConfig
    metrics: object
    tally: object
    faults: object
    meta: dict
    peer: object = None  # emulator/checkpoint/replicas.py PeerReplicas, None without a peer tier
    #: provenance written into manifests: the step ranges whose mutations the state holds
    first_step: int = 1
    lineage_base: list = field(default_factory=list)
    events: deque = field(default_factory=lambda: deque(maxlen=8000))  # bounded for soak runs
    node_steps: dict = field(default_factory=dict)  # tier -> steps complete there on this node, by this run

    def tier(self, name: str):
        """The tier called ``name``, None where the run has none."""
        return self.tiers.get(name)

    async def guarded(self, coro) -> bool:
        """Run a tier operation whose failure must not stop the pipeline (or skip a collective)."""
        try:
            await coro
            return True
        except Exception:  # noqa: BLE001 - counted; the step simply stays incomplete there
            self.tally.count("tier_error")
            return False

    def manifest_meta(self, step: int) -> dict:
        return {**self.meta, "lineage": [list(r) for r in self.lineage_base] + [[self.first_step, step]]}

    def node_meta(self, rec: CkptRecord) -> dict:
        """A node tier's manifest meta: also the tiers the checkpoint is due on (resume reads it)."""
        return {**self.manifest_meta(rec.step), "due": list(rec.due)}

    async def write_manifest(self, tier, name: str, step: int, mode: str, entries, meta: dict | None = None) -> None:
        manifest = layout.Manifest(step=step, files=sorted(entries, key=lambda e: e.rank), tier=name, mode=mode,
                                   world=self.comm.world_size, meta=meta or self.manifest_meta(step))
        await layout.write_manifest(tier, manifest)
        self.metrics.checkpoint_complete(name, step, time.time())

    def tier_done(self, rec: CkptRecord, name: str, complete: bool, seconds: float,
                  paced_s: float | None = None, *, stream_s: float | None = None) -> None:
        """Note the checkpoint's outcome on tier ``name``: the record's per-tier view and its lag
        (``stream_s``: of ``seconds``, the bytes' stream; the rest is the software around it)."""
        lag = time.time() - (rec.start + rec.wait_s) if complete else 0.0
        rec.tiers[name] = {"complete": bool(complete), "lag_s": lag, "seconds": seconds, "paced": paced_s}
        if stream_s is not None:
            rec.tiers[name]["stream_s"] = stream_s

    async def observe_lags(self, rec: CkptRecord) -> None:
        """The checkpoint's lags at full size, as the report takes them: the slowest rank's (a rank whose
        write ended first waited for its node's device, and its own figure counts that wait once): per
        tier the node's slowest (node leaders), to the global tier the job's (rank 0). Collective on
        ``drain_comm``; nothing without metrics."""
        m = self.metrics
        if not m.live:
            return
        mine = {name: m.clock.tier_lag(rec, name) for name, view in rec.tiers.items() if view.get("complete")}
        durable = m.clock.record(rec)["lag_s"] if rec.global_complete else None
        everyone = await asyncio.to_thread(self.drain_comm.all_gather, (self.comm.node, mine, durable))
        if self.comm.is_node_leader:
            node = [lags for n, lags, _ in everyone if n == self.comm.node]
            for name in mine:
                m.observe_tier_lag(name, max(lags.get(name, 0.0) for lags in node))
        if self.comm.rank == 0 and durable is not None:
            m.observe_durability_lag(rec.mode, max(d for *_, d in everyone if d is not None))

    async def from_node_leader(self, rec: CkptRecord, name: str) -> dict:
        """Every rank takes its node leader's view of tier ``name`` (the leader wrote the node's
        manifest there); collective on ``drain_comm``."""
        comm = self.drain_comm
        views = await asyncio.to_thread(comm.all_gather, (comm.node, comm.is_node_leader, rec.tiers.get(name)))
        rec.tiers[name] = next(v for node, leader, v in views if leader and node == comm.node)
        return rec.tiers[name]
