"""Loading a config: a preset name, a YAML file (``extends:`` resolved) or the embedded default, with
``--set`` overrides, validated into a ``Config`` (emulator/config/schema.py).
"""
from __future__ import annotations

from dataclasses import fields
from importlib import resources
from pathlib import Path

from emulator.config.mapping import (apply_override, deep_merge, names_a_file, read_config_text, read_yaml_text,
                                     yaml_name)
from emulator.config.schema import Config, check_explicit_dp, from_mapping
from emulator.errors import ConfigError, shown

DEFAULT_PRESET = "default"
#: the preset YAMLs (configs/ in the checkout) are this package's data
PRESETS_PACKAGE = "emulator.presets"

#: preset folders below the presets' own: their presets are named folder/name (validation/dlrover-gpt-1.5b)
PRESET_FOLDERS = ("validation",)


def preset_names() -> list[str]:
    root = resources.files(PRESETS_PACKAGE)
    names = [p.name[:-5] for p in root.iterdir() if p.name.endswith(".yaml")]
    names += [f"{d}/{p.name[:-5]}" for d in PRESET_FOLDERS if root.joinpath(d).is_dir()
              for p in root.joinpath(d).iterdir() if p.name.endswith(".yaml")]
    return sorted(names)


def _preset(source: str):
    """The preset named ``source`` (a resource), or None."""
    if "\0" in source:
        return None
    res = resources.files(PRESETS_PACKAGE).joinpath(f"{source}.yaml")
    return res if names_a_file(res) else None


def _load_source(source: str, seen: tuple = ()) -> dict:
    """Raw mapping for a path or preset name, with ``extends`` resolved."""
    path = Path(source)
    file_name = path.suffix in (".yaml", ".yml") or names_a_file(path)
    res = None if file_name else _preset(source)
    if res is None and (file_name or "/" in source):  # a folder is no config
        if not names_a_file(path):
            raise ConfigError(f"config file not found: {shown(source, 200, quote=False)}")
        text = read_config_text(path, shown(source, 200, quote=False))
        base_dir = path.parent
    else:
        if res is None:
            raise ConfigError(f"unknown preset {shown(source)} (presets: {', '.join(preset_names())})")
        text = res.read_text()
        base_dir = None
    if source in seen:
        raise ConfigError(f"{source}: 'extends' loops back to itself")
    data = read_yaml_text(text, source)
    if seen:
        _check_extended(data, source)
    parent = data.pop("extends", None)
    if parent is None:
        return data
    return deep_merge(_load_source(_extended_source(source, parent, base_dir), seen + (source,)), data)


#: a config file's suffixes: ``extends:`` reads no other file
CONFIG_SUFFIXES = (".yaml", ".yml")


def _extended_source(source: str, parent, base_dir: Path | None) -> str:
    """What ``extends: parent`` in ``source`` names: a YAML config file (by its suffix; beside
    ``source`` when there is one there) or a preset name. Any other file is refused unread (issue 54:
    ``extends: /etc/shadow`` printed root's shadow line as an unknown key)."""
    if not isinstance(parent, str) or not parent.strip():
        raise ConfigError(f"{source}: extends must be a file or preset name")
    if Path(parent).suffix in CONFIG_SUFFIXES:
        return str(base_dir / parent) if base_dir is not None and names_a_file(base_dir / parent) else parent
    if _preset(parent) is not None:
        return parent
    if "/" in parent or "\0" in parent or names_a_file(Path(parent)):
        raise ConfigError(f"{source}: extends names a file that is no config file (a config file's name ends in "
                          f"{' or '.join(CONFIG_SUFFIXES)}); it was not read")
    return parent  # a preset name (unknown ones: one line listing the presets)


def _check_extended(data: dict, source: str) -> None:
    """A file reached through ``extends:`` is a config: its top level holds sections only. Else it is
    refused without quoting anything it holds (its keys could be anything: a password file's)."""
    known = {yaml_name(f.name) for f in fields(Config)} | {"extends"}
    stray = [k for k in data if k not in known]
    if stray:
        raise ConfigError(f"{source}: not a ckpt-emu config ({len(stray)} top-level key(s) that are no section of "
                          f"one; sections: {', '.join(sorted(known - {'extends'}))}); extends reads config files only")


def load_config(source: str | None = None, overrides: list[str] | tuple = ()) -> Config:
    """Load a preset name or YAML path (None: the embedded default) and apply overrides."""
    data = _load_source(source or DEFAULT_PRESET)
    given_dp = _own_dp(source or DEFAULT_PRESET)
    for assignment in overrides:
        data = apply_override(data, assignment)
        if str(assignment).replace(" ", "").startswith("parallelism.dp="):
            given_dp = (data.get("parallelism") or {}).get("dp")
    cfg = from_mapping(data)
    check_explicit_dp(cfg, given_dp)
    return cfg


def _own_dp(source: str):
    """The ``parallelism.dp`` a config file itself writes (not one it extends), if any."""
    path = Path(source)
    if not names_a_file(path):
        return None
    try:
        own = read_yaml_text(path.read_text(), source)
    except (OSError, ConfigError):
        return None
    par = own.get("parallelism") if isinstance(own, dict) else None
    return par.get("dp") if isinstance(par, dict) else None


def load_mapping(data: dict) -> Config:
    """A config given as a mapping, as a YAML file would give it (its ``extends`` resolved)."""
    data = dict(data)
    parent = data.pop("extends", None)
    if parent is None:
        return from_mapping(data)
    if not isinstance(parent, str):
        raise ConfigError("extends must be a file or preset name")
    return from_mapping(deep_merge(_load_source(parent), data))
