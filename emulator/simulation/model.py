"""The job as one SimPy model: training, checkpoints on the design's tiers and links, failures, recoveries.

It reads only the design (emulator/design): the job's node groups, each tier's links, the ladder
(each tier takes every N-th checkpoint), the failure classes and their recovery costs. One
training process (synchronous data parallelism stops as a whole) alternates ``interval_s`` of
training with a checkpoint, as the emulator's loop does (emulator/checkpoint/checkpointer.py):

- **stall** (training blocked): in async mode first any wait for the previous checkpoint
  (staging buffers are reused: a previous checkpoint not complete is a *deadline miss*), then the
  snapshot; in sync mode also the whole pipeline. With ``async_waits_for: local_write`` the wait
  is only for the previous checkpoint's write (and the one before it to be complete): its copies
  run on beside the next write, reading its source device (a device not duplex is shared by the
  two, a read booking ``read_cost`` bytes of it per byte).
- **pipeline** of checkpoint n, going to the tiers whose ``every`` divides n: wait for the
  previous retention, the fixed cost before the write, every node's write to the nearest file tier
  taking it (its commit, then a node tier's manifest); then, after the previous checkpoint's
  pipeline (copies run in checkpoint order) and its retention, the copies to each farther tier in
  ladder order: a peer's over the NIC, the NVMe's, the drain to global storage (waves of requests,
  every node's bytes sharing the aggregate, the checksum read-back; an object store's copy no
  faster than its request ceilings allow: emulator/design/requests.py), the fixed cost
  after it and the global manifest. Each transfer is every node group's flow on the tier's link.
  Then the retention, which the next pipeline waits for.
- **failures** of each class (emulator/design/failures.py) interrupt the job: the copies in flight
  are abandoned, the tiers that do not survive the class are lost, and the job restores the newest
  checkpoint a surviving tier holds (nearest first among equals; emulator/design/costs.py
  ``restore_choice``): detection, restart or replacement, then the restore (``class_restore_seconds``:
  a storm, or a lost node reading alone while the others read the same step nearer), and loses the
  work done since. A restore runs with nothing else on the
  links (the job is stopped), so its closed form is exact here.

For one checkpoint alone every phase takes its closed form (emulator/design/costs.py); what the
model adds is checkpoints meeting each other on the links and failures meeting both.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import simpy

from emulator.design import ladder
from emulator.design.costs import (class_restore_seconds, drain_floor_seconds, read_back_loads, restore_choice,
                                   retention_seconds, snapshot_seconds, verifies)
from emulator.design.requests import transfer_floor_seconds
from emulator.design.failures import CLASSES
from emulator.simulation.link import SharedLink
from emulator.simulation.outcome import Outcome, Totals


@dataclass(frozen=True)
class RunSpec:
    """How long and how often: ``horizon_s`` of wall time, or (as run) ``saves`` checkpoints then a flush."""

    mode: str
    interval_s: float
    horizon_s: float | None = None
    saves: int | None = None

    def __post_init__(self):
        if self.mode not in ("sync", "async"):
            raise ValueError(f"mode must be sync or async, got {self.mode!r}")
        if not self.interval_s > 0:
            raise ValueError("interval_s must be > 0")
        if (self.horizon_s is None) == (self.saves is None):
            raise ValueError("give exactly one of horizon_s and saves")


class _Ckpt:
    __slots__ = ("progress", "start", "snapped", "due", "first")

    def __init__(self, progress: float, start: float, snapped: float, due: tuple, first: str):
        self.progress, self.start, self.snapped, self.due, self.first = progress, start, snapped, due, first


#: quiet checkpoint starts a model keeps to find a repeated one (a cycle of the ladder is a few)
_QUIET_STARTS = 64


def schedule(design) -> list:
    """Per checkpoint number modulo the tiers' common period: (the tiers it goes to, its first tier)."""
    period = math.lcm(*(t.every for t in design.ladder))
    out = []
    for n in range(period):
        due = tuple(t.name for t in design.ladder if n % t.every == 0)
        out.append((due, ladder.nearest_file_tier(due)))
    return out


