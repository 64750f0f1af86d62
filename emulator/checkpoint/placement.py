"""Where a node's peer copies go (the peer tier, emulator/checkpoint/peer.py), as NVIDIA's
resiliency extension places them with a replication factor R and a "jump":

* ``jump``: node n's replicas on n+jump, n+2*jump, ... n+R*jump (mod nodes);
* ``clique``: NVRx's groups: for each m < jump the nodes m, m+jump, m+2*jump, ...
  are cut into cliques of R+1 consecutive members; every member holds every other
  member's copy (nodes must divide into jump * (R+1)).

Plain arithmetic without torch, so the launcher checks a layout before it starts anything.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from emulator.errors import ConfigError

PLACEMENTS = ("jump", "clique")


@dataclass(frozen=True)
class PeerLayout:
    """Which nodes hold which node's copies; raises ConfigError (one line) when impossible."""

    nodes: int
    replicas: int = 1
    placement: str = "jump"
    jump: int = 1

    def __post_init__(self):
        n, r, j = self.nodes, self.replicas, self.jump
        if self.placement not in PLACEMENTS:
            raise ConfigError(f"placement: {self.placement!r} is not one of {', '.join(PLACEMENTS)}")
        if r < 1 or j < 1:
            raise ConfigError(f"replicas and jump must be >= 1, got replicas={r}, jump={j}")
        if r >= n:
            raise ConfigError(f"replicas: {r} replica(s) need more than {r} nodes, the job has {n}")
        if self.placement == "clique" and n % (j * (r + 1)):
            raise ConfigError(f"jump: {n} nodes do not split into cliques of {r + 1} (replicas + 1) "
                              f"nodes spaced {j} apart (nodes must be a multiple of {j * (r + 1)})")
        if self.placement == "jump":
            back = next((k for k in range(1, r + 1) if k * j % n == 0), None)
            if back is not None:
                raise ConfigError(f"jump: with jump {j} on {n} nodes, replica {back} of a node lands "
                                  f"on the node itself")

    def clique(self, node: int) -> list[int]:
        """The members of ``node``'s clique, itself included, in order."""
        size, j = self.replicas + 1, self.jump
        first = (node // j) // size * size
        return [node % j + j * (first + i) for i in range(size)]

    def holders(self, node: int) -> list[int]:
        """The nodes that hold ``node``'s copies."""
        if self.placement == "clique":
            return [m for m in self.clique(node) if m != node]
        return [(node + k * self.jump) % self.nodes for k in range(1, self.replicas + 1)]

    def sources(self, node: int) -> list[int]:
        """The nodes whose copies ``node`` holds."""
        if self.placement == "clique":
            return self.holders(node)
        return [(node - k * self.jump) % self.nodes for k in range(1, self.replicas + 1)]

    def server(self, node: int, lost: Sequence[int]) -> int | None:
        """The holder that gives ``node`` its files back: its first holder not lost, else None."""
        return next((h for h in self.holders(node) if h not in lost), None)


def holders(node: int, nodes: int, replicas: int, placement: str = "jump", jump: int = 1) -> list[int]:
    """The nodes that hold ``node``'s copies (``PeerLayout.holders``)."""
    return PeerLayout(nodes, replicas, placement, jump).holders(node)


def sources(node: int, nodes: int, replicas: int, placement: str = "jump", jump: int = 1) -> list[int]:
    """The nodes whose copies ``node`` holds (``PeerLayout.sources``)."""
    return PeerLayout(nodes, replicas, placement, jump).sources(node)
