"""YAML mappings to frozen, validated dataclasses and back; ``--set`` overrides; ``extends`` merging.

Generic machinery for ``emulator.config``: each dataclass is built from a
mapping by its type hints (unknown keys, wrong types and impossible values
raise ``ConfigError`` naming the dotted key); each dataclass checks its own
values in ``__post_init__``, so an invalid config cannot exist. Lists become
tuples, so a validated config cannot be changed afterwards either: derive a
new one with ``apply_override`` on its mapping and validate again.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

import yaml

from emulator.errors import ConfigError
from tiers.base import OptionError

#: field names that are Python keywords in the dataclasses, and their YAML names
YAML_NAMES = {"global_": "global"}

#: dataclasses with their own builder and plain form (TierConfig: the backend decides its keys)
CUSTOM: dict[type, tuple] = {}


def yaml_name(field_name: str) -> str:
    return YAML_NAMES.get(field_name, field_name)


def to_plain(obj):
    """Dataclasses to mappings with YAML names, tuples to lists: what ``build`` reads back."""
    for cls, (_, plain) in CUSTOM.items():
        if isinstance(obj, cls):
            return plain(obj)
    if dataclasses.is_dataclass(obj):
        return {yaml_name(f.name): to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    return obj


def coerce(value, tp, key: str):
    """``value`` as type ``tp`` (dataclass, Optional, bool, int, float, str, tuple), or ConfigError."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return None if value is None else coerce(value, args[0], key)
    if tp in CUSTOM:
        return CUSTOM[tp][0](value if value is not None else {}, key)
    if dataclasses.is_dataclass(tp):
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__}")
        return build(tp, value, key)
    return _scalar(value, tp, origin, key)


def _scalar(value, tp, origin, key: str):
    if tp is bool and not isinstance(value, bool):
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if tp is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if tp is str and not isinstance(value, str):
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    if tp in (list, tuple) or origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return tuple(value)
    if tp in (bool, int, str):
        return value
    raise ConfigError(f"{key}: unsupported type {getattr(tp, '__name__', tp)}")  # pragma: no cover


def build(cls, data: dict, prefix: str, *, extra_known: tuple = ()):
    """An instance of dataclass ``cls`` from ``data``; errors name the dotted key."""
    hints = typing.get_type_hints(cls)
    by_yaml = {yaml_name(f.name): f for f in dataclasses.fields(cls)}
    kwargs = {}
    for raw_key, value in data.items():
        key = f"{prefix}.{raw_key}" if prefix else str(raw_key)
        f = by_yaml.get(raw_key)
        if f is None:
            known = ", ".join(sorted([*by_yaml, *extra_known]))
            raise ConfigError(f"{key}: unknown key (known keys here: {known})")
        kwargs[f.name] = coerce(value, hints[f.name], key)
    try:
        return cls(**kwargs)
    except (ConfigError, OptionError) as exc:  # __post_init__ names the field relative to its section
        raise ConfigError(f"{prefix}.{exc}" if prefix else str(exc)) from None


#: a mapping with this key is a tier; changing its value drops the old backend's options
SWITCH_KEY, DEFAULT_BACKEND, KEPT_ON_SWITCH = "backend", "dir", ("emulate",)


def _switched(base: dict, backend) -> dict:
    """``base`` for a tier whose backend becomes ``backend``: the old backend's options go."""
    if base.get(SWITCH_KEY, DEFAULT_BACKEND) == backend:
        return base
    return {k: v for k, v in base.items() if k in KEPT_ON_SWITCH}


def deep_merge(base: dict, over: dict) -> dict:
    """``over`` merged into ``base``, recursively (a tier whose backend changes starts afresh)."""
    if SWITCH_KEY in over:
        base = _switched(base, over[SWITCH_KEY])
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def apply_override(data: dict, assignment: str) -> dict:
    """Apply one ``a.b.c=value`` override; the value is parsed as YAML (numbers, lists, null)."""
    if "=" not in assignment:
        raise ConfigError(f"--set {assignment!r}: expected KEY=VALUE, e.g. checkpoint.interval_steps=5")
    dotted, raw = assignment.split("=", 1)
    parts = dotted.strip().split(".")
    if not all(parts):
        raise ConfigError(f"--set {assignment!r}: bad key {dotted!r}")
    try:
        value: Any = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    data = dict(data)
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = {}
        elif not isinstance(child, dict):
            raise ConfigError(f"--set {dotted}: {'.'.join(parts[:i + 1])} is not a section")
        node[part] = dict(child)
        node = node[part]
    if parts[-1] == SWITCH_KEY and len(parts) > 1:
        node = _switched(node, value)
        parent = data
        for part in parts[:-2]:
            parent = parent[part]
        parent[parts[-2]] = node
    node[parts[-1]] = value
    return data


def read_yaml_text(text: str, origin: str) -> dict:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{origin}: not valid YAML{where}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: the top level must be a mapping of sections")
    return data
