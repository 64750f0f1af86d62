"""Validated run configuration.

YAML (a preset name, a file, or the embedded default) is mapped onto nested
dataclasses. Unknown keys, wrong types and impossible values raise
``ConfigError`` naming the dotted key; each dataclass checks its own values in
``__post_init__`` so an invalid Config cannot exist. Overrides (``--set
a.b=c``) are applied to the raw mapping before validation, so they are checked
the same way. A file may say ``extends: other.yaml`` (or a preset name) to
start from another config.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Optional

import yaml

from .errors import ConfigError

DEFAULT_PRESET = "default"


def _check(cond: bool, key: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"{key}: {msg}")


@dataclass
class ModelConfig:
    name: str = "llama3-8b"
    num_layers: int = 32
    hidden_size: int = 4096
    ffn_hidden_size: int = 14336
    num_attention_heads: int = 32
    num_kv_heads: int = 8
    vocab_size: int = 128256

    def __post_init__(self):
        for f in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_kv_heads", "vocab_size"):
            _check(getattr(self, f) > 0, f"{f}", "must be > 0")
        _check(self.num_attention_heads <= self.hidden_size, "num_attention_heads",
               "must be <= model.hidden_size (head size is hidden_size // heads)")
        _check(self.num_kv_heads <= self.num_attention_heads, "num_kv_heads",
               "must be <= model.num_attention_heads")


@dataclass
class ParallelismConfig:
    tp: int = 1
    pp: int = 1
    dp: int = 8
    zero_stage: int = 3
    #: subset mode: only the first 8 ranks (one node) write, as in MLPerf Storage
    subset: bool = False
    #: run only the first N ranks of the full job (None: all, or 8 in subset mode)
    ranks: Optional[int] = None

    def __post_init__(self):
        for f in ("tp", "pp", "dp"):
            _check(getattr(self, f) >= 1, f"{f}", "must be >= 1")
        _check(self.zero_stage in (0, 1, 2, 3), "zero_stage", "must be 0, 1, 2 or 3")
        _check(not (self.zero_stage == 3 and self.pp > 1), "zero_stage",
               "ZeRO-3 with pipeline parallelism (pp > 1) is not a supported layout")
        world = self.world_size
        if self.ranks is not None:
            _check(self.ranks >= 1, "ranks", "must be >= 1")
            _check(self.ranks <= world, "ranks",
                   f"{self.ranks} ranks requested but this layout has only {world} (tp*pp*dp)")
        if self.subset:
            _check(world >= 8, "subset", f"subset mode needs 8 ranks but the layout has {world}")

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def active_ranks(self) -> int:
        """How many rank processes this run starts."""
        if self.ranks is not None:
            return self.ranks
        return 8 if self.subset else self.world_size


@dataclass
class TrainingConfig:
    #: emulated GPU compute time per training step
    step_seconds: float = 0.2
    #: "sleep" (GPU work leaves the host CPU free) or "cpu" (burn a core, to study interference)
    compute: str = "sleep"
    #: steps per mode; None: interval_steps * saves. Ignored when --duration is given.
    steps: Optional[int] = None

    def __post_init__(self):
        _check(self.step_seconds >= 0, "step_seconds", "must be >= 0")
        _check(self.compute in ("sleep", "cpu"), "compute", "must be 'sleep' or 'cpu'")
        if self.steps is not None:
            _check(self.steps >= 1, "steps", "must be >= 1")


@dataclass
class CheckpointConfig:
    interval_steps: int = 5
    saves: int = 10
    loads: int = 10
    modes: list = field(default_factory=lambda: ["sync", "async"])
    #: complete checkpoints kept per tier (retention)
    keep: int = 2
    #: torch.save's own zip CRC32 (the CPU cost of torch.save); our manifest has CRC32C anyway
    torch_crc32: bool = False
    #: drop the page cache before each load when permitted (root), so loads hit the disk
    drop_page_cache: bool = True
    #: a rank whose local write fails with ENOSPC writes its file straight to the global
    #: tier ("global") or the checkpoint is skipped ("skip"); counted as local_full either way
    on_local_full: str = "global"

    def __post_init__(self):
        _check(self.interval_steps >= 1, "interval_steps", "must be >= 1")
        _check(self.saves >= 0, "saves", "must be >= 0")
        _check(self.loads >= 0, "loads", "must be >= 0")
        _check(self.keep >= 1, "keep", "must be >= 1")
        _check(len(self.modes) >= 1, "modes", "must name at least one mode")
        for m in self.modes:
            _check(m in ("sync", "async"), "modes", f"unknown mode {m!r} (use sync, async)")
        _check(len(set(self.modes)) == len(self.modes), "modes", "lists a mode twice")
        _check(self.on_local_full in ("global", "skip"), "on_local_full", "must be 'global' or 'skip'")


@dataclass
class StateConfig:
    """What the synthetic state's bytes look like (emulator/content.py)."""

    #: logical bytes per distinct 4 KiB block; 1: every block unique (a real optimizer state)
    dedup_ratio: float = 1.0
    #: bytes per zlib-compressed byte; 1: incompressible (a real optimizer state)
    compress_ratio: float = 1.0

    def __post_init__(self):
        _check(1 <= self.dedup_ratio <= 1024, "dedup_ratio", "must be between 1 (unique) and 1024")
        _check(1 <= self.compress_ratio <= 512, "compress_ratio", "must be between 1 (incompressible) and 512")


