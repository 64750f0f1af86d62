"""What one node gets of a shared link: the one rule the emulator and the simulator both use.

A link has an aggregate limit shared by every node of the job (the parallel file
system's or object store's bandwidth) and a cap per node (its NIC). When k nodes
transfer at once, each gets min(cap, aggregate / k): fair sharing until the NIC
binds. k nodes that each move B bytes at once then take B·k/A, or B/NIC if the
NIC binds first.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class LinkLimits:
    """Limits of one shared link: aggregate over the job and cap per node, bytes/s (inf: none)."""

    aggregate_bps: float = math.inf
    node_bps: float = math.inf

    def node_rate(self, active_nodes: int) -> float:
        """What each node gets when ``active_nodes`` transfer at once (fair share)."""
        return min(self.node_bps, self.aggregate_bps / max(1, active_nodes))


def node_share(aggregate_bps: float, nic_bps: float, concurrent_nodes: int) -> float:
    """Bytes/s one node gets when ``concurrent_nodes`` use a link of ``aggregate_bps`` behind a NIC."""
    return LinkLimits(aggregate_bps, nic_bps).node_rate(concurrent_nodes)