class JobModel:
    """Build with a design and a spec, then :meth:`run` once; ``arrivals``: (time, class) in time order."""

    def __init__(self, design, spec: RunSpec, arrivals=None, *, skip_cycles: bool = True):
        self.d, self.s = design, spec
        #: quiet checkpoint starts seen this epoch, by state (:meth:`_cycles_to_skip`); None: never skip
        self._quiet_starts = {} if skip_cycles and spec.horizon_s is not None else None
        self.next_failure_s = math.inf
        self.env = env = simpy.Environment()
        self.groups = design.job.groups
        self.schedule = schedule(design)
        self.overlap = spec.mode == "async" and design.async_waits_for == "local_write"
        self.verify = verifies(design)
        self.links = {n: self._links(n) for n in design.tiers}
        # what every checkpoint moves, worked out once: each group's (nodes, bytes per node)
        self.node_loads = [(g.nodes, g.node_bytes) for g in self.groups]
        self.read_back_loads = read_back_loads(design) if self.verify else []
        self.copies = {n: design.replicas if n == "peer" else 1 for n in design.tiers}
        self.checkpoint_bytes = design.job.checkpoint_bytes
        self.write_latency_s = {n: design.link(n).latency_s * (1 if n == "global" else 2) for n in design.tiers}
        if "global" in design.tiers:
            latency = design.link("global").latency_s
            #: the drain's wave of requests before and after its copies; the fixed cost after them and the manifest
            self.drain_side_s = -(-design.job.heaviest.files // design.drain_concurrency) * latency
            self.commit_s = design.fixed_post_s + latency
            self.write_floor_s = transfer_floor_seconds(design, verify="none")
            self.drain_floor_s = drain_floor_seconds(design)
        self.t = Totals(design.tiers, CLASSES)
        #: the progress of the checkpoints each tier holds, oldest first: its newest ``keep`` (retention)
        self.held = {n: (0.0,) for n in design.tiers}
        self.keep = {t.name: t.keep for t in design.ladder}
        self.epoch = 0
        self.count = 0                 # checkpoints taken since the start
        self.inflight = None           # the async pipeline in flight
        self.written = None            # ... and the event of its write (local_write)
        self.older = None              # the one before it, maybe still copying (local_write)
        self.hk_end = 0.0              # when the last checkpoint's retention ends
        self._retention: dict = {}     # the tiers a checkpoint went to -> its retention's seconds
        #: async: training slowed by this share of every background copy's time (a calibration's
        #: interference), owed as training time not progressed before the next checkpoint
        self.interference = design.interference_share if spec.mode == "async" else 0.0
        self.slowed = 0.0
        self.snapshot_s = snapshot_seconds(design)
        self.drain_open = None         # start of the drain in flight
        self.owed = None               # (class, restart seconds, restore seconds) after a failure
        self._recovering = None        # (class, start) of the recovery under way
        self._act, self._act_t = "work", 0.0
        self.proc = env.process(self._train())
        if arrivals is not None:
            env.process(self._failures(arrivals))

    def _links(self, name: str) -> dict:
        """Tier ``name``'s links: the write (or a peer's send, or the drain) and the read-back; in
        overlap, a node device shared by reads and writes (one link per group) or its read link."""
        env, t = self.env, self.d.link(name)
        alone = not self.overlap  # one checkpoint's stages at a time: a link's transfers never meet
        out = {"write": SharedLink(env, t.write, alone),
               "drain": SharedLink(env, t.drain, alone) if t.drain != t.write else None}
        if name == "global" and self.verify:
            out["read"] = SharedLink(env, t.read, alone)
        if self.overlap and name in ladder.node_file_tiers():
            device = t.shared_device()
            if device is not None:
                out["device"] = [SharedLink(env, device) for _ in self.groups]
            elif t.read is not None and not math.isinf(t.read.node_bps):
                out["read"] = SharedLink(env, t.read)
        return out

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

    # ------------------------------------------------------------------ training loop

    def _train(self):
        env, n = self.env, 0
        while True:
            try:
                if self.owed is not None:
                    yield from self._recover()
                if self.s.saves is not None and n >= self.s.saves:
                    break
                self._switch("work")
                yield env.timeout(self.s.interval_s)
                if self.slowed > 0:
                    self._switch("interference")
                    slowed, self.slowed = self.slowed, 0.0
                    yield env.timeout(slowed)
                skip = self._cycles_to_skip()
                if skip > 0:
                    yield env.timeout(skip)
                    self._act_t = env.now  # the skipped cycles' time is in the totals already
                yield from self._checkpoint()
                n += 1
            except simpy.Interrupt as intr:
                self._fail(intr.cause)
        self._switch("flush")  # as run: the end of training; wait for the last checkpoint, as the emulator does
        self.t.train_end = env.now
        for pipeline in (self.older, self.inflight):
            if pipeline is not None and not pipeline.triggered:
                yield pipeline
        if self.hk_end > env.now:
            yield env.timeout(self.hk_end - env.now)
        self._switch("end")

    def _cycles_to_skip(self) -> float:
        """At a checkpoint's start with nothing in flight, in a state seen one ladder cycle or more
        before in this epoch (the same place in the schedule, retention, interference owed and tiers'
        copies as far behind): every cycle repeats it until the next failure. Add the whole cycles
        that start before it (or the horizon) to the totals at once; returns their seconds."""
        if self._quiet_starts is None or not self._quiet():
            return 0.0
        now = self.env.now
        self._switch(self._act)  # the time so far into the totals
        key = (self.count % len(self.schedule), self._act, round(max(0.0, self.hk_end - now), 7),
               round(self.slowed, 7), tuple(tuple(round(self.t.progress - v, 7) for v in h)
                                            for h in self.held.values()))
        seen = self._quiet_starts.get(key)
        if len(self._quiet_starts) >= _QUIET_STARTS:
            self._quiet_starts.clear()
        self._quiet_starts[key] = (now, self.count, self.t.progress, self.t.mark())
        if seen is None:
            return 0.0
        then, count, progress, mark = seen
        cycle = now - then
        times = math.ceil((min(self.next_failure_s, self.s.horizon_s) - now) / cycle) - 1 if cycle > 0 else 0
        if times < 1:
            return 0.0
        gained = times * (self.t.progress - progress)
        self.t.repeat(mark, times)
        self.count += times * (self.count - count)
        self.held = {n: tuple(v + gained for v in h) for n, h in self.held.items()}
        if self.hk_end > now:
            self.hk_end += times * cycle
        self._quiet_starts.clear()
        return times * cycle

    def _quiet(self) -> bool:
        """Nothing in flight: no pipeline, drain, transfer or recovery."""
        if self.owed is not None or self.drain_open is not None:
            return False
        if any(p is not None and not p.triggered for p in (self.inflight, self.older)):
            return False
        return all(link.idle() for link in self._every_link())

    def _every_link(self):
        for links in self.links.values():
            for link in (links["write"], links["drain"], links.get("read"), *links.get("device", ())):
                if link is not None:
                    yield link

    def _checkpoint(self):
        env = self.env
        self._switch("stall")
        start = env.now
        self.t.started += 1
        self.count += 1
        due, first = self.schedule[self.count % len(self.schedule)]
        prev, self.inflight = self.inflight, None
        if prev is not None and not prev.triggered:
            self.t.missed += 1
            yield from self._wait_for_previous(prev)
        if self.snapshot_s > 0:
            yield env.timeout(self.snapshot_s)
        ck = _Ckpt(self.t.progress, start, env.now, due, first)
        self.t.in_flight(+1)
        if self.s.mode == "sync":  # inline: a failure's Interrupt reaches the pipeline where it waits
            yield from self._pipeline(ck, self.epoch)
        else:
            self.written = env.event() if self.overlap else None
            self.inflight = env.process(self._pipeline(ck, self.epoch, self.written, prev if self.overlap else None))
        self.t.stalls.append(env.now - start)

    def _wait_for_previous(self, prev):
        """Async: wait for the previous pipeline, or with local_write only for its write and for the
        one before it to be complete (as emulator/checkpoint/checkpointer.py does)."""
        if not self.overlap:
            yield prev
            return
        if not self.written.triggered:
            yield self.written
        if self.older is not None and not self.older.triggered:
            yield self.older
        self.older = prev

    # ------------------------------------------------------------------ pipeline

    def _pipeline(self, ck: _Ckpt, epoch: int, written=None, prev=None):
        """The write stage, then (after the previous checkpoint's pipeline where they may overlap:
        ``prev``, and its retention) the copies; ``written`` fires between them."""
        yield from self._write(ck, epoch)
        if epoch != self.epoch:
            return
        if written is not None:
            written.succeed()
        if prev is not None and not prev.triggered:
            yield prev  # copies and commits in checkpoint order
            if epoch != self.epoch:
                return
        if self.hk_end > self.env.now:  # the previous checkpoint's retention, before these copies
            yield self.env.timeout(self.hk_end - self.env.now)
            if epoch != self.epoch:
                return
        for name in ck.due:
            if name != ck.first:
                yield from self._copy(ck, name, epoch)
                if epoch != self.epoch:
                    return
        self.t.complete += 1
        self.t.in_flight(-1)
        self.hk_end = self.env.now + self._retention_after(ck.due)

    def _retention_after(self, due: tuple) -> float:
        if due not in self._retention:
            self._retention[due] = retention_seconds(self.d, taking=due)
        return self._retention[due]

    def _write(self, ck: _Ckpt, epoch: int):
        """Every node writes its files to the checkpoint's first tier: each file's commit, then a node
        tier's manifest (global's comes after every node's files, with the fixed cost after)."""
        env, d, name = self.env, self.d, ck.first
        pre = max(0.0, self.hk_end - env.now) + d.fixed_pre_s  # retention, barrier
        if pre > 0:
            yield env.timeout(pre)
            if epoch != self.epoch:
                return
        t0 = env.now
        links = self.links[name]
        device = links.get("device")
        if device:
            events = [dev.transfer(1, g.node_bytes) for dev, g in zip(device, self.groups)]
            yield events[0] if len(events) == 1 else env.all_of(events)
        else:
            yield links["write"].transfer_all(self.node_loads)
        lat = self.write_latency_s[name]
        if lat > 0:
            yield env.timeout(lat)
        if name == "global" and env.now - t0 < self.write_floor_s:  # an object store's request ceilings
            yield env.timeout(self.write_floor_s - (env.now - t0))
        if epoch != self.epoch:
            return
        self.t.writes.append(env.now - t0)
        if name == "global":
            yield from self._commit_global(ck, epoch, env.now - t0)
        else:
            self._durable(ck, name, env.now - t0)

    def _durable(self, ck: _Ckpt, name: str, seconds: float) -> None:
        self.held[name] = (self.held[name] + (ck.progress,))[-self.keep[name]:]
        self.slowed += self.interference * seconds
        self.t.tiers[name].copied(seconds, self.env.now - ck.snapped, self.checkpoint_bytes * self.copies[name])

    def _copy(self, ck: _Ckpt, name: str, epoch: int):
        """Tier ``name``'s copy of the checkpoint from a nearer one."""
        env = self.env
        t0 = env.now
        if name == "global":
            yield from self._drain(ck, epoch)
            return
        copies = self.copies[name]
        yield self.links[name]["write"].transfer_all([(n, b * copies) for n, b in self.node_loads])
        if epoch == self.epoch:
            self._durable(ck, name, env.now - t0)

    def _drain(self, ck: _Ckpt, epoch: int):
        """Every node copies its files to global storage, ``drain_concurrency`` at a time (a wave of
        requests before and after), reading them from the nearest tier holding them; then the
        read-back (costs.read_back_loads: the last file's, or every file's where reads and writes share
        global storage's device)."""
        env, side = self.env, self.drain_side_s
        start = self.drain_open = env.now
        if side > 0:
            yield env.timeout(side)
            if epoch != self.epoch:
                return
        links = self.links["global"]
        link = links["drain"] or links["write"]
        events = [link.transfer_all(self.node_loads)] + self._source_reads(ck)
        yield events[0] if len(events) == 1 else env.all_of(events)
        if epoch != self.epoch:
            return
        if self.verify:
            yield links["read"].transfer_all(self.read_back_loads)
            if epoch != self.epoch:
                return
        if side > 0:
            yield env.timeout(side)
            if epoch != self.epoch:
                return
        if env.now - start < self.drain_floor_s:  # an object store's request ceilings
            yield env.timeout(self.drain_floor_s - (env.now - start))
            if epoch != self.epoch:
                return
        self.drain_open = None
        self.t.drains.append(env.now - start)
        self.t.drain_busy += env.now - start
        yield from self._commit_global(ck, epoch, env.now - start)

    def _source_reads(self, ck: _Ckpt) -> list:
        """With local_write, the drain reads each node's files from the nearest node tier holding them:
        on its device, shared with the next write unless duplex, or on its own read link. (With
        ``complete`` nothing else uses the device then, and the read is not modelled.)"""
        if not self.overlap:
            return []
        source = "local" if "local" in ck.due else ck.first
        links = self.links.get(source, {})
        if "device" in links:
            cost = self.d.link(source).read_cost
            return [dev.transfer(1, g.node_bytes * cost) for dev, g in zip(links["device"], self.groups)]
        if "read" in links:
            return [links["read"].transfer_all(self.node_loads)]
        return []

    def _commit_global(self, ck: _Ckpt, epoch: int, seconds: float):
        """The fixed cost after the copies (gathers), then the global manifest: durable on global."""
        env, post = self.env, self.commit_s
        if post > 0:
            yield env.timeout(post)
            if epoch != self.epoch:
                return
        self._durable(ck, "global", seconds)
        self.t.global_durable(env.now - ck.start)

    # ------------------------------------------------------------------ failures

    def _failures(self, arrivals):
        env, horizon = self.env, self.s.horizon_s
        for t, cls in arrivals:
            if horizon is not None and t >= horizon:
                break
            self.next_failure_s = t
            if t > env.now:
                yield env.timeout(t - env.now)
            if not self.proc.triggered:
                self.proc.interrupt(cls)
        self.next_failure_s = math.inf

    def _fail(self, cls: str) -> None:
        """A failure of ``cls``: abandon what is in flight, lose the tiers it destroys, roll back to the
        newest checkpoint a surviving tier holds and owe its recovery."""
        env, d = self.env, self.d
        self._switch("restart")
        self._end_recovery()
        self.t.failures[cls] += 1
        if self.drain_open is not None:
            self.t.drain_busy += env.now - self.drain_open
            self.drain_open = None
        self.epoch += 1
        if self._quiet_starts is not None:
            self._quiet_starts.clear()
        for link in self._every_link():
            link.cancel_all()
        self.t.in_flight(-self.t.inflight_now)
        self.inflight = self.written = self.older = None
        self.hk_end = 0.0
        tier, others = restore_choice(d, cls, self.held)  # before the tiers it destroys are gone
        restored = max(self.held[tier])
        for name in d.tiers:
            if not d.survives(cls, name):
                self.held[name] = ()
        self.t.lost[cls] += self.t.progress - restored
        self.t.progress = restored
        self.t.restores[tier] = self.t.restores.get(tier, 0) + 1
        restore = class_restore_seconds(d, cls, tier, others) if restored > 0 else 0.0  # nothing to load from scratch
        self.owed = (cls, d.failures.of(cls).before_restore_s, restore)

    def _recover(self):
        """Detection and restart (or replacement), then the restore; a failure meanwhile starts another."""
        cls, before, restore = self.owed
        self._recovering = (cls, self.env.now)
        self._switch("restart")
        if before > 0:
            yield self.env.timeout(before)
        self._switch("recovery")
        if restore > 0:
            yield self.env.timeout(restore)
        self._end_recovery()
        self.owed = None

    def _end_recovery(self) -> None:
        if self._recovering is not None:
            cls, start = self._recovering
            self.t.recovering[cls] += self.env.now - start
            self._recovering = None

    # ------------------------------------------------------------------ run

    def run(self) -> Outcome:
        if self.s.horizon_s is not None:
            self.env.run(until=self.s.horizon_s)
        else:
            self.env.run()
        self._switch("end")
        self._end_recovery()
        links = self.links["global"]
        peak = max(link.peak_bps for link in (links["write"], links["drain"]) if link is not None)
        return Outcome.from_totals(self.t, self.d, self.s, self.env.now, peak_global_bps=peak)


def simulate(design, spec: RunSpec, arrivals=None, *, skip_cycles: bool = True) -> Outcome:
    return JobModel(design, spec, arrivals, skip_cycles=skip_cycles).run()
