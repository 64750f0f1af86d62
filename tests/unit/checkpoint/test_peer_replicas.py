"""Two replicas or more (``tiers.peer.replicas``): each node's copy goes to every holder, over its NIC.

Every shipped config and every other test has one replica, where "one copy" and "every copy" are the
same: a peer tier that sent to its first holder only (or built its layout with one replica whatever
the config said) passed them all. Here 3 nodes of 1 rank hold 2 replicas each, the ranks threads of
this process and gloo replaced by queues (the transport's own streams, headers and checks run).
"""
from __future__ import annotations

import os
import queue
import threading
from types import SimpleNamespace

import crc32c
import pytest

import emulator.checkpoint.peer as peer_mod
from emulator.checkpoint.integrity import format_crc
from emulator.checkpoint.layout import FileEntry
from emulator.checkpoint.placement import PeerLayout
from emulator.checkpoint.replicas import PeerReplicas
from emulator.config import load_config
from tiers.base import TierScope
from tiers.directory import DirTier

NODES, REPLICAS, SIZE = 3, 2, 300_000


class _Wire:
    """gloo between threads: one FIFO per (sender, receiver), and a gather every rank waits on."""

    def __init__(self, world: int):
        self.queues = {(a, b): queue.Queue() for a in range(world) for b in range(world)}
        self.world, self.board, self.barrier = world, [None] * world, threading.Barrier(world, timeout=10)

    def dist(self):
        return SimpleNamespace(get_rank=lambda group: group.rank, get_world_size=lambda group: self.world,
                               all_gather_object=self._gather)

    def _gather(self, out, obj, group):
        self.board[group.rank] = obj
        self.barrier.wait()
        out[:] = list(self.board)
        self.barrier.wait()

    def transport(self, rank: int, pacer) -> peer_mod.PeerTransport:
        t = peer_mod.PeerTransport(SimpleNamespace(rank=rank), ranks_per_node=1, chunk=64 << 10, pacer=pacer)
        t._send = lambda tensor, peer: self.queues[rank, peer].put(tensor.clone())
        t._recv = lambda tensor, peer: tensor.copy_(self.queues[peer, rank].get(timeout=10))
        return t


class _CountingNic:
    """A pacer that books what is sent and never waits: the bytes each node's NIC carried."""

    def __init__(self):
        self.booked = 0

    def clock(self) -> float:
        return 0.0

    def reserve(self, nbytes, start):
        self.booked += nbytes
        return 0.0

    def wait_until(self, due) -> None:
        pass


def _exchange(tmp_path, monkeypatch):
    wire = _Wire(NODES)
    monkeypatch.setattr(peer_mod, "dist", wire.dist())
    layout = PeerLayout(NODES, REPLICAS, "jump", 1)
    nics = [_CountingNic() for _ in range(NODES)]
    memory = [DirTier(tmp_path / f"mem{n}") for n in range(NODES)]
    stores = [DirTier(tmp_path / f"mem{n}-peers") for n in range(NODES)]
    data = [os.urandom(SIZE) for _ in range(NODES)]
    files = []
    for n in range(NODES):
        key = f"step_00000001/rank{n}.pt"
        with memory[n].open_write(key) as sink:
            sink.write(data[n])
        files.append(FileEntry(key, n, SIZE, format_crc(crc32c.crc32c(data[n]))))
    results = [None] * NODES

    def rank(n):
        results[n] = wire.transport(n, nics[n]).send_replicas(layout, [files[n]], memory[n], stores[n])
    threads = [threading.Thread(target=rank, args=(n,)) for n in range(NODES)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return layout, nics, stores, data, results


def test_every_holder_receives_each_nodes_copy_and_each_nic_carries_every_copy(tmp_path, monkeypatch):
    layout, nics, stores, data, results = _exchange(tmp_path, monkeypatch)
    for n in range(NODES):
        assert results[n] is not None and results[n].ok, results[n]
        assert results[n].sent_bytes == REPLICAS * SIZE
        assert nics[n].booked == REPLICAS * SIZE  # the NIC is paced for every copy, not one
        assert sorted(r.node for r in results[n].received) == sorted(layout.sources(n))
    for n in range(NODES):
        for holder in layout.holders(n):
            copy = stores[holder].local_path(f"step_00000001/rank{n}.pt")
            assert copy.read_bytes() == data[n], (n, holder)
    assert sorted(len(layout.holders(n)) for n in range(NODES)) == [REPLICAS] * NODES


def test_the_run_builds_its_peer_tier_with_the_configs_replicas(tmp_path, monkeypatch):
    wire = _Wire(4)
    monkeypatch.setattr(peer_mod, "dist", wire.dist())
    cfg = load_config("llama3-8b", ["tiers.peer={replicas: 2, placement: jump}",
                                    f"tiers.memory={{backend: dir, path: '{tmp_path}/mem/node{{node}}'}}",
                                    "parallelism.ranks=4"])
    comm = SimpleNamespace(nodes=4, local_world_size=1)
    replicas = PeerReplicas.build(cfg, 1, comm, SimpleNamespace(rank=0), TierScope(rank=0, node=0, nodes=4))
    assert replicas.layout.replicas == 2
    assert replicas.holders(0) == [1, 2] and replicas.layout.sources(0) == [3, 2]


@pytest.mark.parametrize("holders, arrived", [((1, 2), True), ((1,), False)])
def test_a_copy_counts_only_once_every_holder_has_it(holders, arrived):
    """``_arrived``: node 0's checkpoint is safe on the peer tier once both its holders hold it."""
    replicas = PeerReplicas(PeerLayout(4, 2, "jump", 1), transport=None, store=None, keep=1, ranks_per_node=1)
    everyone = [(h, 0, [(0, "step_00000001/rank0.pt", SIZE, "0")], []) for h in holders]
    assert replicas._arrived(everyone, 0) is arrived
