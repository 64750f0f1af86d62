"""The job as a SimPy model: training, the checkpoint pipeline per mode, failures and restarts.

One training process (the job: synchronous data parallelism stops as a whole)
alternates ``interval_s`` of training with a checkpoint, as the emulator's
loop does (emulator/rank/run.py, emulator/checkpoint/checkpointer.py):

- **stall** (training blocked): in async mode first any wait for the previous
  checkpoint's pipeline (staging buffers are reused; a previous checkpoint not
  complete is a *deadline miss*), then the snapshot; in sync mode also the
  whole pipeline. With ``checkpoint.async_waits_for: local_write`` the wait is
  only for the previous checkpoint's local write (and the one before it to be
  complete); its drain runs on, reading the local device beside the next
  write: on the write link, each byte weighted write rate / read rate, unless
  the device is duplex (design.Design.local_read_weight, local_read).
- **pipeline**: wait for the previous checkpoint's retention, a barrier, the
  local write of every node (the job waits for the slowest), the local
  manifest, the drain of every node to the global tier (fair share of its
  bandwidth), the global manifest. Without a local tier the ranks write
  straight to the global tier and nothing drains. Drains and global commits
  run in checkpoint order.
- **failures** (failures.Arrivals) interrupt the job: the pipeline in flight
  is abandoned, the job restarts (``restart_s``), restores the newest
  checkpoint complete on the tier that serves it (a process restart: local;
  a node loss: global) and loses the work done since that checkpoint's
  snapshot.

Nodes are simulated in groups of identical ones (design.NodeGroup); every
group's transfer is one flow on a shared link (link.SharedLink).
"""
from __future__ import annotations

from dataclasses import dataclass

import simpy

from emulator.simulation.arrivals import NODE
from emulator.simulation.design import Design
from emulator.simulation.link import SharedLink
from emulator.simulation.outcome import Outcome, Totals


@dataclass(frozen=True)
class RunSpec:
    """How long and how often: ``horizon_s`` of wall time, or (as run) ``saves`` checkpoints then a flush."""

    mode: str
    interval_s: float
    horizon_s: float | None = None
    saves: int | None = None
    restart_s: float = 600.0

    def __post_init__(self):
        if self.mode not in ("sync", "async"):
            raise ValueError(f"mode must be sync or async, got {self.mode!r}")
        if not self.interval_s > 0:
            raise ValueError("interval_s must be > 0")
        if (self.horizon_s is None) == (self.saves is None):
            raise ValueError("give exactly one of horizon_s and saves")


class _Ckpt:
    __slots__ = ("progress", "start")

    def __init__(self, progress: float, start: float):
        self.progress, self.start = progress, start