@dataclass
class DrainConfig:
    #: files copied at once by a node's drainer
    concurrency: int = 4
    #: how the global copy is verified before the manifest is written: "size" or "checksum"
    verify: str = "size"
    #: extra attempts per file (and per global manifest) after a transient global-tier error
    retries: int = 3
    #: first backoff; doubles per attempt, with jitter (0.5-1x)
    retry_backoff_s: float = 1.0
    #: a checkpoint that could not reach the global tier: "continue" training, "fail" the run
    #: (one-line error, exit 2), or "auto" (fail in sync mode, continue in async mode)
    on_failure: str = "auto"

    def __post_init__(self):
        _check(1 <= self.concurrency <= 256, "concurrency", "must be between 1 and 256")
        _check(self.verify in ("size", "checksum"), "verify", "must be 'size' or 'checksum'")
        _check(0 <= self.retries <= 100, "retries", "must be between 0 and 100")
        _check(0 <= self.retry_backoff_s <= 600, "retry_backoff_s", "must be between 0 and 600 seconds")
        _check(self.on_failure in ("auto", "continue", "fail"), "on_failure", "must be auto, continue or fail")


@dataclass
class EmulateConfig:
    """Make a tier behave like a slower or farther one (see tiers/emulated.py)."""

    write_gib_s: Optional[float] = None
    read_gib_s: Optional[float] = None
    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    #: who shares the bandwidth: "none" (each stream gets it), "rank", "node" or "job"
    shared_by: str = "none"
    #: emulated capacity; writes past it fail with ENOSPC
    capacity_gib: Optional[float] = None

    def __post_init__(self):
        for f in ("write_gib_s", "read_gib_s", "capacity_gib"):
            v = getattr(self, f)
            _check(v is None or v > 0, f"{f}", "must be > 0")
        _check(self.latency_ms >= 0, "latency_ms", "must be >= 0")
        _check(self.jitter_ms >= 0, "jitter_ms", "must be >= 0")
        _check(self.shared_by in ("none", "rank", "node", "job"), "shared_by",
               "must be none, rank, node or job")


@dataclass
class TierConfig:
    backend: str = "dir"
    #: dir: the directory
    path: Optional[str] = None
    #: s3: bucket, key prefix, endpoint (None: AWS), region; credentials come from boto3's chain
    bucket: Optional[str] = None
    prefix: str = ""
    endpoint_url: Optional[str] = None
    region: Optional[str] = None
    part_size_mib: int = 64
    max_concurrency: int = 8
    emulate: Optional[EmulateConfig] = None

    def __post_init__(self):
        _check(self.backend in ("dir", "s3", "memory"), "backend", f"unknown backend {self.backend!r} (use dir, s3)")
        if self.backend == "dir":
            _check(bool(self.path), "path", "a dir tier needs a path")
        if self.backend == "s3":
            _check(bool(self.bucket), "bucket", "an s3 tier needs a bucket")
        _check(5 <= self.part_size_mib <= 5120, "part_size_mib", "must be between 5 and 5120 (S3 limits)")
        _check(1 <= self.max_concurrency <= 64, "max_concurrency", "must be between 1 and 64")
        if self.endpoint_url:  # the resolved config is written to config.json and results.json
            from urllib.parse import urlsplit
            parts = urlsplit(self.endpoint_url)
            _check(parts.username is None and parts.password is None, "endpoint_url",
                   "must not carry user:password@ (credentials come from the environment or a profile)")


