"""A bandwidth shared fairly by concurrent transfers: a fluid (processor-sharing) model on SimPy.

A link has an aggregate rate (the global tier, or a job-shared tier) and a
per-node cap (a node's NIC or its own share). Every node with bytes in flight
gets the same rate, ``min(node cap, aggregate / active nodes)``; whenever a
transfer starts or ends the rates are recomputed and the next completion is
rescheduled. That is max-min fair sharing with equal caps, which is what the
emulator's shared token buckets converge to when streams interleave
(tiers/emulated.py): N streams on one bucket get R/N each.

A transfer is a *group* of identical nodes moving the same bytes each, so
12,500 nodes that behave alike cost one flow, not 12,500. When the aggregate
cannot bind (every node at its cap fits in it) a transfer is a plain timeout.
"""
from __future__ import annotations

import math

import simpy

#: bytes below which a flow counts as done (floating-point crumbs of a fluid model)
_EPS_BYTES = 1e-3


class Flow:
    __slots__ = ("nodes", "remaining", "event", "bytes_per_node")

    def __init__(self, nodes: int, bytes_per_node: float, event: simpy.Event):
        self.nodes, self.remaining, self.event = nodes, float(bytes_per_node), event
        self.bytes_per_node = float(bytes_per_node)


class SharedLink:
    """Fair sharing of ``aggregate_bps`` among nodes, each capped at ``node_bps`` (bytes/s)."""

    def __init__(self, env: simpy.Environment, aggregate_bps: float = math.inf, node_bps: float = math.inf):
        if not (aggregate_bps > 0 and node_bps > 0):
            raise ValueError("link rates must be > 0")
        if math.isinf(aggregate_bps) and math.isinf(node_bps):
            raise ValueError("a link needs a finite aggregate or per-node rate")
        self.env, self.aggregate_bps, self.node_bps = env, aggregate_bps, node_bps
        self._flows: list[Flow] = []
        self._nodes = 0
        self._free_nodes = 0  # nodes in capped transfers when the aggregate is unlimited
        self._last = 0.0
        self._version = 0
        self.peak_bps = 0.0  # the highest aggregate rate in use at any moment

    @property
    def rate_per_node(self) -> float:
        if not self._nodes:
            return self.node_bps
        return min(self.node_bps, self.aggregate_bps / self._nodes)

    def transfer(self, nodes: int, bytes_per_node: float) -> simpy.Event:
        """An event that succeeds when each of ``nodes`` nodes has moved ``bytes_per_node``."""
        ev = self.env.event()
        if bytes_per_node <= 0 or nodes <= 0:
            ev.succeed()
            return ev
        if math.isinf(self.aggregate_bps):  # nothing to share: each node at its cap
            return self._capped(nodes, bytes_per_node)
        self._advance()
        self._flows.append(Flow(nodes, bytes_per_node, ev))
        self._nodes += nodes
        self._reschedule()
        return ev

    def _capped(self, nodes: int, bytes_per_node: float) -> simpy.Event:
        self._free_nodes += nodes
        self.peak_bps = max(self.peak_bps, self._free_nodes * self.node_bps)
        ev = self.env.timeout(bytes_per_node / self.node_bps)
        epoch = self._version

        def done(_ev):
            if epoch == self._version:
                self._free_nodes -= nodes
        ev.callbacks.append(done)
        return ev

    def cancel_all(self) -> None:
        """Drop every transfer in flight (a failure stopped the job); their events never fire."""
        self._advance()
        self._flows, self._nodes, self._free_nodes = [], 0, 0
        self._version += 1

    def _advance(self) -> None:
        now = self.env.now
        if self._flows and now > self._last:
            moved = (now - self._last) * self.rate_per_node
            for f in self._flows:
                f.remaining -= moved
        self._last = now

    def _reschedule(self) -> None:
        self._version += 1
        if not self._flows:
            return
        rate = self.rate_per_node
        self.peak_bps = max(self.peak_bps, rate * self._nodes)
        delay = max(0.0, min(f.remaining for f in self._flows) / rate)
        version = self._version
        self.env.timeout(delay).callbacks.append(lambda _ev: self._on_timer(version))

    def _on_timer(self, version: int) -> None:
        if version != self._version:
            return  # a transfer started or ended since: a newer timer is pending
        self._advance()
        # the timer was set for the flow with the least left: it is done, whatever rounding says,
        # and so is any flow within a millionth of its bytes of done
        least = min(f.remaining for f in self._flows)
        done = [f for f in self._flows
                if f.remaining <= least + _EPS_BYTES + 1e-6 * f.bytes_per_node]
        for f in done:
            self._flows.remove(f)
            self._nodes -= f.nodes
            f.event.succeed()
        self._reschedule()
