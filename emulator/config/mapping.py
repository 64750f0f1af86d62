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
import math
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from emulator.errors import ConfigError, shown
from tiers.base import OptionError, TierError
from tiers.fileops import open_regular

#: the largest config text read (a design is a few KiB); with aliases refused, parsing is bounded by it
MAX_YAML_BYTES = 1 << 20
#: the largest integer a config value may be (int64, what every count and size fits in)
MAX_INT = 2**63 - 1


class _AliasRefused(yaml.YAMLError):
    def __init__(self, event):
        super().__init__()
        self.name, self.problem_mark = event.anchor, event.start_mark


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, mark):
        super().__init__()
        self.problem_mark = mark


class ConfigLoader(yaml.SafeLoader):
    """``yaml.safe_load`` that refuses aliases (``*name``: shared references expand without bound, a
    1.2 KB file to over 2 GiB) and a key given twice in one mapping (the second silently won), and
    reads YAML 1.2 floats such as ``1e-05`` as numbers (YAML 1.1 reads them as text)."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            raise _AliasRefused(self.peek_event())
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                if key in seen:
                    raise _DuplicateKey(key_node.start_mark)
                seen.add(key)
            except TypeError:
                pass  # an unhashable key: the constructor below says so
        return super().construct_mapping(node, deep=deep)


ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def load_yaml(text: str, origin: str, *, text_if_not_yaml: bool = False):
    """The YAML ``text`` (a config, a ``--set`` value) as plain data; ConfigError naming ``origin``
    for an alias, a text over MAX_YAML_BYTES or (unless ``text_if_not_yaml``: then the text
    itself is the value) bad YAML."""
    if len(text) > MAX_YAML_BYTES:
        raise ConfigError(f"{origin}: {len(text)} characters, more than a config may hold ({MAX_YAML_BYTES})")
    try:
        return yaml.load(text, Loader=ConfigLoader)  # noqa: S506 - a SafeLoader
    except _AliasRefused as exc:
        raise ConfigError(f"{origin}: YAML aliases are not allowed (*{shown(exc.name, 40, quote=False)} at line "
                          f"{exc.problem_mark.line + 1}): write the value out") from None
    except _DuplicateKey as exc:  # the key itself is not quoted: it may be anything a file holds
        raise ConfigError(f"{origin}: a key given twice in one mapping (line {exc.problem_mark.line + 1}): "
                          "write each key once") from None
    except RecursionError:
        raise ConfigError(f"{origin}: nested too deeply to read") from None
    except yaml.YAMLError as exc:
        if text_if_not_yaml:
            return text
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{origin}: not valid YAML{where}") from None

#: field names that are Python keywords in the dataclasses, and their YAML names
YAML_NAMES = {"global_": "global"}

#: dataclasses with their own builder and plain form (TierConfig: the backend decides its keys)
CUSTOM: dict[type, tuple] = {}


def check(cond: bool, key: str, msg: str) -> None:
    """Raise ``ConfigError`` "key: msg" unless ``cond``: a dataclass's ``__post_init__`` names its own field."""
    if not cond:
        raise ConfigError(f"{key}: {msg}")


def names_a_file(path, *, or_folder: bool = False) -> bool:
    """Whether ``path`` (a path or a package resource) is a regular file, or with ``or_folder``
    anything at all; False for a name no file can have (too long, say), where ``is_file`` raises."""
    if isinstance(path, str) or not hasattr(path, "is_file"):  # else a Path, or a package resource
        path = Path(path)
    try:
        return path.exists() if or_folder else path.is_file()
    except OSError:
        return False


def read_config_text(path, origin: str) -> str:
    """A config file's text: a regular file (never a FIFO that would block), at most MAX_YAML_BYTES,
    UTF-8; ConfigError naming ``origin`` otherwise."""
    try:
        fd = open_regular(path, what=origin)
    except (OSError, OptionError, TierError) as exc:
        raise ConfigError(f"cannot read config {shown(str(path), 200, quote=False)}: "
                          f"{getattr(exc, 'strerror', None) or exc}") from None
    with open(fd, "rb") as fh:
        raw = fh.read(MAX_YAML_BYTES + 1)
    if len(raw) > MAX_YAML_BYTES:
        raise ConfigError(f"{origin}: more than {MAX_YAML_BYTES} bytes, more than a config may hold")
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise ConfigError(f"{origin}: not a text file (UTF-8)") from None


