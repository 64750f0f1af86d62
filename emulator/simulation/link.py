"""A link of the design, shared event by event: a fluid (processor-sharing) model on SimPy.

A link is a :class:`~emulator.design.links.LinkLimits`: an aggregate shared by the nodes using it
and a cap per node. Every node with bytes in flight moves at ``limits.node_rate(active nodes)``
(emulator/design/links.py decides it: max-min fair with equal caps), recomputed whenever a
transfer starts or ends, so nodes with fewer bytes finish first and leave their share to the
others: for transfers that start together this is ``fair_finish``, the closed form the planner
uses. A transfer is a *group* of alike nodes moving the same bytes each, so 12,500 alike nodes
cost one flow, and the groups of one copy start as one batch with one event. Between transfers
starting the link steps its flows from one completion to the next without an event each: a timer
fires only when a batch is done. Where the aggregate cannot bind a transfer is a plain timeout.

A node's own device shared by its reads and writes (``TierLinks.shared_device``) is one such link
per node group, each node represented once: a read books ``read_cost`` bytes of it per byte.
"""
from __future__ import annotations

import heapq
import math

import simpy

from emulator.design.links import LinkLimits

#: bytes below which a flow counts as done (floating-point crumbs of a fluid model)
_EPS_BYTES = 1e-3
#: distinct exclusive batches whose seconds a link keeps
_BATCH_CACHE = 256


class Flow:
    __slots__ = ("nodes", "remaining", "bytes_per_node", "batch")

    def __init__(self, nodes: int, bytes_per_node: float, batch: "_Batch"):
        self.nodes, self.remaining, self.batch = nodes, float(bytes_per_node), batch
        self.bytes_per_node = float(bytes_per_node)


class _Batch:
    """Transfers started together, one event when every one of them is done."""

    __slots__ = ("event", "left")

    def __init__(self, event: simpy.Event, left: int):
        self.event, self.left = event, left


