"""The ranks' process group, and which attempt of the job this is, agreed by every rank.

torchrun keeps its store across restarts, so a restarted rank would read the dead
ranks' gloo addresses: each launch of the ranks joins under a prefix of its own.
Every rank must use the same prefix, and after a node was lost and replaced they
cannot derive it alone: a survivor's ``TORCHELASTIC_RESTART_COUNT`` is 1, its
replacement's 0. So rank 0 draws an id for the round and hands it to each rank
over the store (``_agree_round``), and once the group exists the attempt is the
highest restart count of any rank. A node whose agent restarted fewer times than
the job is a replacement: the node that was there before was lost.

A replacement must take the place of the node it replaces: the same node rank,
hence the same ranks and their state. Only torchrun's static rendezvous
(``ckpt-emu run --node-rank``) keeps node ranks; the c10d rendezvous may
renumber them, so a replacement under it is refused (torchrun 2.13's c10d
rendezvous does not get that far: its survivor waits for the replacement's
rank information and times out).
"""
from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta

import torch.distributed as dist

from emulator.errors import UserError
from emulator.job.ownership import FIXED_NODE_RANKS_ENV

_KEYS = "ckpt-emu/membership"
_TIMEOUT = timedelta(minutes=10)  # how long ranks wait for each other (a replacement node to start)


@dataclass(frozen=True)
class Membership:
    #: 0 for the job's first launch of its ranks, N after N restarts (the highest any node saw)
    attempt: int
    #: nodes whose agent joined after the others restarted: replacements for lost nodes
    replaced: tuple[int, ...] = ()


def restarts() -> int:
    """How often this node's torchrun agent restarted its ranks (0 outside torchrun)."""
    try:
        return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    except ValueError:
        return 0


def join_process_group() -> Membership:
    """Initialise the default gloo group (torchrun's env) and agree on the attempt."""
    if "MASTER_ADDR" not in os.environ:  # not under torchrun: one process, nothing to agree
        dist.init_process_group(backend="gloo")
        return Membership(attempt=restarts())
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    # with the agent's store (torchrun's default) the agent serves it; else rank 0 does
    serve = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True" and rank == 0
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, serve,
                          timeout=_TIMEOUT)
    round_id = _agree_round(store, rank, world)
    dist.init_process_group(backend="gloo", store=dist.PrefixStore(f"ckpt-emu/round_{round_id}", store),
                            rank=rank, world_size=world, timeout=_TIMEOUT)
    return _agree_attempt(int(os.environ.get("LOCAL_WORLD_SIZE", world)))


def _agree_round(store, rank: int, world: int) -> str:
    """Every rank gets rank 0's id for this round. Each rank posts a fresh token under its rank
    and waits for the answer keyed by that token; rank 0 answers every token it sees (a dead
    round's stale ones too, which nobody waits for) until every rank has taken the answer."""
    if rank != 0:
        token = uuid.uuid4().hex
        store.set(f"{_KEYS}/hello/{rank}", token)
        round_id = store.get(f"{_KEYS}/answer/{token}").decode()
        store.add(f"{_KEYS}/{round_id}/joined", 1)
        return round_id
    round_id, answered = uuid.uuid4().hex, set()
    deadline = time.monotonic() + _TIMEOUT.total_seconds()
    while store.add(f"{_KEYS}/{round_id}/joined", 0) < world - 1:
        for other in range(1, world):
            key = f"{_KEYS}/hello/{other}"
            seen = store.get(key).decode() if store.check([key]) else None
            if seen is not None and seen not in answered:
                store.set(f"{_KEYS}/answer/{seen}", round_id)
                answered.add(seen)
        if time.monotonic() > deadline:
            raise UserError(f"ranks missing after {_TIMEOUT.total_seconds():.0f} s: not every node joined the job")
        time.sleep(0.02)
    return round_id


def _agree_attempt(ranks_per_node: int) -> Membership:
    """Collective: every rank's restart count, then ``membership``."""
    counts = [None] * dist.get_world_size()
    dist.all_gather_object(counts, restarts())
    return membership(counts, ranks_per_node, fixed_node_ranks=os.environ.get(FIXED_NODE_RANKS_ENV) == "1")


def membership(counts: list[int], ranks_per_node: int, *, fixed_node_ranks: bool) -> Membership:
    """The job's attempt is the highest restart count (rank r's is ``counts[r]``); nodes that
    restarted fewer times have a new agent: a replacement, allowed only with fixed node ranks."""
    attempt = max(counts)
    replaced = tuple(sorted({rank // ranks_per_node for rank, n in enumerate(counts) if n < attempt}))
    if replaced and not fixed_node_ranks:
        raise UserError(f"node(s) {list(replaced)} joined as replacements, but the nodes were not started "
                        "with --node-rank: the c10d rendezvous may renumber the ranks, so a replacement "
                        "cannot take a lost node's place")
    return Membership(attempt=attempt, replaced=replaced)
