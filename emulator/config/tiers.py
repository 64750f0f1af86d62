"""The ``tiers:`` section: each tier a backend from the registry (tiers/__init__.py) with its options and
emulation, and its own schedule (interval, keep); the peer tier; the ladder of configured tiers.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Optional

from emulator.config.mapping import CUSTOM, KEPT_ON_SWITCH, SWITCH_KEY, build, check as _check, coerce, to_plain
from emulator.errors import ConfigError
from tiers import backend_class
from tiers.directory import DirOptions
from tiers.emulated import EmulateOptions as EmulateConfig


@dataclass(frozen=True)
class TierConfig:
    """One tier: a backend from the registry (tiers/__init__.py), its options, optional emulation.

    In YAML the backend's options sit beside ``backend`` and ``emulate``
    (``{backend: dir, path: ...}``); which keys exist is the backend's ``Options``."""

    backend: str = "dir"
    options: object = None
    emulate: Optional[EmulateConfig] = None
    #: steps between the checkpoints this tier takes (None: every checkpoint); a multiple of
    #: checkpoint.interval_steps, so a tier takes every N-th checkpoint
    interval_steps: Optional[int] = None
    #: complete checkpoints kept on this tier (None: checkpoint.keep)
    keep: Optional[int] = None


#: the keys every tier has beside its backend's own options (a backend switch keeps all but the backend)
_TIER_KEYS = (SWITCH_KEY, *KEPT_ON_SWITCH)


def _schedule_key(data: dict, name: str, key: str) -> Optional[int]:
    value = coerce(data.pop(name, None), Optional[int], f"{key}.{name}")
    _check(value is None or value >= 1, f"{key}.{name}", "must be >= 1")
    return value


def _build_tier(data, key: str) -> TierConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{key}: expected a mapping, got {type(data).__name__}")
    data = dict(data)
    interval, keep = _schedule_key(data, "interval_steps", key), _schedule_key(data, "keep", key)
    name = data.pop("backend", "dir")
    if not isinstance(name, str):
        raise ConfigError(f"{key}.backend: expected a string, got {name!r}")
    try:
        cls = backend_class(name)
    except KeyError as exc:
        raise ConfigError(f"{key}.backend: {exc.args[0]}") from None
    emulate = coerce(data.pop("emulate", None), Optional[EmulateConfig], f"{key}.emulate")
    options = build(cls.Options, data, key, extra_known=_TIER_KEYS)
    return TierConfig(name, options, emulate, interval, keep)


def _plain_tier(t: TierConfig) -> dict:
    schedule = {k: v for k, v in (("interval_steps", t.interval_steps), ("keep", t.keep)) if v is not None}
    return {"backend": t.backend, **to_plain(t.options), "emulate": to_plain(t.emulate), **schedule}


CUSTOM[TierConfig] = (_build_tier, _plain_tier)


@dataclass(frozen=True)
class PeerConfig:
    """Copies of each node's checkpoint in the host memory of ``replicas`` other nodes, sent over
    the job's transport (emulator/checkpoint/peer.py), as NVIDIA's resiliency extension places them."""

    #: how many other nodes hold a node's copy
    replicas: int = 1
    #: "jump": node n's copies on n + jump, n + 2 jump, ...; "clique": groups of replicas + 1
    #: nodes spaced by jump, each member holding every other member's copy
    placement: str = "jump"
    jump: int = 1
    #: steps between the checkpoints sent to peers (None: every checkpoint of the memory tier)
    interval_steps: Optional[int] = None
    #: complete copies a holder keeps of each node it holds (None: checkpoint.keep)
    keep: Optional[int] = None

    def __post_init__(self):
        _check(self.replicas >= 1, "replicas", "must be >= 1")
        _check(self.placement in ("jump", "clique"), "placement", "must be 'jump' or 'clique'")
        _check(self.jump >= 1, "jump", "must be >= 1")
        _check(self.interval_steps is None or self.interval_steps >= 1, "interval_steps", "must be >= 1")
        _check(self.keep is None or self.keep >= 1, "keep", "must be >= 1")


@dataclass(frozen=True)
class TiersConfig:
    """The tiers, nearest first: memory, peer, local, global (the ladder's rung kinds, emulator/design/ladder.py,
    in its order: tests/unit/project/test_one_place.py); each takes every N-th checkpoint."""

    #: the node's host memory (a folder on /dev/shm); survives a process crash, not a node loss
    memory: Optional[TierConfig] = None
    #: copies of the memory tier's checkpoints in other nodes' memory (needs tiers.memory)
    peer: Optional[PeerConfig] = None
    #: node-local tier (None: write straight to the global tier, "direct to PFS")
    local: Optional[TierConfig] = None
    global_: TierConfig = field(default_factory=lambda: TierConfig("dir", DirOptions("./ckpt-emu-data/global")))

    def configured(self) -> tuple[str, ...]:
        """The names of the configured tiers, nearest first."""
        return tuple(f.name.rstrip("_") for f in fields(self) if getattr(self, f.name) is not None)

    def entry(self, name: str):
        return getattr(self, "global_" if name == "global" else name)

    def host_memory_copies(self, keep: int) -> int:
        """Checkpoints the memory and peer tiers hold in host memory at most (``keep``: the config's
        default keep): keep + 1 of the node's own, and keep + 1 of each node it holds copies for.
        With peers, memory also keeps its own copy of each step it holds peer copies of (the peer
        tier's keep), where those are older than its newest."""
        if self.memory is None:
            return 0
        own = (self.memory.keep or keep) + 1
        if self.peer is None:
            return own
        peer_keep = self.peer.keep or keep
        return own + peer_keep + self.peer.replicas * (peer_keep + 1)
