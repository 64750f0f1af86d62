"""Peer copies between real processes over gloo: they travel, come back, and a corrupted chunk is refused."""
from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import crc32c
import torch.multiprocessing as mp

from emulator.checkpoint.placement import PeerLayout

MIB = 1 << 20


NODES, RANKS_PER_NODE = 2, 2


def _sizes(rank: int) -> list[int]:
    big = [140 * MIB] if rank == 0 else []  # three 64 MiB chunks
    return [3 * MIB, MIB + 17] + big


def _content(rank: int, i: int, size: int) -> bytes:
    return random.Random(rank * 100 + i).randbytes(size)


def _key(rank: int, i: int) -> str:
    return f"step_00000001/rank{rank:05d}_{i}.pt"


def _rank(rank: int, tmp: str) -> None:
    import os
    import resource

    import torch.distributed as dist

    from emulator.checkpoint import peer
    from emulator.checkpoint.layout import FileEntry
    from tiers.directory import DirTier
    dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=rank,
                            world_size=NODES * RANKS_PER_NODE)
    node = rank // RANKS_PER_NODE
    local = lambda n: DirTier(Path(tmp) / "local" / f"node{n}")  # noqa: E731
    entries = []
    for i, size in enumerate(_sizes(rank)):
        data = _content(rank, i, size)
        with local(node).open_write(_key(rank, i)) as sink:
            sink.write(data)
        entries.append(FileEntry(_key(rank, i), rank, size, f"{crc32c.crc32c(data):08x}"))
    layout = PeerLayout(NODES, 1, "jump", 1)
    transport = peer.PeerTransport(ranks_per_node=RANKS_PER_NODE)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    sent = transport.send_replicas(layout, entries, local(node), DirTier(Path(tmp) / "peer" / f"node{node}"))
    rss_growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss0

    dist.barrier()  # node 0 is lost: its local folder goes, a replacement gets it back
    if rank == 0:
        shutil.rmtree(Path(tmp) / "local" / "node0")
    dist.barrier()
    held = {0: sent.received} if node == 1 else {}
    back = transport.fetch_back(layout, [0], held, DirTier(Path(tmp) / "peer" / f"node{node}"), local(node))
    orphans = transport.fetch_back(layout, [0, 1], held, DirTier(Path(tmp) / "peer" / f"node{node}"), local(node))

    paced = []  # the NIC's token bucket sees every chunk rank 1 sends, in 2 MiB chunks
    pacer = type("Pacer", (), {"clock": lambda self: 0.0, "wait_until": lambda self, due: 0.0,  # a bucket that
                               "reserve": lambda self, n, start=None: paced.append(n) or 0.0})() if rank == 1 else None  # books, never waits
    small = peer.PeerTransport(ranks_per_node=RANKS_PER_NODE, chunk=2 * MIB, pacer=pacer)
    chunked = small.send_replicas(layout, entries, local(node), DirTier(Path(tmp) / "small" / f"node{node}"))

    if rank == 0:  # a byte flipped in flight in every body chunk rank 0 sends
        def corrupting(tensor, dst, group, tag, real=peer._isend):
            if tensor.numel() > 64 * 1024:
                tensor[tensor.numel() // 2] ^= 0xFF
            return real(tensor, dst, group, tag)
        peer._isend = corrupting
    bad = transport.send_replicas(layout, entries, local(node), DirTier(Path(tmp) / "bad" / f"node{node}"))

    Path(tmp, f"rank{rank}.json").write_text(json.dumps({
        "sent": [r.__dict__ for r in sent.received], "sent_errors": sent.errors, "sent_bytes": sent.sent_bytes,
        "back": [r.__dict__ for r in back.received], "back_errors": back.errors,
        "orphan_errors": orphans.errors, "orphans": len(orphans.received),
        "paced": paced, "small_errors": chunked.errors,
        "bad": [r.key for r in bad.received], "bad_errors": bad.errors, "pid": os.getpid(),
        "rss_growth": rss_growth}))
    dist.destroy_process_group()


def test_copies_travel_over_gloo_come_back_and_a_corrupted_chunk_is_refused(tmp_path):
    world = NODES * RANKS_PER_NODE
    mp.start_processes(_rank, args=(str(tmp_path),), nprocs=world, start_method="spawn")
    out = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]

    for rank in range(world):
        node, lr = divmod(rank, RANKS_PER_NODE)
        peer_rank = (1 - node) * RANKS_PER_NODE + lr  # 2 nodes, R=1: each holds the other's copy
        mine = out[rank]
        assert mine["sent_errors"] == [] and mine["sent_bytes"] == sum(_sizes(rank))
        got = {r["key"]: r for r in mine["sent"]}
        assert sorted(got) == sorted(_key(peer_rank, i) for i in range(len(_sizes(peer_rank))))
        for i, size in enumerate(_sizes(peer_rank)):
            data = (tmp_path / "peer" / f"node{node}" / _key(peer_rank, i)).read_bytes()
            assert data == _content(peer_rank, i, size)
            receipt = got[_key(peer_rank, i)]
            assert receipt["node"] == 1 - node and receipt["size"] == size
            assert receipt["crc32c"] == f"{crc32c.crc32c(data):08x}"

    # rank 2 received rank 0's 140 MiB file in 64 MiB chunks: one chunk buffer, not the file, in memory
    assert out[2]["rss_growth"] < 100 * MIB, out[2]["rss_growth"] / MIB

    # fetch back: node 0's local folder was deleted; its ranks got their own files from node 1
    for rank in (0, 1):
        assert out[rank]["back_errors"] == []
        assert sorted(r["key"] for r in out[rank]["back"]) == [_key(rank, i) for i in range(len(_sizes(rank)))]
        for i, size in enumerate(_sizes(rank)):
            assert (tmp_path / "local" / "node0" / _key(rank, i)).read_bytes() == _content(rank, i, size)
    assert out[2]["back"] == [] and out[3]["back"] == []
    for rank in range(world):  # both nodes lost at once: no holder left, every rank says so
        assert out[rank]["orphans"] == 0
        assert out[rank]["orphan_errors"] == [f"node {n}: every holder of its copies is lost" for n in (0, 1)]

    # a smaller chunk: the same bytes; the pacer books each chunk the sender sends
    assert out[1]["paced"] == [2 * MIB, MIB, MIB + 17] and out[0]["paced"] == []
    assert all(o["small_errors"] == [] for o in out)
    assert (tmp_path / "small" / "node1" / _key(1, 0)).read_bytes() == _content(1, 0, 3 * MIB)

    # corrupted in flight: rank 2 refused all of rank 0's files; every rank reports it; nothing published
    for rank in range(world):
        errors = out[rank]["bad_errors"]
        assert len(errors) == len(_sizes(0)) and all(e.startswith("rank 2: refused") for e in errors), errors
    assert out[2]["bad"] == []
    assert not list((tmp_path / "bad" / "node1").rglob("rank00000_*"))
    assert sorted(out[3]["bad"]) == [_key(1, 0), _key(1, 1)]  # the other stream was untouched
