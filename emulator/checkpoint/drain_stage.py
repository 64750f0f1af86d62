"""The drain to global storage: each node leader copies its node's files from a node tier to the
global tier (emulator/checkpoint/drainer.py: bounded concurrency, verification, retries), every rank
learns every node's outcome, and rank 0 commits the checkpoint there with the global manifest, last,
only if every file of every rank arrived."""
from __future__ import annotations

import asyncio
import time

from emulator.checkpoint.drainer import Drainer, DrainResult
from emulator.checkpoint.records import CkptRecord, Event, Receipt
from emulator.checkpoint.retry import describe_error, retrying
from emulator.metrics import NULL_METRICS
from tiers.emulated import anchored_at, counted_as


class Drains:
    """A node's copiers between its tiers, by (source, destination); only the copies to the global
    tier are the drain the metrics count (drains in flight, backlog, busy seconds)."""

    def __init__(self, ctx):
        self.ctx, self._drainers = ctx, {}

    def drainer(self, source: str, dest: str) -> Drainer:
        ctx, cfg = self.ctx, self.ctx.config
        if (source, dest) not in self._drainers:
            self._drainers[source, dest] = Drainer(
                ctx.tier(source), ctx.tier(dest), concurrency=cfg.drain_concurrency, verify=cfg.drain_verify,
                metrics=ctx.metrics if dest == "global" else NULL_METRICS, node=ctx.comm.node,
                policy=cfg.policy, tally=ctx.tally, spool_dir=cfg.spool_dir, read_timeout_s=cfg.read_timeout_s)
        return self._drainers[source, dest]

    def in_flight_since(self) -> float | None:
        """When the oldest drain to the global tier now in progress on this rank began (None: none)."""
        starts = [d.in_flight_since for (_, dest), d in self._drainers.items()
                  if dest == "global" and d.in_flight_since is not None]
        return min(starts, default=None)

    async def node(self, rec: CkptRecord, receipts: list[Receipt], *, written: bool, source: str,
                   where: str) -> list[str]:
        """Node leaders drain their node's files (written to tier ``where``) from tier ``source``;
        everyone learns every node's outcome (collective on ``drain_comm``)."""
        ctx = self.ctx
        comm = ctx.drain_comm
        mine = [r for r in receipts if r.node == comm.node]
        drain = None
        if comm.is_node_leader:
            if written:
                drainer = self.drainer(source, "global")
                files = [e for r in mine if r.where == where for e in r.entries]
                with counted_as("drain"), anchored_at(time.time()):
                    drain = await drainer.drain(files, after_file=lambda: ctx.faults.hit("drain", rec.seq))
                drain.paced_s = drainer.paced_seconds("drain", drain, [f.size for f in files])
                self._record(drain)
        else:
            ctx.faults.hit("drain", rec.seq)
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

    def _record(self, drain: DrainResult) -> None:
        ctx = self.ctx
        ctx.events.append(Event(ctx.comm.rank, "drain", drain.start, drain.end))
        if drain.ok and drain.files:
            backend, clock = ctx.tier("global").backend, ctx.metrics.clock
            ctx.metrics.observe_phase("drain", "global", clock.phase(drain.seconds, drain.paced_s), backend=backend)
            ctx.metrics.add_bytes("write", "global", clock.bytes(drain.bytes), backend=backend)

    async def commit_global(self, step: int, mode: str, entries, errors: list[str], *,
                            seq: int | None = None, meta: dict | None = None) -> tuple[bool, str]:
        """If no rank reported an error, rank 0 writes the global manifest (retried); then every
        rank learns the outcome: (complete on the global tier, the reason if not)."""
        ctx = self.ctx
        ok = not errors
        if ok:
            if seq is not None:
                ctx.faults.hit("manifest", seq)  # rank 0: every file is on the global tier, no manifest
            if ctx.comm.rank == 0:
                try:
                    await retrying(ctx.config.policy, "global manifest", lambda: ctx.write_manifest(
                        ctx.tier("global"), "global", step, mode, entries, meta))
                except Exception as exc:  # noqa: BLE001
                    ok, errors = False, [f"global manifest: {describe_error(exc)}"]
        reason = " ".join("; ".join(errors).split())[:500]
        return await asyncio.to_thread(ctx.drain_comm.broadcast, (ok, reason))