class JobModel:
    """Build with a design and a spec, then :meth:`run` once."""

    def __init__(self, design: Design, spec: RunSpec, arrivals=None):
        self.d, self.s = design, spec
        self.env = env = simpy.Environment()
        self.local_link = SharedLink(env, design.local_write.aggregate_bps, design.local_write.node_bps) \
            if design.local else None
        g = design.drain if design.local else design.global_write
        self.global_link = SharedLink(env, g.aggregate_bps, g.node_bps)
        v = design.verify_read
        self.verify_link = SharedLink(env, v.aggregate_bps, v.node_bps) if v is not None else None
        #: async_waits_for local_write: the next write waits only for this one's local write
        self.overlap = spec.mode == "async" and design.async_waits_for == "local_write"
        self.device_links = self._device_links()
        r = design.local_read
        self.read_link = SharedLink(env, r.aggregate_bps, r.node_bps) \
            if self.overlap and design.local and r is not None and design.local_read_weight is None else None
        self.t = Totals(len(design.groups))
        self.epoch = 0
        self.inflight = None           # the async pipeline in flight
        self.written = None            # ... and the event of its local write (local_write)
        self.older = None              # the one before it, maybe still draining (local_write)
        self.hk_end = 0.0              # when the last checkpoint's retention ends
        self.restore_local = 0.0       # progress of the newest checkpoint complete on every node's local tier
        self.restore_global = 0.0      # ... complete on the global tier (None-free: 0 is "from scratch")
        self._drain_open = None        # start of the drain in flight
        self._pending = None           # recovery seconds owed after a failure
        self._act, self._act_t = "work", 0.0
        self._snapshot_s = max(g.file_bytes for g in design.groups) / design.snapshot_bps
        weights = [g.nodes for g in design.groups]
        total = sum(weights)
        self._cum = [sum(weights[:i + 1]) / total for i in range(len(weights))]
        self.proc = env.process(self._train())
        if arrivals is not None:
            env.process(self._failures(arrivals))

    def _device_links(self) -> list:
        """Per group, the link its local writes use. Where a drain's reads share the device with the
        next write (local_write, not duplex), each group's nodes get a link of their own: a node's
        write and read split its device, and no group borrows another's."""
        d, n = self.d, len(self.d.groups)
        if not (self.overlap and d.local and d.local_read_weight is not None):
            return [self.local_link] * n
        lim = d.local_write
        if lim.aggregate_bps != float("inf"):  # one device for the job: one link
            return [self.local_link] * n
        return [SharedLink(self.env, lim.node_bps * g.nodes, lim.node_bps) for g in d.groups]

    # ------------------------------------------------------------------ accounting

    def _switch(self, kind: str) -> None:
        """Close the current activity (work adds to progress) and start ``kind``."""
        now = self.env.now
        dt = now - self._act_t
        if dt:
            self.t.time[self._act] = self.t.time.get(self._act, 0.0) + dt
            if self._act == "work":
                self.t.progress += dt
        self._act, self._act_t = kind, now

    def _stale(self, epoch: int) -> bool:
        return epoch != self.epoch

    # ------------------------------------------------------------------ training loop

    def _train(self):
        env, n = self.env, 0
        while True:
            try:
                if self._pending is not None:
                    yield from self._restart()
                if self.s.saves is not None and n >= self.s.saves:
                    break
                self._switch("work")
                yield env.timeout(self.s.interval_s)
                yield from self._checkpoint()
                n += 1
            except simpy.Interrupt as intr:
                self._fail(*intr.cause)
        self._switch("flush")  # as run: the end of training; wait for the last checkpoint, as the emulator does
        self.t.train_end = env.now
        for pipeline in (self.older, self.inflight):
            if pipeline is not None and not pipeline.triggered:
                yield pipeline
        if self.hk_end > env.now:
            yield env.timeout(self.hk_end - env.now)
        self._switch("end")

    def _checkpoint(self):
        env = self.env
        self._switch("stall")
        start = env.now
        self.t.started += 1
        prev, self.inflight = self.inflight, None
        if prev is not None and not prev.triggered:
            self.t.missed += 1
            yield from self._wait_for_previous(prev)
        if self._snapshot_s > 0:
            yield env.timeout(self._snapshot_s)
        ck = _Ckpt(self.t.progress, start)
        self.t.in_flight(+1)
        if self.s.mode == "sync":  # inline: a failure's Interrupt reaches the pipeline where it waits
            yield from self._pipeline(ck, self.epoch)
        else:
            self.written = env.event()
            after = prev if self.overlap else None
            self.inflight = env.process(self._pipeline(ck, self.epoch, self.written, after))
        self.t.stalls.append(env.now - start)

    def _wait_for_previous(self, prev):
        """Async: wait for the previous pipeline, or with local_write only for its local write and
        for the one before it to be complete (as emulator/checkpoint/checkpointer.py does)."""
        if not self.overlap:
            yield prev
            return
        if not self.written.triggered:
            yield self.written
        if self.older is not None and not self.older.triggered:
            yield self.older
        self.older = prev

    # ------------------------------------------------------------------ pipeline

    def _transfer(self, link: SharedLink | list, loads: list):
        links = link if isinstance(link, list) else [link] * len(loads)
        events = [ln.transfer(g.nodes, b) for ln, g, b in zip(links, self.d.groups, loads)]
        return events[0] if len(events) == 1 else self.env.all_of(events)

    def _pipeline(self, ck: _Ckpt, epoch: int, written=None, prev=None):
        """The write stage, then (after the previous checkpoint's drain and commit, where they may
        overlap: ``prev``) the drain stage; ``written`` fires between them."""
        yield from self._write_stage(ck, epoch)
        if self._stale(epoch):
            return
        if written is not None:
            written.succeed()
        if prev is not None and not prev.triggered:
            yield prev  # drains and commits in checkpoint order
            if self._stale(epoch):
                return
        if self.hk_end > self.env.now:  # the previous checkpoint's retention, before this drain
            yield self.env.timeout(self.hk_end - self.env.now)
            if self._stale(epoch):
                return
        yield from self._drain_stage(ck, epoch)

    def _write_stage(self, ck: _Ckpt, epoch: int):
        env, d = self.env, self.d
        pre = max(0.0, self.hk_end - env.now) + d.coord_pre_s  # retention, barrier
        if pre > 0:
            yield env.timeout(pre)
            if self._stale(epoch):
                return
        t0 = env.now
        lat = d.local_latency_s if d.local else d.global_latency_s
        yield self._transfer(self.device_links if d.local else self.global_link,
                             d.write_loads["local" if d.local else "global"])
        if lat > 0:
            yield env.timeout(lat)  # the file's commit
        if self._stale(epoch):
            return
        self.t.local_writes.append(env.now - t0)
        if d.local:
            self.t.local_bytes += d.checkpoint_bytes
            if lat > 0:
                yield env.timeout(lat)  # local manifest
                if self._stale(epoch):
                    return
            self.restore_local = max(self.restore_local if self.restore_local is not None else 0.0, ck.progress)
            self.t.local_complete += 1

    def _drain_stage(self, ck: _Ckpt, epoch: int):
        env, d = self.env, self.d
        if d.local:
            yield from self._drain(epoch)
            if self._stale(epoch):
                return
        post = d.coord_post_s + d.global_latency_s  # gather, global manifest, broadcast
        if post > 0:
            yield env.timeout(post)
            if self._stale(epoch):
                return
        self.restore_global = max(self.restore_global, ck.progress)
        self.t.global_complete(env.now - ck.start, d.checkpoint_bytes)
        self.hk_end = env.now + d.housekeeping_s

    def _drain(self, epoch: int):
        env, d = self.env, self.d
        side = d.drain_waves * d.global_latency_s  # uploads start, size checks end, one wave at a time
        start = env.now
        self._drain_open = start
        if side > 0:
            yield env.timeout(side)
            if self._stale(epoch):
                return
        finish = [env.now] * len(d.groups)
        yield from self._per_group(self.global_link, [g.node_bytes for g in d.groups], finish,
                                   also=self._local_reads(finish))
        if self.verify_link is not None:
            # the checksum read-back: copies sharing a link end one after another, and each file's
            # read-back runs while later files are copied, so only the last file's adds to the drain
            yield from self._per_group(self.verify_link, [g.file_bytes for g in d.groups], finish)
            if self._stale(epoch):
                return
        if side > 0:
            yield env.timeout(side)
            if self._stale(epoch):
                return
        self._drain_open = None
        per_group = [f - start + side for f in finish]
        self.t.drained(per_group)

    def _per_group(self, link, bytes_per_node: list, finish: list, also: list = ()):
        """Every group moves its bytes per node over ``link`` at once, beside the transfers ``also``;
        ``finish[i]`` gets the time group i is done."""
        events = list(also) + self._flows([link] * len(bytes_per_node), bytes_per_node, finish)
        yield events[0] if len(events) == 1 else self.env.all_of(events)

    def _flows(self, links: list, bytes_per_node: list, finish: list) -> list:
        env, events = self.env, []
        for i, (link, g, n) in enumerate(zip(links, self.d.groups, bytes_per_node)):
            ev = link.transfer(g.nodes, n)
            ev.callbacks.append(lambda _ev, i=i: finish.__setitem__(i, max(finish[i], env.now)))
            events.append(ev)
        return events

    def _local_reads(self, finish: list) -> list:
        """With local_write, the drain reads each node's files from its local device: on the write
        link, weighted as the emulator's shared bucket is (not duplex), or on a read link of its own.
        (With ``complete`` nothing else uses the device then, and the read is not modelled.)"""
        d = self.d
        if not (self.overlap and d.local):
            return []
        if d.local_read_weight is not None:
            loads = [g.node_bytes * d.local_read_weight for g in d.groups]
            return self._flows(self.device_links, loads, finish)
        if self.read_link is not None:
            return self._flows([self.read_link] * len(d.groups), [g.node_bytes for g in d.groups], finish)
        return []

    # ------------------------------------------------------------------ failures

    def _failures(self, arrivals):
        env, horizon = self.env, self.s.horizon_s
        for t, kind, u in arrivals:
            if horizon is not None and t >= horizon:
                return
            if t > env.now:
                yield env.timeout(t - env.now)
            if not self.proc.triggered:
                self.proc.interrupt((kind, u))

    def _fail(self, kind: str, u: float) -> None:
        env, d = self.env, self.d
        self._switch("restart")
        self.t.failures[kind] = self.t.failures.get(kind, 0) + 1
        if self._drain_open is not None:
            self.t.drained([env.now - self._drain_open] * len(d.groups), complete=False)
            self._drain_open = None
        self.epoch += 1
        for link in {self.local_link, self.global_link, self.verify_link, self.read_link, *self.device_links}:
            if link is not None:
                link.cancel_all()
        if self.inflight is not None or self.t.inflight_now:
            self.t.in_flight(-self.t.inflight_now)
        self.inflight = self.written = self.older = None
        self.hk_end = 0.0
        group = next(i for i, c in enumerate(self._cum) if u < c or i == len(self._cum) - 1)
        if kind == NODE or self.restore_local is None or not d.local:
            restore, tier = self.restore_global, "global"
        else:
            restore, tier = self.restore_local, "local"
        if kind == NODE:
            self.restore_local = None  # the replaced node's local tier is empty
        self.t.lost += self.t.progress - restore
        self.t.progress = restore
        recovery = 0.0
        if restore > 0:  # something to load
            if tier == "local":
                recovery = d.recovery_local_s
            elif kind == NODE and d.local:  # the new node from global, the others from their local tier
                recovery = max(d.recovery_global[group], d.recovery_local_s)
            else:
                recovery = d.recovery_global_all_s
        self.t.restores[tier] = self.t.restores.get(tier, 0) + 1
        self._pending = recovery

    def _restart(self):
        self._switch("restart")
        yield self.env.timeout(self.s.restart_s)
        self._switch("recovery")
        if self._pending:
            yield self.env.timeout(self._pending)
        self._pending = None

    # ------------------------------------------------------------------ run

    def run(self) -> Outcome:
        if self.s.horizon_s is not None:
            self.env.run(until=self.s.horizon_s)
        else:
            self.env.run()
        self._switch("end")
        return Outcome.from_totals(self.t, self.d, self.s, self.env.now,
                                  peak_global_bps=self.global_link.peak_bps)


def simulate(design: Design, spec: RunSpec, arrivals=None) -> Outcome:
    return JobModel(design, spec, arrivals).run()

