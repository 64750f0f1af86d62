"""Storage tiers behind one async interface (``tiers.base.Tier``), and the registry of backends.

A backend is one module with a ``Tier`` subclass (its ``name``, ``Options``,
``from_options``, ``preflight`` and crash hooks live on the class) plus one
line in ``BUILTIN``. Backends outside this package need no line here: name
them in a config as ``package.module:ClassName``, or register them for every
config with an entry point in the ``ckpt_emu.tiers`` group (as fsspec and
torchsnapshot do). Modules are imported only when a config names them, so
``ckpt-emu sizes`` never imports boto3.

``make_tier`` turns a validated tier config (``backend``, ``options``,
``emulate``) into a Tier: the backend, wrapped in emulation when ``emulate`` is set.
"""
from __future__ import annotations

import importlib
from importlib import metadata

from .base import InvalidKey, OptionError, Sink, Tier, TierError, TierScope, TierWrapper, unwrap, validate_key

__all__ = ["InvalidKey", "OptionError", "Sink", "Tier", "TierError", "TierScope", "TierWrapper",
           "backend_class", "backend_names", "make_tier", "pace", "unwrap", "validate_key"]

#: name -> "module:Class" of the backends that ship with ckpt-emu
BUILTIN = {
    "dir": "tiers.directory:DirTier",
    "s3": "tiers.s3:S3Tier",
    "memory": "tiers.memory:MemoryTier",
}
ENTRY_POINT_GROUP = "ckpt_emu.tiers"


def backend_names() -> list[str]:
    """Names a config may use (besides ``module:Class``)."""
    plugins = {ep.name for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    return sorted(set(BUILTIN) | plugins)


def backend_class(name: str) -> type[Tier]:
    """The Tier subclass a config's ``backend`` names; KeyError with the choices if none."""
    target = BUILTIN.get(name)
    if target is None:
        found = [ep.value for ep in metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
        target = found[0] if found else (name if ":" in name else None)
    if target is None:
        raise KeyError(f"unknown backend {name!r} (use {', '.join(backend_names())}, or module:Class)")
    module, _, attr = target.partition(":")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise KeyError(f"backend {name!r}: cannot import {target} ({exc})") from None
    if not (isinstance(cls, type) and issubclass(cls, Tier)):
        raise KeyError(f"backend {name!r}: {target} is not a tiers.base.Tier subclass")
    return cls


def make_tier(cfg, *, scope: TierScope | None = None) -> Tier:
    """Build the tier ``cfg`` describes (an ``emulator.config.TierConfig``) for ``scope``."""
    scope = scope or TierScope()
    return pace(backend_class(cfg.backend).from_options(cfg.options, scope=scope), cfg.emulate, scope=scope)


def pace(tier: Tier, emulate, *, scope: TierScope | None = None) -> Tier:
    """``tier`` wrapped in emulation as ``emulate`` (EmulateOptions) says; as it is without one."""
    if emulate is None:
        return tier
    from .emulated import EmulatedTier
    return EmulatedTier.from_config(tier, emulate, scope=scope or TierScope())
