"""Emulated node failures: ``failures.lose_local_after`` and ``failures.lose_nodes``.

After N checkpoints (counted across modes) nodes fail: checkpointing stops
on every rank at the same step (every rank counts the same checkpoints, so
the decision needs no message). With ``lose_local_after`` one node's local
tier comes back empty and the loads that follow recover from what survives.
With ``lose_nodes`` each lost node's host memory and local tier are gone, with
the peer copies it held for others (the node was replaced); the run then
recovers at once from the nearest tier that survived, and reports it as the
failure class ``node``, or ``group`` when a node and every node holding its
copies are lost together (only global storage is left to restore it from).
In a soak (``recurring``) the failure comes again every N checkpoints, and the
run recovers from each and trains on (emulator/rank/soak.py).
"""
from __future__ import annotations

import argparse

from emulator.checkpoint import layout


def lose_nodes_override(text: str) -> str:
    """``--lose-nodes N:NODE[,NODE...]`` as the ``--set`` override it stands for."""
    after, _, nodes = text.partition(":")
    numbers = nodes.split(",") if nodes else []
    if not after.isdigit() or not numbers or not all(n.isdigit() for n in numbers):
        raise argparse.ArgumentTypeError(f"{text!r}: use N:NODE[,NODE...], e.g. 3:1 (node 1 after checkpoint 3)")
    return f"failures.lose_nodes={{after: {after}, nodes: [{', '.join(numbers)}]}}"


def failure_class(lost: tuple, nodes: int, holders) -> str:
    """``group`` when some lost node's copies were all held by lost nodes too (``holders(n)``: the
    nodes holding n's copies; none without a peer tier), else ``node``."""
    if holders is None:
        return "node"
    return "group" if any(set(holders(n)) <= set(lost) for n in lost) else "node"


class NodeLoss:
    def __init__(self, failures_cfg, *, recurring: bool = False):
        lose = failures_cfg.lose_nodes
        self.after = lose.after if lose is not None else failures_cfg.lose_local_after
        self.nodes = lose.nodes if lose is not None else (failures_cfg.lose_local_node,)
        self.whole_node = lose is not None  # memory, local and peer copies; else the local tier only
        self.recurring = recurring
        self.due = self.after  # the checkpoint count at which the next failure comes (None: never)

    @property
    def node(self) -> int:
        return self.nodes[0]

    def happened(self, checkpoints_taken: int) -> bool:
        return self.due is not None and checkpoints_taken >= self.due

    def recovered(self) -> None:
        """The failure that was due is over: a recurring one comes again ``after`` checkpoints later."""
        if self.recurring and self.due is not None:
            self.due += self.after

    def lose_local(self, comm, local, loop) -> dict:
        """Collective: the failed node's leader empties its local tier; returns the report's record."""
        self._empty(comm, [local], loop)
        return {"kind": "lose_local", "after_checkpoint": self.due, "node": self.node}

    def lose_nodes(self, comm, tiers: list, loop, *, holders=None) -> dict:
        """Collective: each lost node's leader empties ``tiers`` (its memory, local and held peer
        tiers); returns the report's record, with the failure class."""
        self._empty(comm, tiers, loop)
        return {"kind": "lose_nodes", "after_checkpoint": self.due, "nodes": list(self.nodes),
                "class": failure_class(self.nodes, comm.nodes, holders)}

    def _empty(self, comm, tiers: list, loop) -> None:
        comm.barrier()
        if comm.node in self.nodes and comm.is_node_leader:
            for tier in (t for t in tiers if t is not None):
                loop.run(layout.delete_all(tier))
        comm.barrier()