def yaml_name(field_name: str) -> str:
    return YAML_NAMES.get(field_name, field_name)


def to_plain(obj):
    """Dataclasses to mappings with YAML names, tuples to lists: what ``build`` reads back."""
    for cls, (_, plain) in CUSTOM.items():
        if isinstance(obj, cls):
            return plain(obj)
    if dataclasses.is_dataclass(obj):
        return {yaml_name(f.name): to_plain(getattr(obj, f.name)) for f in keys(obj)}
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
        raise ConfigError(f"{key}: expected true or false, got {shown(value)}")
    if tp is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(f"{key}: expected an integer, got {shown(value)}")
    if tp is int and abs(value) > MAX_INT:
        raise ConfigError(f"{key}: {shown(value)} is out of range (at most {MAX_INT})")
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {shown(value)}")
        endless = not math.isfinite(value) if isinstance(value, float) else abs(value) > MAX_INT
        if endless:
            raise ConfigError(f"{key}: expected a finite number, got {shown(value)}")
        return float(value)
    if tp is str and not isinstance(value, str):
        raise ConfigError(f"{key}: expected a string, got {shown(value)}")
    if tp in (list, tuple) or origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {shown(value)}")
        return tuple(value)
    if tp in (bool, int, str):
        return value
    raise ConfigError(f"{key}: unsupported type {getattr(tp, '__name__', tp)}")  # pragma: no cover


def keys(cls) -> list:
    """The fields of a config dataclass a mapping gives: not those ``derived`` from other keys."""
    return [f for f in dataclasses.fields(cls) if "derived" not in f.metadata]


def build(cls, data: dict, prefix: str, *, extra_known: tuple = ()):
    """An instance of dataclass ``cls`` from ``data``; errors name the dotted key."""
    hints = typing.get_type_hints(cls)
    by_yaml = {yaml_name(f.name): f for f in keys(cls)}
    kwargs = {}
    for raw_key, value in data.items():
        key = f"{prefix}.{raw_key}" if prefix else str(raw_key)
        f = by_yaml.get(raw_key)
        if f is None:
            known = ", ".join(sorted([*by_yaml, *extra_known]))
            raise ConfigError(f"{shown(key, 80, quote=False)}: unknown key (known keys here: {known})")
        kwargs[f.name] = coerce(value, hints[f.name], key)
    try:
        return cls(**kwargs)
    except (ConfigError, OptionError) as exc:  # __post_init__ names the field relative to its section
        raise ConfigError(f"{prefix}.{exc}" if prefix else str(exc)) from None


#: a mapping with this key is a tier; changing its value drops the old backend's options, never
#: what every tier has beside them (its emulation and its own schedule: interval and retention)
SWITCH_KEY, DEFAULT_BACKEND, KEPT_ON_SWITCH = "backend", "dir", ("emulate", "interval_steps", "keep")


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
        raise ConfigError(f"--set {shown(assignment)}: expected KEY=VALUE, e.g. checkpoint.interval_steps=5")
    dotted, raw = assignment.split("=", 1)
    parts = dotted.strip().split(".")
    if not all(parts):
        raise ConfigError(f"--set {shown(assignment)}: bad key {shown(dotted)}")
    control = next((c for c in raw if ord(c) < 0x20 and c != "\t" or ord(c) == 0x7f), None)
    if control is not None:  # YAML would fold a newline into a space: a path would silently change
        raise ConfigError(f"--set {shown(dotted, 80, quote=False)}: the value holds a control character "
                          f"({control!r}); a --set value is one line of text")
    value: Any = load_yaml(raw, f"--set {shown(dotted, 80, quote=False)}", text_if_not_yaml=True) \
        if raw.strip() else ""
    return apply_value(data, dotted, value)


def apply_value(data: dict, dotted: str, value) -> dict:
    """Set the dotted key ``a.b.c`` of ``data`` to ``value`` (a copy of the sections on the way)."""
    parts = dotted.strip().split(".")
    data = dict(data)
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = {}
        elif not isinstance(child, dict):
            raise ConfigError(f"--set {shown(dotted, 80, quote=False)}: {'.'.join(parts[:i + 1])} is not a section")
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
    data = load_yaml(text, origin)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: the top level must be a mapping of sections")
    return data
