"""A peer copy's stream is the exchange's: its paced time is every rank's paced sends, not this rank's.

A rank's stream also receives its source's file, whose sends are paced in that rank's process, and
its own sends wait on its node's NIC behind its node's other ranks. Covered by its own spans only,
the 405B peer design on whole nodes read 11-18 % of its copies as this host's at x250 (rank 2's
stream 3.12 s against 1.72 s of its own paced sends, while the node's NIC was busy throughout).
"""
from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from emulator.checkpoint.peer import PeerResult
from emulator.checkpoint.placement import PeerLayout
from emulator.checkpoint.replicas import PeerReplicas
from tiers import paced


class _Comm:
    node, local_rank, is_node_leader = 0, 0, False

    def __init__(self, others: list):
        self.others = others

    def all_gather(self, mine):
        return [mine, *self.others]


def test_the_exchange_returns_the_paced_sends_of_its_node_and_its_sources():
    paced.clear()
    t = time.time()

    def send_replicas(layout, files, source, store):
        start = time.time()
        time.sleep(0.05)
        paced.record("replicate", start, start + 0.05)  # this rank's own paced send
        return PeerResult(stream_s=0.5)
    transport = SimpleNamespace(send_replicas=send_replicas)
    replicas = PeerReplicas(PeerLayout(4, 1, "clique", 1), transport, store=None, keep=1, ranks_per_node=1)
    source = (1, 0, [], [(t + 1, t + 1.3)])    # node 0's source (its clique's other node), in its own process
    elsewhere = (2, 0, [], [(t + 2, t + 2.5)])  # neither this node nor a source of it
    ok, seconds, stream_s, spans = asyncio.run(replicas.replicate(_Comm([source, elsewhere]), None, 2, None, {}))
    assert stream_s == 0.5
    assert paced.covered(spans, t, t + 10) == pytest.approx(0.05 + 0.3, abs=0.01)
    paced.clear()
