"""A link of the design, shared event by event: a fluid (processor-sharing) model on SimPy.

A link is a :class:`~emulator.design.links.LinkLimits`: an aggregate shared by the nodes using it
and a cap per node. Every node with bytes in flight moves at ``limits.node_rate(active nodes)``
(emulator/design/links.py decides it: max-min fair with equal caps), recomputed whenever a
transfer starts or ends, so nodes with fewer bytes finish first and leave their share to the
others: for transfers that start together this is ``fair_finish``, the closed form the planner
uses. A transfer is a *group* of alike nodes moving the same bytes each, so 12,500 alike nodes
cost one flow. Where the aggregate cannot bind a transfer is a plain timeout.

A node's own device shared by its reads and writes (``TierLinks.shared_device``) is one such link
per node group, each node represented once: a read books ``read_cost`` bytes of it per byte.
"""
from __future__ import annotations

import math

import simpy

from emulator.design.links import LinkLimits

#: bytes below which a flow counts as done (floating-point crumbs of a fluid model)
_EPS_BYTES = 1e-3


class Flow:
    __slots__ = ("nodes", "remaining", "event", "bytes_per_node")

    def __init__(self, nodes: int, bytes_per_node: float, event: simpy.Event):
        self.nodes, self.remaining, self.event = nodes, float(bytes_per_node), event
        self.bytes_per_node = float(bytes_per_node)


class SharedLink:
    """A link of ``limits`` shared by the transfers on it."""

    def __init__(self, env: simpy.Environment, limits: LinkLimits):
        if not (limits.aggregate_bps > 0 and limits.node_bps > 0):
            raise ValueError("link rates must be > 0")
        if math.isinf(limits.aggregate_bps) and math.isinf(limits.node_bps):
            raise ValueError("a link needs a finite aggregate or per-node rate")
        self.env, self.limits = env, limits
        self._flows: list[Flow] = []
        self._nodes = 0
        self._free_nodes = 0  # nodes in capped transfers when the aggregate is unlimited
        self._last = 0.0
        self._version = 0
        self.peak_bps = 0.0  # the highest aggregate rate in use at any moment

    @property
    def rate_per_node(self) -> float:
        return self.limits.node_rate(self._nodes)

    def transfer(self, nodes: int, bytes_per_node: float) -> simpy.Event:
        """An event that succeeds when each of ``nodes`` nodes has moved ``bytes_per_node``."""
        if bytes_per_node <= 0 or nodes <= 0:
            ev = self.env.event()
            ev.succeed()
            return ev
        if math.isinf(self.limits.aggregate_bps):  # nothing to share: each node at its cap
            return self._capped(nodes, bytes_per_node)
        ev = self.env.event()
        self._advance()
        self._flows.append(Flow(nodes, bytes_per_node, ev))
        self._nodes += nodes
        self._reschedule()
        return ev

    def _capped(self, nodes: int, bytes_per_node: float) -> simpy.Event:
        rate = self.limits.node_rate(1)
        self._free_nodes += nodes
        self.peak_bps = max(self.peak_bps, self._free_nodes * rate)
        ev = self.env.timeout(bytes_per_node / rate)
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
