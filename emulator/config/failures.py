"""The ``failures:`` config section: injected faults (emulator/checkpoint/injection.py), each firing only
where and when it names."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from emulator.config.mapping import build
from emulator.errors import ConfigError


def _check(cond: bool, key: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"{key}: {msg}")


KILL_PHASES = ("staging", "local_write", "drain", "manifest")


@dataclass(frozen=True)
class KillConfig:
    """SIGKILL rank ``rank``'s own process during ``phase`` of its ``checkpoint``-th checkpoint."""

    rank: int = 0
    #: 1-based, counted across modes, in the launch attempt ``attempt``
    checkpoint: int = 1
    #: staging (after the snapshot), local_write (file fully written, not yet published),
    #: drain (node leader: after the first file reached the global tier; others: while waiting),
    #: manifest (rank 0: every file drained, global manifest not yet written)
    phase: str = "local_write"
    #: which launch attempt it fires in: 0 the first; N after the Nth torchrun restart
    #: (torchrun --max-restarts / PET_MAX_RESTARTS), so one run can crash and recover repeatedly
    attempt: int = 0

    def __post_init__(self):
        _check(self.rank >= 0, "rank", "must be >= 0")
        _check(self.checkpoint >= 1, "checkpoint", "must be >= 1")
        _check(self.phase in KILL_PHASES, "phase", f"unknown phase {self.phase!r} (use {', '.join(KILL_PHASES)})")
        _check(self.attempt >= 0, "attempt", "must be >= 0")


@dataclass(frozen=True)
class GlobalFaultConfig:
    """Make the global tier fail (like an S3 503) or slow down for ``seconds``."""

    #: the window opens when this checkpoint (1-based, across modes) starts
    checkpoint: int = 1
    seconds: float = 10.0
    #: "error": every request in the window fails with a transient error; "slow": each waits delay_s
    kind: str = "error"
    delay_s: float = 0.5

    def __post_init__(self):
        _check(self.checkpoint >= 1, "checkpoint", "must be >= 1")
        _check(0 < self.seconds <= 86400, "seconds", "must be in (0, 86400]")
        _check(self.kind in ("error", "slow"), "kind", "must be 'error' or 'slow'")
        _check(0 <= self.delay_s <= 600, "delay_s", "must be between 0 and 600")


@dataclass(frozen=True)
class CorruptConfig:
    """Damage rank ``rank``'s file on ``tier`` once checkpoint ``checkpoint`` is complete there."""

    checkpoint: int = 1
    rank: int = 0
    tier: str = "local"
    #: flip (xor a byte in the middle), truncate (to half), delete (manifest lists a missing file)
    how: str = "flip"

    def __post_init__(self):
        _check(self.checkpoint >= 1, "checkpoint", "must be >= 1")
        _check(self.rank >= 0, "rank", "must be >= 0")
        _check(self.tier in ("local", "global"), "tier", "must be 'local' or 'global'")
        _check(self.how in ("flip", "truncate", "delete"), "how", "must be flip, truncate or delete")


@dataclass(frozen=True)
class LoseNodesConfig:
    """Nodes fail after ``after`` checkpoints: their host memory and local tier are gone (the
    node was replaced), with the peer copies they held; the run then recovers from the nearest
    tier that survived (a peer's memory, else global storage) and reports the recovery."""

    after: int = 1
    nodes: tuple = (1,)

    def __post_init__(self):
        _check(self.after >= 1, "after", "must be >= 1")
        nodes = tuple(self.nodes) if isinstance(self.nodes, (list, tuple)) else (self.nodes,)
        _check(len(nodes) >= 1 and all(isinstance(n, int) and n >= 0 for n in nodes), "nodes",
               f"must be node numbers >= 0, got {self.nodes!r}")
        _check(len(set(nodes)) == len(nodes), "nodes", "lists a node twice")
        object.__setattr__(self, "nodes", tuple(sorted(nodes)))


@dataclass(frozen=True)
class FailuresConfig:
    """Injected faults (emulator/checkpoint/injection.py); every one fires only where and when it names."""

    #: a node fails after this many checkpoints (1-based, counted across modes): checkpointing
    #: stops, that node's local tier is lost (it was replaced), and the loads that follow recover
    lose_local_after: Optional[int] = None
    #: which node loses its local tier
    lose_local_node: int = 0
    #: SIGKILLs: a list of KillConfig mappings
    kill: tuple = ()
    global_fault: Optional[GlobalFaultConfig] = None
    corrupt: Optional[CorruptConfig] = None
    #: nodes lost with their memory and local tiers (a node loss, or a whole replica group's)
    lose_nodes: Optional[LoseNodesConfig] = None

    def __post_init__(self):
        _check(self.lose_nodes is None or self.lose_local_after is None, "lose_nodes",
               "one node failure per run: lose_nodes or lose_local_after, not both")
        if self.lose_local_after is not None:
            _check(self.lose_local_after >= 1, "lose_local_after", "must be >= 1")
        _check(self.lose_local_node >= 0, "lose_local_node", "must be >= 0")
        kills = []
        for i, k in enumerate(self.kill):
            if isinstance(k, KillConfig):
                kills.append(k)
                continue
            _check(isinstance(k, dict), f"kill[{i}]", f"expected a mapping (rank, checkpoint, phase), got {k!r}")
            kills.append(build(KillConfig, k, f"kill[{i}]"))
        object.__setattr__(self, "kill", tuple(kills))  # frozen: set once, while validating
