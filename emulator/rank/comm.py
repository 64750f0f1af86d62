"""The few collectives the emulator needs, behind a tiny interface.

``DistComm`` uses torch.distributed (gloo) with a dedicated process group per
user, so the background checkpoint pipeline and the training loop never share
one group's ordering. ``SoloComm`` is the single-process stand-in used by
benchmarks and unit tests, where every collective is the identity.
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist


class SoloComm:
    rank = 0
    world_size = 1
    local_rank = 0
    local_world_size = 1
    node = 0
    nodes = 1

    @property
    def is_node_leader(self) -> bool:
        return self.local_rank == 0

    def all_gather(self, obj) -> list:
        return [obj]

    def broadcast(self, obj, src: int = 0):
        return obj

    def all_max(self, value: float) -> float:
        return value

    def all_min(self, value: float) -> float:
        return value

    def barrier(self) -> None:
        pass


class DistComm(SoloComm):
    """Collectives over one gloo group; create one per thread that issues collectives."""

    def __init__(self, group=None):
        self.group = group
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        self.local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", self.world_size))
        self.node = int(os.environ.get("GROUP_RANK", 0))
        self.nodes = max(1, self.world_size // self.local_world_size)

    def all_gather(self, obj) -> list:
        out = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def broadcast(self, obj, src: int = 0):
        box = [obj]
        dist.broadcast_object_list(box, src=src, group=self.group)
        return box[0]

    def _reduce(self, value: float, op) -> float:
        t = torch.tensor([float(value)], dtype=torch.float64)
        dist.all_reduce(t, op=op, group=self.group)
        return float(t.item())

    def all_max(self, value: float) -> float:
        return self._reduce(value, dist.ReduceOp.MAX)

    def all_min(self, value: float) -> float:
        return self._reduce(value, dist.ReduceOp.MIN)

    def barrier(self) -> None:
        dist.barrier(group=self.group)
