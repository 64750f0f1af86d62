"""Emulated node failure (``failures.lose_local_after``).

After N checkpoints (counted across modes) a node fails: checkpointing stops
on every rank at the same step (every rank counts the same checkpoints, so
the decision needs no message), that node's local tier comes back empty
(the node was replaced), and the loads that follow recover from what
survives: the other nodes' local copies, else the global tier.
"""
from __future__ import annotations

from emulator.checkpoint import layout


class NodeLoss:
    def __init__(self, failures_cfg):
        self.after = failures_cfg.lose_local_after
        self.node = failures_cfg.lose_local_node

    def happened(self, checkpoints_taken: int) -> bool:
        return self.after is not None and checkpoints_taken >= self.after

    def lose_local(self, comm, local, loop) -> dict:
        """Collective: the failed node's leader empties its local tier; returns the report's record."""
        comm.barrier()
        if local is not None and comm.node == self.node and comm.is_node_leader:
            for step in loop.run(layout.list_steps(local))[1]:
                loop.run(layout.delete_checkpoint(local, step))
        comm.barrier()
        return {"kind": "lose_local", "after_checkpoint": self.after, "node": self.node}