@dataclass
class TiersConfig:
    #: node-local tier (None: write straight to the global tier, "direct to PFS")
    local: Optional[TierConfig] = None
    global_: TierConfig = field(default_factory=lambda: TierConfig(path="./ckpt-emu-data/global"))


@dataclass
class RunConfig:
    #: shrink every tensor by this factor so a preset fits the machine (0 < scale <= 1)
    scale: float = 1.0
    #: results folder (results.json, report, timeline)
    out: str = "./ckpt-emu-data/results"
    #: seed of the synthetic state's random content
    seed: int = 0
    #: CPU threads per rank for torch (1 keeps 8 ranks on 2 cores from thrashing)
    threads_per_rank: int = 1

    def __post_init__(self):
        _check(0 < self.scale <= 1, "scale", f"must be in (0, 1], got {self.scale}")
        _check(self.threads_per_rank >= 1, "threads_per_rank", "must be >= 1")


@dataclass
class MetricsConfig:
    #: Prometheus scrape port for this node (None: no endpoint); node N serves port + N
    port: Optional[int] = None
    addr: str = "127.0.0.1"

    def __post_init__(self):
        if self.port is not None:
            _check(0 < self.port < 65536, "port", "must be a TCP port (1-65535)")


KILL_PHASES = ("staging", "local_write", "drain", "manifest")


@dataclass
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


@dataclass
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


@dataclass
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


