"""Which device a rank's live state lives on: ``state.device`` resolved against this machine.

``auto`` takes a GPU when torch has CUDA and sees a device, else the CPU; ``cuda``
without one is a user error (one line, exit 2) at preflight and again in each rank
(a rank may run on another node than the CLI). Rank ``r`` uses GPU
``local_rank % device_count``: a node with fewer GPUs than ranks shares each GPU (and
its PCIe link) between ranks, which ``describe`` records so the report can say so.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from emulator.errors import UserError


def cuda_available() -> bool:
    return torch.cuda.is_available() and torch.cuda.device_count() > 0


def _why_no_cuda() -> str:
    if not torch.backends.cuda.is_built():
        return f"this torch ({torch.__version__}) is built without CUDA"
    return f"torch {torch.__version__} sees no CUDA device"


def resolve_kind(requested: str) -> str:
    """``cpu`` or ``cuda`` for ``state.device``; raises UserError for cuda without a device."""
    if requested == "cpu":
        return "cpu"
    if requested == "cuda" and not cuda_available():
        raise UserError(f"state.device: cuda requested but {_why_no_cuda()} "
                        "(set state.device=auto or cpu)")
    return "cuda" if cuda_available() else "cpu"


@dataclass(frozen=True)
class Placement:
    """Where one rank's state lives: the torch device, and how many ranks of its node share it."""

    kind: str  # "cpu" or "cuda"
    index: int | None = None  # GPU index on the node
    count: int = 0  # GPUs visible on the node
    sharing: int = 1  # ranks of this node on the same GPU
    name: str = ""

    @property
    def device(self) -> torch.device:
        return torch.device("cpu") if self.kind == "cpu" else torch.device("cuda", self.index)

    def describe(self) -> dict:
        return {"kind": self.kind, "index": self.index, "count": self.count, "sharing": self.sharing,
                "name": self.name}


def gpu_for(local_rank: int, count: int) -> int:
    return local_rank % count


def ranks_sharing(local_rank: int, local_world: int, count: int) -> int:
    """How many of the node's ``local_world`` ranks use the same GPU as ``local_rank``."""
    mine = gpu_for(local_rank, count)
    return sum(1 for r in range(local_world) if gpu_for(r, count) == mine)


def place(requested: str, local_rank: int, local_world: int) -> Placement:
    """Resolve ``state.device`` for one rank and make its GPU the current one."""
    kind = resolve_kind(requested)
    if kind == "cpu":
        return Placement("cpu")
    count = torch.cuda.device_count()
    index = gpu_for(local_rank, count)
    torch.cuda.set_device(index)
    return Placement("cuda", index, count, ranks_sharing(local_rank, local_world, count),
                     torch.cuda.get_device_name(index))