class SharedLink:
    """A link of ``limits`` shared by the transfers on it. ``exclusive``: its user starts a batch only
    once the one before it is done (or cancelled), so a batch is one timeout (checked)."""

    def __init__(self, env: simpy.Environment, limits: LinkLimits, exclusive: bool = False):
        if not (limits.aggregate_bps > 0 and limits.node_bps > 0):
            raise ValueError("link rates must be > 0")
        if math.isinf(limits.aggregate_bps) and math.isinf(limits.node_bps):
            raise ValueError("a link needs a finite aggregate or per-node rate")
        self.env, self.limits, self.exclusive = env, limits, exclusive
        self._busy_until = -math.inf  # exclusive: when the batch in flight is done
        self._flows: list[Flow] = []
        self._nodes = 0
        self._last = 0.0       # the time the flows' ``remaining`` are as of
        self._version = 0
        self._ends: list = []  # (end, nodes) of the transfers in flight when the aggregate is unlimited
        self._free_nodes = 0   # ... and their nodes
        self.peak_bps = 0.0    # the highest aggregate rate in use at any moment
        self._batch_cache: dict = {}  # exclusive: an alike batch's seconds, by its loads

    @property
    def rate_per_node(self) -> float:
        return self.limits.node_rate(self._nodes)

    def transfer(self, nodes: int, bytes_per_node: float) -> simpy.Event:
        """An event that succeeds when each of ``nodes`` nodes has moved ``bytes_per_node``."""
        return self.transfer_all(((nodes, bytes_per_node),))

    def transfer_all(self, loads) -> simpy.Event:
        """An event that succeeds when every load, (nodes, bytes per node), starting now is moved."""
        loads = [(n, b) for n, b in loads if n > 0 and b > 0]
        if not loads:
            ev = self.env.event()
            ev.succeed()
            return ev
        if math.isinf(self.limits.aggregate_bps):  # nothing to share: each node at its cap
            return self._capped(loads)
        if self.exclusive:
            return self._alone(loads)
        self._settle(self.env.now)
        self._advance(self.env.now)
        batch = _Batch(self.env.event(), len(loads))
        for nodes, b in loads:
            self._flows.append(Flow(nodes, b, batch))
            self._nodes += nodes
        self._plan()
        return batch.event

    def _capped(self, loads) -> simpy.Event:
        now, rate = self.env.now, self.limits.node_rate(1)
        if self.exclusive:  # the batch before it is done
            self.peak_bps = max(self.peak_bps, sum(n for n, _ in loads) * rate)
            return self.env.timeout(max(b for _, b in loads) / rate)
        while self._ends and self._ends[0][0] <= now:
            self._free_nodes -= heapq.heappop(self._ends)[1]
        for nodes, b in loads:
            heapq.heappush(self._ends, (now + b / rate, nodes))
            self._free_nodes += nodes
        self.peak_bps = max(self.peak_bps, self._free_nodes * rate)
        return self.env.timeout(max(b for _, b in loads) / rate)

    def _alone(self, loads) -> simpy.Event:
        """An exclusive link's batch: stepped to its end at once, one timeout."""
        now = self.env.now
        if now < self._busy_until:
            raise RuntimeError("a transfer started on an exclusive link while another was in flight")
        nodes = sum(n for n, _ in loads)
        self.peak_bps = max(self.peak_bps, self.limits.node_rate(nodes) * nodes)
        if len(loads) == 1:  # one step
            self._busy_until = now + loads[0][1] / self.limits.node_rate(nodes)
        else:
            self._busy_until = now + self._batch_seconds(tuple(loads), nodes)
        return self.env.timeout(max(0.0, self._busy_until - now))

    def _batch_seconds(self, loads: tuple, nodes: int) -> float:
        """An exclusive batch's seconds, stepped once per distinct batch: every checkpoint's drain
        of a design moves the same loads."""
        seconds = self._batch_cache.get(loads)
        if seconds is None:
            batch = _Batch(None, len(loads))
            flows = [[float(b), Flow(n, b, batch)] for n, b in loads]
            seconds = self._steps(flows, 0.0, nodes, {batch: len(loads)})[0]
            if len(self._batch_cache) >= _BATCH_CACHE:
                self._batch_cache.clear()
            self._batch_cache[loads] = seconds
        return seconds

    def idle(self) -> bool:
        """Whether no transfer is in flight on the link."""
        now = self.env.now
        return not self._flows and self._busy_until <= now and all(end <= now for end, _ in self._ends)

    def cancel_all(self) -> None:
        """Drop every transfer in flight (a failure stopped the job); their events never fire (an
        exclusive link's: fire, to nobody waiting)."""
        self._busy_until = -math.inf
        self._flows, self._nodes, self._ends, self._free_nodes = [], 0, [], 0
        self._last = self.env.now
        self._version += 1

    # The flows' progress is stepped from one completion to the next (the flow with the least left
    # done, and any within a millionth of its bytes of done), without an event per step: an event
    # fires only when a batch is done, and a transfer joining or a cancel settles the steps before it.

    def _advance(self, now: float) -> None:
        if self._flows and now > self._last:
            moved = (now - self._last) * self.limits.node_rate(self._nodes)
            for f in self._flows:
                f.remaining -= moved
        self._last = now

    def _next(self) -> float:
        """When the next flow is done, if nothing joins."""
        return self._last + max(0.0, min(f.remaining for f in self._flows) / self.limits.node_rate(self._nodes))

    def _step(self) -> None:
        """To the next completion: the flow with the least left is done, whatever rounding says, and
        so is any flow within a millionth of its bytes of done."""
        self._advance(self._next())
        least = min(f.remaining for f in self._flows)
        done = [f for f in self._flows if f.remaining <= least + _EPS_BYTES + 1e-6 * f.bytes_per_node]
        for f in done:
            self._flows.remove(f)
            self._nodes -= f.nodes
            f.batch.left -= 1
            if f.batch.left == 0:
                f.batch.event.succeed()

    def _settle(self, now: float) -> None:
        """Take the steps due by ``now``."""
        while self._flows and self._next() <= now:
            self._step()

    def _plan(self) -> None:
        """One timer for the first batch to be done: steps a copy of the flows to it, and the timer
        puts the link in the state the steps reached."""
        self._version += 1
        if not self._flows:
            return
        self.peak_bps = max(self.peak_bps, self.limits.node_rate(self._nodes) * self._nodes)
        left = {}
        for f in self._flows:
            left[f.batch] = left.get(f.batch, 0) + 1
        t, flows, nodes, finished = self._steps([[f.remaining, f] for f in self._flows], self._last, self._nodes, left)
        version = self._version
        self.env.timeout(max(0.0, t - self.env.now)).callbacks.append(
            lambda _ev: self._on_timer(version, t, flows, nodes, left, finished))

    def _steps(self, flows: list, t: float, nodes: int, left: dict) -> tuple:
        """Step ``flows``, [bytes left, Flow] as of ``t`` with ``nodes`` moving, to the first batch
        done (``left``: each batch's flows not done, updated): (then, the flows left, their nodes,
        the batches done). The same steps as :meth:`_step`."""
        cap, agg = self.limits.node_bps, self.limits.aggregate_bps
        finished = []
        while not finished:
            rate = min(cap, agg / max(1, nodes))
            least = min(f[0] for f in flows)
            end = t + max(0.0, least / rate)
            if end > t:
                moved = (end - t) * rate
                for f in flows:
                    f[0] -= moved
                least = min(f[0] for f in flows)
            t, keep = end, []
            for f in flows:
                flow = f[1]
                if f[0] <= least + _EPS_BYTES + 1e-6 * flow.bytes_per_node:
                    nodes -= flow.nodes
                    left[flow.batch] -= 1
                    if not left[flow.batch]:
                        finished.append(flow.batch)
                else:
                    keep.append(f)
            flows = keep
        return t, flows, nodes, finished

    def _on_timer(self, version: int, t: float, flows: list, nodes: int, left: dict, finished: list) -> None:
        if version != self._version:
            return  # a transfer started or was cancelled since: a newer timer is pending
        for remaining, f in flows:
            f.remaining = remaining
        self._flows, self._nodes, self._last = [f for _, f in flows], nodes, t
        for batch, n in left.items():
            batch.left = n
        for batch in finished:
            batch.event.succeed()
        self._plan()