@dataclass
class FailuresConfig:
    """Injected faults (emulator/faults.py); every one fires only where and when it names."""

    #: a node fails after this many checkpoints (1-based, counted across modes): checkpointing
    #: stops, that node's local tier is lost (it was replaced), and the loads that follow recover
    lose_local_after: Optional[int] = None
    #: which node loses its local tier
    lose_local_node: int = 0
    #: SIGKILLs: a list of KillConfig mappings
    kill: list = field(default_factory=list)
    global_fault: Optional[GlobalFaultConfig] = None
    corrupt: Optional[CorruptConfig] = None

    def __post_init__(self):
        if self.lose_local_after is not None:
            _check(self.lose_local_after >= 1, "lose_local_after", "must be >= 1")
        _check(self.lose_local_node >= 0, "lose_local_node", "must be >= 0")
        kills = []
        for i, k in enumerate(self.kill):
            if isinstance(k, KillConfig):
                kills.append(k)
                continue
            _check(isinstance(k, dict), f"kill[{i}]", f"expected a mapping (rank, checkpoint, phase), got {k!r}")
            kills.append(_build(KillConfig, k, f"kill[{i}]"))
        self.kill = kills

    @property
    def any(self) -> bool:
        return bool(self.kill or self.global_fault or self.corrupt or self.lose_local_after)

    def check_against(self, cfg: "Config") -> None:
        """Checks that need the rest of the config (ranks, tiers); called by Config."""
        ranks = cfg.parallelism.active_ranks
        for i, k in enumerate(self.kill):
            _check(k.rank < ranks, f"failures.kill[{i}].rank", f"rank {k.rank} does not exist (the run has {ranks} ranks)")
            _check(k.phase != "drain" or cfg.tiers.local is not None, f"failures.kill[{i}].phase",
                   "'drain' needs tiers.local (a run without a local tier has no drain)")
        if self.corrupt is not None:
            c = self.corrupt
            _check(c.rank < ranks, "failures.corrupt.rank", f"rank {c.rank} does not exist (the run has {ranks} ranks)")
            _check(c.tier != "local" or cfg.tiers.local is not None, "failures.corrupt.tier",
                   "'local' but tiers.local is not configured")


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    parallelism: ParallelismConfig = field(default_factory=ParallelismConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    state: StateConfig = field(default_factory=StateConfig)
    drain: DrainConfig = field(default_factory=DrainConfig)
    tiers: TiersConfig = field(default_factory=TiersConfig)
    run: RunConfig = field(default_factory=RunConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    failures: FailuresConfig = field(default_factory=FailuresConfig)

    def __post_init__(self):
        self.failures.check_against(self)

    @property
    def steps_per_mode(self) -> int:
        if self.training.steps is not None:
            return self.training.steps
        return self.checkpoint.interval_steps * self.checkpoint.saves

    def to_dict(self) -> dict:
        return _to_plain(self)


# --------------------------------------------------------------------------- mapping

_YAML_NAMES = {"global_": "global"}


def _yaml_name(field_name: str) -> str:
    return _YAML_NAMES.get(field_name, field_name)


def _to_plain(obj):
    if dataclasses.is_dataclass(obj):
        return {_yaml_name(f.name): _to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, list):
        return [_to_plain(v) for v in obj]
    return obj


def _type_name(tp) -> str:
    return getattr(tp, "__name__", str(tp))


def _coerce(value, tp, key: str):
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _coerce(value, args[0], key)
    if dataclasses.is_dataclass(tp):
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__}")
        return _build(tp, value, key)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    if tp is list or origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return list(value)
    raise ConfigError(f"{key}: unsupported type {_type_name(tp)}")  # pragma: no cover


def _build(cls, data: dict, prefix: str):
    hints = typing.get_type_hints(cls)
    by_yaml = {_yaml_name(f.name): f for f in dataclasses.fields(cls)}
    kwargs = {}
    for raw_key, value in data.items():
        key = f"{prefix}.{raw_key}" if prefix else str(raw_key)
        f = by_yaml.get(raw_key)
        if f is None:
            known = ", ".join(sorted(by_yaml))
            raise ConfigError(f"{key}: unknown key (known keys here: {known})")
        kwargs[f.name] = _coerce(value, hints[f.name], key)
    try:
        return cls(**kwargs)
    except ConfigError as exc:  # __post_init__ names the field relative to its section
        raise ConfigError(f"{prefix}.{exc}" if prefix else str(exc)) from None


def from_mapping(data: dict) -> Config:
    if not isinstance(data, dict):
        raise ConfigError("config: the top level must be a mapping of sections")
    return _build(Config, data, "")


# --------------------------------------------------------------------------- loading

def preset_names() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("configs").iterdir() if p.name.endswith(".yaml"))


def _read_yaml_text(text: str, origin: str) -> dict:
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


def _load_source(source: str, seen: tuple = ()) -> dict:
    """Raw mapping for a path or preset name, with ``extends`` resolved."""
    path = Path(source)
    if path.suffix in (".yaml", ".yml") or "/" in source or path.exists():
        if not path.is_file():
            raise ConfigError(f"config file not found: {source}")
        try:
            text = path.read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read config {source}: {exc.strerror}") from None
        base_dir = path.parent
    else:
        res = resources.files("configs").joinpath(f"{source}.yaml")
        if not res.is_file():
            raise ConfigError(f"unknown preset {source!r} (presets: {', '.join(preset_names())})")
        text = res.read_text()
        base_dir = None
    if source in seen:
        raise ConfigError(f"{source}: 'extends' loops back to itself")
    data = _read_yaml_text(text, source)
    parent = data.pop("extends", None)
    if parent is None:
        return data
    if not isinstance(parent, str):
        raise ConfigError(f"{source}: extends must be a file or preset name")
    if base_dir is not None and (base_dir / parent).is_file():
        parent = str(base_dir / parent)
    return deep_merge(_load_source(parent, seen + (source,)), data)


def deep_merge(base: dict, over: dict) -> dict:
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
    node[parts[-1]] = value
    return data


def load_config(source: str | None = None, overrides: list[str] | tuple = ()) -> Config:
    """Load a preset name or YAML path (None: the embedded default) and apply overrides."""
    data = _load_source(source or DEFAULT_PRESET)
    for assignment in overrides:
        data = apply_override(data, assignment)
    return from_mapping(data)
