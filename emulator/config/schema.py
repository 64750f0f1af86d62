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

import copy
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Optional

from emulator.config.failures import FailuresConfig
from emulator.config.mapping import (CUSTOM, apply_override, build, coerce, deep_merge, names_a_file,
                                     read_config_text, read_yaml_text, to_plain)
from emulator.config.design import DesignSpec, parse_design
from emulator.errors import ConfigError, UserError, shown
from emulator.sizing import (ARCHITECTURES, DTYPE_BYTES, FACTORED, OPTIMIZER_STATES, PARTITIONS, STYLE_CHOICES,
                             WRITERS, architecture, replicated, shape)
from emulator.units import parse_duration
from tiers import backend_class
from tiers.directory import DirOptions
from tiers.emulated import EmulateOptions as EmulateConfig

DEFAULT_PRESET = "default"
#: the preset YAMLs (configs/ in the checkout) are this package's data
PRESETS_PACKAGE = "emulator.presets"


def _check(cond: bool, key: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"{key}: {msg}")


@dataclass(frozen=True)
class ModelConfig:
    """What is checkpointed: the model's dimensions and style, and the job's numerics (emulator/sizing.py)."""

    name: str = "llama3-8b"
    #: llama, gpt2 or uniform (a parameter count alone); None: uniform when params is set, else llama
    architecture: Optional[str] = None
    num_layers: int = 32
    hidden_size: int = 4096
    #: None: 4 x hidden_size for gpt2, 14336 for llama (Llama 3 8B's, as the other defaults)
    ffn_hidden_size: Optional[int] = None
    num_attention_heads: int = 32
    #: None: num_attention_heads for gpt2, 8 for llama
    num_kv_heads: Optional[int] = None
    vocab_size: int = 128256
    #: style keys, each None for the architecture's: gated (3 matrices) or plain (2) MLP,
    #: untied or tied head, rotary or learned positions, rms or layer norm, linear biases
    mlp: Optional[str] = None
    embeddings: Optional[str] = None
    positions: Optional[str] = None
    #: learned positions' table length (None: 1024)
    max_positions: Optional[int] = None
    norm: Optional[str] = None
    bias: Optional[bool] = None
    #: a model given by its parameter count alone (architecture uniform): split evenly over num_layers
    params: Optional[float] = None
    #: the numerics: weights' dtype, master copy's ("none": the optimizer updates the weights
    #: themselves), optimizer (adam, adamw, sgd with momentum, adafactor, none) and its states' dtype
    params_dtype: str = "bf16"
    master_dtype: str = "fp32"
    optimizer: str = "adam"
    optimizer_dtype: str = "fp32"
    #: optimizer elements per rank: dlio (MLPerf Storage's N / shards + 5H) or local (the parameters
    #: the rank holds / shards); None: dlio for llama, local otherwise
    optimizer_partition: Optional[str] = None

    def __post_init__(self):
        dtypes = ", ".join(DTYPE_BYTES)
        for f in ("params_dtype", "optimizer_dtype"):
            _check(getattr(self, f) in DTYPE_BYTES, f, f"unknown dtype {getattr(self, f)!r} (use {dtypes})")
        _check(self.master_dtype == "none" or self.master_dtype in DTYPE_BYTES, "master_dtype",
               f"unknown dtype {self.master_dtype!r} (use {dtypes} or none)")
        _check(self.optimizer in OPTIMIZER_STATES, "optimizer",
               f"unknown optimizer {self.optimizer!r} (use {', '.join(OPTIMIZER_STATES)})")
        _check(self.optimizer_partition in (None, *PARTITIONS), "optimizer_partition",
               f"must be {' or '.join(PARTITIONS)}")
        _check(self.architecture in (None, *ARCHITECTURES), "architecture",
               f"unknown architecture {self.architecture!r} (use {', '.join(ARCHITECTURES)})")
        for key, choices in STYLE_CHOICES.items():
            _check(getattr(self, key) in (None, *choices), key, f"must be {' or '.join(choices)}")
        for f in ("num_layers", "hidden_size", "num_attention_heads", "vocab_size"):
            _check(getattr(self, f) > 0, f"{f}", "must be > 0")
        for f in ("ffn_hidden_size", "num_kv_heads", "max_positions"):
            _check(getattr(self, f) is None or getattr(self, f) > 0, f, "must be > 0")
        if architecture(self) == "uniform":
            self._check_uniform()
            return
        _check(self.params is None, "params", f"a model given by its parameter count alone is architecture "
               f"uniform; {self.architecture} counts its parameters from its dimensions")
        _check(self.num_attention_heads <= self.hidden_size, "num_attention_heads",
               "must be <= model.hidden_size (head size is hidden_size // heads)")
        _check(shape(self).kv_heads <= self.num_attention_heads, "num_kv_heads",
               "must be <= model.num_attention_heads")

    def _check_uniform(self):
        _check(self.params is not None and self.params >= self.num_layers, "params",
               f"architecture uniform needs params: the parameter count, at least one per layer "
               f"({self.num_layers} layers)")
        _check(self.optimizer not in FACTORED, "optimizer",
               f"{self.optimizer} factors each matrix: give the model by its dimensions, not by params alone")
        _check(self.optimizer_partition != "dlio", "optimizer_partition",
               "dlio counts from hidden_size: give the model by its dimensions, or use local")


@dataclass(frozen=True)
class ParallelismConfig:
    tp: int = 1
    pp: int = 1
    dp: int = 8
    zero_stage: int = 3
    #: HSDP: shard (what zero_stage shards) within groups of this many DP ranks and replicate
    #: across the groups; None: over all DP ranks
    shard_group: Optional[int] = None
    #: who writes state several DP ranks hold: one_replica (its first holder; the others' copies
    #: deduplicated, as DLIO, Megatron and DCP write) or every_replica (each its own copy)
    writers: str = "one_replica"
    #: Megatron's distributed optimizer: the optimizer state sharded over DP (zero_stage 1 or 2),
    #: with an fp32 main copy of the weights even when they are fp32
    distributed_optimizer: bool = False
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
        _check(self.writers in WRITERS, "writers", f"must be {' or '.join(WRITERS)}")
        if self.shard_group is not None:
            _check(self.shard_group >= 1, "shard_group", "must be >= 1")
            _check(self.dp % self.shard_group == 0, "shard_group",
                   f"{self.shard_group} does not divide the data-parallel size {self.dp} (dp)")
            _check(self.zero_stage >= 1, "shard_group", "ZeRO-0 shards nothing: a shard group needs zero_stage >= 1")
        _check(not self.distributed_optimizer or self.zero_stage in (1, 2), "distributed_optimizer",
               f"shards the optimizer state over DP: zero_stage 1 or 2, not {self.zero_stage}")
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


@dataclass(frozen=True)
class TrainingConfig:
    #: the real job's time per training step, at full size: a run at ``run.scale`` sleeps
    #: step_seconds x scale per step, so intervals shrink with the bytes and every ratio
    #: (overhead, overlap, slowdown, misses) is the full-size design's
    step_seconds: float = 50.0
    #: "sleep" (GPU work leaves the host CPU free) or "cpu" (burn a core, to study interference)
    compute: str = "sleep"
    #: steps per mode; None: interval_steps * saves. Ignored when --duration is given.
    steps: Optional[int] = None

    def __post_init__(self):
        _check(self.step_seconds >= 0, "step_seconds", "must be >= 0")
        _check(self.compute in ("sleep", "cpu"), "compute", "must be 'sleep' or 'cpu'")
        if self.steps is not None:
            _check(self.steps >= 1, "steps", "must be >= 1")


@dataclass(frozen=True)
class CheckpointConfig:
    interval_steps: int = 5
    saves: int = 10
    loads: int = 10
    modes: tuple = ("sync", "async")
    #: complete checkpoints kept per tier (retention)
    keep: int = 2
    #: torch.save's own zip CRC32 (the CPU cost of torch.save); our manifest has CRC32C anyway
    torch_crc32: bool = False
    #: drop cached pages before each load, so loads hit the storage (``page_cache_scope`` says which)
    drop_page_cache: bool = True
    #: "files": only the checkpoint files' own pages (posix_fadvise, no root needed; other jobs' cache
    #: stays); "host": the whole host's page cache (root only; evicts every other job's cache too)
    page_cache_scope: str = "files"
    #: a rank whose local write fails with ENOSPC writes its file straight to the global
    #: tier ("global") or the checkpoint is skipped ("skip"); counted as local_full either way
    on_local_full: str = "global"
    #: run the same steps without checkpoints first (mode "none"): the baseline that slowdown,
    #: interference and goodput are measured against
    baseline: bool = True
    #: "emulator" (training with sync/async checkpoints) or "mlperf" (MLPerf Storage's
    #: checkpointing workload: `saves` writes, then `loads` rank-shifted reads; docs/mlperf.md)
    protocol: str = "emulator"
    #: mlperf only: "both", or "write"/"read" as separate runs (reads within 30 s of the writes)
    phase: str = "both"
    #: what the next async checkpoint waits for of the previous one: "complete" (its drain and
    #: global commit too) or "local_write" (its file written; its drain may run on, sharing the
    #: local device with the next write)
    async_waits_for: str = "complete"
    #: who reads a restore's files: "all" (every rank reads its file: a restart's read storm) or
    #: "one_per_dp_group" (one rank of each data-parallel group reads, then broadcasts the bytes over
    #: gloo to the group; needs replicated DP ranks: parallelism.zero_stage 0, or a shard_group below
    #: dp; docs/checkpoints.md)
    restore_readers: str = "all"
    #: a read of one checkpoint file (a restore, the drain's read-back) not done after this many seconds
    #: is given up: the restore falls back to the next tier, the drain tries again (docs/security.md)
    read_timeout_s: float = 1800.0

    def __post_init__(self):
        _check(self.interval_steps >= 1, "interval_steps", "must be >= 1")
        _check(0 < self.read_timeout_s <= 7 * 86400, "read_timeout_s",
               f"must be more than 0 and at most a week (604800 s), got {self.read_timeout_s!r}")
        _check(self.saves >= 0, "saves", "must be >= 0")
        _check(self.loads >= 0, "loads", "must be >= 0")
        _check(self.keep >= 1, "keep", "must be >= 1")
        _check(len(self.modes) >= 1, "modes", "must name at least one mode")
        for m in self.modes:
            _check(m in ("sync", "async"), "modes", f"unknown mode {m!r} (use sync, async)")
        _check(len(set(self.modes)) == len(self.modes), "modes", "lists a mode twice")
        _check(self.on_local_full in ("global", "skip"), "on_local_full", "must be 'global' or 'skip'")
        _check(self.protocol in ("emulator", "mlperf"), "protocol", "must be 'emulator' or 'mlperf'")
        _check(self.async_waits_for in ("complete", "local_write"), "async_waits_for",
               "must be 'complete' or 'local_write'")
        _check(self.phase in ("both", "write", "read"), "phase", "must be 'both', 'write' or 'read'")
        _check(self.restore_readers in ("all", "one_per_dp_group"), "restore_readers",
               "must be 'all' or 'one_per_dp_group'")
        _check(self.page_cache_scope in ("files", "host"), "page_cache_scope",
               "must be 'files' (the checkpoint files' pages) or 'host' (the whole host's page cache, root only)")
        _check(self.phase == "both" or self.protocol == "mlperf", "phase",
               "write and read phases exist only with checkpoint.protocol: mlperf")
        if self.protocol == "mlperf":
            _check(self.saves >= 1 or self.phase == "read", "saves", "the mlperf write phase needs saves >= 1")
            _check(self.loads >= 1 or self.phase == "write", "loads", "the mlperf read phase needs loads >= 1")
            _check(self.phase != "both" or self.loads <= self.saves, "loads",
                   f"{self.loads} reads but only {self.saves} checkpoints written (each read reads one)")


@dataclass(frozen=True)
class StateConfig:
    """What the synthetic state's bytes look like (emulator/workload/content.py)."""

    #: logical bytes per distinct 4 KiB block; 1: every block unique (a real optimizer state)
    dedup_ratio: float = 1.0
    #: bytes per zlib-compressed byte; 1: incompressible (a real optimizer state)
    compress_ratio: float = 1.0
    #: where a rank's live state lives: "auto" (a GPU when torch has CUDA, else the CPU),
    #: "cpu", or "cuda" (refused at preflight where there is no CUDA device)
    device: str = "auto"
    #: pinned host memory a rank may use for staging, in GiB (None: the state's size);
    #: a smaller budget stages through pinned buckets of that size (emulator/workload/staging.py)
    pinned_budget_gib: Optional[float] = None

    def __post_init__(self):
        _check(1 <= self.dedup_ratio <= 1024, "dedup_ratio", "must be between 1 (unique) and 1024")
        _check(1 <= self.compress_ratio <= 512, "compress_ratio", "must be between 1 (incompressible) and 512")
        _check(self.device in ("auto", "cpu", "cuda"), "device", "must be auto, cpu or cuda")
        if self.pinned_budget_gib is not None:
            _check(2 / 1024 <= self.pinned_budget_gib <= 65536, "pinned_budget_gib",
                   "must be >= 0.002 GiB (two 1 MiB bucket slots), or null for the state's size")


@dataclass(frozen=True)
class DrainConfig:
    #: files copied at once by a node's drainer
    concurrency: int = 4
    #: how the global copy is verified before the manifest is written: "checksum" reads its bytes
    #: back and compares their CRC32C with the local write's; "size" (cheaper) compares only the size
    verify: str = "checksum"
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


#: the keys every tier has beside its backend's own options
_TIER_KEYS = ("backend", "emulate", "interval_steps", "keep")


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
    """The tiers, nearest first: memory, peer, local, global; each takes every N-th checkpoint."""

    #: the node's host memory (a folder on /dev/shm); survives a process crash, not a node loss
    memory: Optional[TierConfig] = None
    #: copies of the memory tier's checkpoints in other nodes' memory (needs tiers.memory)
    peer: Optional[PeerConfig] = None
    #: node-local tier (None: write straight to the global tier, "direct to PFS")
    local: Optional[TierConfig] = None
    global_: TierConfig = field(default_factory=lambda: TierConfig("dir", DirOptions("./ckpt-emu-data/global")))

    def configured(self) -> tuple[str, ...]:
        """The names of the configured tiers, nearest first."""
        return tuple(n for n in ("memory", "peer", "local", "global")
                     if getattr(self, "global_" if n == "global" else n) is not None)

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


@dataclass(frozen=True)
class Dilation:
    """Time dilation (docs/time-dilation.md): ``factor`` D >= 1, or None for ``auto`` (a probe at the
    start of a run picks the smallest D at which this host keeps every phase at its design rate)."""

    factor: Optional[float] = None

    @property
    def auto(self) -> bool:
        return self.factor is None


def _build_dilation(value, key: str) -> Dilation:
    if value == {} or value == "auto":
        return Dilation()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 1 <= value < float("inf"):
        raise ConfigError(f"{key}: must be auto or a factor >= 1 (1: no dilation), got {value!r}")
    return Dilation(float(value))


CUSTOM[Dilation] = (_build_dilation, lambda d: "auto" if d.factor is None else d.factor)


@dataclass(frozen=True)
class RunConfig:
    #: shrink every tensor by this factor so a preset fits the machine (0 < scale <= 1)
    scale: float = 1.0
    #: results folder (results.json, report, timeline)
    out: str = "./ckpt-emu-data/results"
    #: seed of the synthetic state's random content
    seed: int = 0
    #: CPU threads per rank for torch (1 keeps 8 ranks on 2 cores from thrashing)
    threads_per_rank: int = 1
    #: time dilation: every device the design describes runs at its rate / D and the run waits D x
    #: longer for everything paced, so a host with 1/D of the design's speed keeps up; "auto": a
    #: probe at start picks D; every figure is reported in the design's time (docs/time-dilation.md)
    dilation: Dilation = field(default_factory=Dilation)
    #: the longest a run may take here (its full-size time x scale x dilation): a longer one is refused
    wall_limit: str = "1h"
    #: a run (or tune) whose design missed its goals exits 1 instead of 0 (--fail-on-miss): deadline
    #: misses, incomplete checkpoints, a failed load or recovery, tune's confirmation run
    fail_on_miss: bool = False
    #: keep the checkpoints in tiers that live in host memory (tmpfs, ramfs: the default's /dev/shm
    #: tiers, a memory tier) after a run that finished; false: emptied, their memory given back
    keep_tiers: bool = False
    #: draw timeline.png when the run ends (about a second of one core); false: results.json and
    #: report.txt alone, for sweeps and scripts that read results.json
    timeline: bool = True

    def __post_init__(self):
        _check(0 < self.scale <= 1, "scale", f"must be in (0, 1], got {self.scale}")
        _check(self.threads_per_rank >= 1, "threads_per_rank", "must be >= 1")
        try:
            parse_duration(self.wall_limit, "wall_limit")
        except UserError as exc:
            raise ConfigError(str(exc)) from None

    @property
    def wall_limit_s(self) -> float:
        return parse_duration(self.wall_limit, "run.wall_limit")


@dataclass(frozen=True)
class MetricsConfig:
    #: Prometheus scrape port for this node (None: no endpoint); node N serves port + N
    port: Optional[int] = None
    addr: str = "127.0.0.1"
    #: after the run, the node leader serves on until a scrape begun after the run's final values
    #: has been answered, or this many seconds (0: exit at once): Prometheus scrapes every 15 s
    final_scrape_timeout_s: float = 30.0

    def __post_init__(self):
        if self.port is not None:
            _check(0 < self.port < 65536, "port", "must be a TCP port (1-65535)")
        _check(0 <= self.final_scrape_timeout_s < float("inf"), "final_scrape_timeout_s",
               f"must be 0 or more seconds, got {self.final_scrape_timeout_s!r}")


@dataclass(frozen=True)
class CostConfig:
    """What the global tier charges: the price table behind the cost figures of the report,
    ``tune`` and ``simulate`` (emulator/simulation/s3cost.py; docs/s3-requests.md works an example).

    The defaults are AWS S3 Standard in us-east-1 from its public price list as of 2025;
    override any of them for another store or region (``--set cost.get_per_1000=0``)."""

    #: where the prices come from, printed with every cost figure
    price_list: str = "AWS S3 Standard, us-east-1, public price list as of 2025"
    #: USD per 1,000 PUT-class requests (PUT, COPY, POST, LIST; each multipart request is one)
    put_per_1000: float = 0.005
    #: USD per 1,000 GET-class requests (GET, SELECT, HEAD and all other requests but DELETE)
    get_per_1000: float = 0.0004
    #: USD per GB-month stored (AWS's first 50 TB; a GB is 2^30 bytes, a month 730 hours)
    gb_month: float = 0.023
    #: USD per GB a restore reads out (AWS to the internet, first 10 TB; 0 within the region)
    transfer_out_per_gb: float = 0.09
    #: days of the training run the per-run figure covers (Llama 3 405B trained for 54 days)
    run_days: float = 54.0

    def __post_init__(self):
        for f in ("put_per_1000", "get_per_1000", "gb_month", "transfer_out_per_gb"):
            value = getattr(self, f)
            _check(0 <= value < 1e6, f, f"must be a price in USD between 0 and 1e6, got {value!r}")
        _check(0 < self.run_days <= 36500, "run_days", f"must be between 0 and 36500 days, got {self.run_days!r}")


@dataclass(frozen=True)
class LimitsConfig:
    """Caps that stop a typo from taking the machine (docs/security.md#limits): each is checked
    before any work, and each can be raised explicitly (``--set limits.ranks_per_cpu=16``)."""

    #: ranks a run may start on one host, per CPU of the host (never fewer than 8 in all: the
    #: embedded default runs 8 ranks on 2 cores)
    ranks_per_cpu: float = 4.0
    #: torch threads per rank (run.threads_per_rank)
    threads_per_rank: int = 64
    #: an emulated tier's latency and jitter per request, in ms (tiers.*.emulate, design latencies)
    latency_ms: float = 60_000.0
    #: the points of one ``simulate --sweep`` grid, every axis together
    sweep_points: int = 10_000

    def __post_init__(self):
        _check(self.ranks_per_cpu > 0, "ranks_per_cpu", "must be > 0")
        for name in ("threads_per_rank", "latency_ms", "sweep_points"):
            _check(getattr(self, name) >= 1, name, "must be >= 1")

    def ranks_per_host(self, cpus: int) -> int:
        """The most ranks one host of ``cpus`` CPUs may run."""
        return max(MIN_RANKS_PER_HOST, int(self.ranks_per_cpu * cpus))


#: ranks any host may run whatever its CPUs (MLPerf's one node: 8)
MIN_RANKS_PER_HOST = 8


def _check_limits(cfg) -> None:
    """The ``limits:`` caps that the config alone decides (ranks per host needs the host: launch)."""
    lim = cfg.limits
    _check(cfg.run.threads_per_rank <= lim.threads_per_rank, "run.threads_per_rank",
           f"{cfg.run.threads_per_rank} is more than limits.threads_per_rank ({lim.threads_per_rank}); "
           "raise the limit to run it anyway")
    for name in cfg.tiers.configured():
        emulate = getattr(cfg.tiers.entry(name), "emulate", None)
        for key in ("latency_ms", "jitter_ms"):
            value = getattr(emulate, key, 0.0) or 0.0
            _check(value <= lim.latency_ms, f"tiers.{name}.emulate.{key}",
                   f"{value:g} ms per request is more than limits.latency_ms ({lim.latency_ms:g}); "
                   "raise the limit to run it anyway")


def _check_tiers(cfg) -> None:
    """Tier intervals are multiples of the base interval, a peer copies the memory tier's checkpoints."""
    tiers, base = cfg.tiers, cfg.checkpoint.interval_steps
    for name in tiers.configured():
        interval = tiers.entry(name).interval_steps
        _check(interval is None or interval % base == 0, f"tiers.{name}.interval_steps",
               f"{interval} is not a multiple of checkpoint.interval_steps ({base}): a tier takes every N-th checkpoint")
    if tiers.peer is not None:
        _check(tiers.memory is not None, "tiers.peer", "needs tiers.memory: a peer holds copies of the memory tier")
        _check((tiers.peer.interval_steps or base) % (tiers.memory.interval_steps or base) == 0,
               "tiers.peer.interval_steps", f"must be a multiple of tiers.memory.interval_steps "
               f"({tiers.memory.interval_steps or base}): a peer is sent the memory tier's checkpoints")
        nodes = cfg.design.job_nodes(cfg.parallelism.world_size) if cfg.design is not None else None
        _check(nodes is None or tiers.peer.replicas < nodes, "tiers.peer.replicas",
               f"{tiers.peer.replicas} replicas need more than the design's {nodes} node(s)")
    if tiers.memory is not None:
        _check(tiers.memory.backend == "dir", "tiers.memory.backend",
               "must be dir (a folder in host memory, such as /dev/shm)")
    intervals = [tiers.entry(n).interval_steps or base for n in tiers.configured()]
    _check(min(intervals) == base, "checkpoint.interval_steps",
           f"{base}, but no tier takes every checkpoint (the nearest tier's interval is {min(intervals)}); "
           "set it to the smallest tier interval")


def _check_failures(cfg) -> None:
    """The ``failures:`` checks that need the rest of the config (ranks, tiers)."""
    ranks, failures = cfg.parallelism.active_ranks, cfg.failures
    for i, k in enumerate(failures.kill):
        _check(k.rank < ranks, f"failures.kill[{i}].rank", f"rank {k.rank} does not exist (the run has {ranks} ranks)")
        _check(k.phase != "drain" or cfg.tiers.local is not None, f"failures.kill[{i}].phase",
               "'drain' needs tiers.local (a run without a local tier has no drain)")
    if failures.corrupt is not None:
        c = failures.corrupt
        _check(c.rank < ranks, "failures.corrupt.rank", f"rank {c.rank} does not exist (the run has {ranks} ranks)")
        _check(c.tier != "local" or cfg.tiers.local is not None, "failures.corrupt.tier",
               "'local' but tiers.local is not configured")


@dataclass(frozen=True)
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
    #: the global tier's price table (requests, storage, transfer out)
    cost: CostConfig = field(default_factory=CostConfig)
    #: the storage design in an architect's terms (emulator/config/design.py); sets the tiers' emulation
    design: Optional[DesignSpec] = None
    #: caps checked before any work, each raised explicitly to go past it
    limits: LimitsConfig = field(default_factory=LimitsConfig)

    def __post_init__(self):
        _check_limits(self)
        _check_tiers(self)
        _check_failures(self)
        _check(self.checkpoint.protocol != "mlperf" or self.run.dilation.factor in (None, 1.0), "run.dilation",
               "MLPerf's protocol measures the storage as it is: no time dilation (use 1 or auto)")
        par = self.parallelism
        _check(self.checkpoint.restore_readers == "all" or replicated(par),
               "checkpoint.restore_readers", f"one_per_dp_group needs data-parallel replicas that hold the same "
               f"state (parallelism.zero_stage 0, or a shard_group below dp, with writers one_replica); "
               f"ZeRO-{par.zero_stage} shards it across DP ranks")
        _check(self.checkpoint.protocol != "mlperf" or (par.writers == "one_replica" and par.shard_group is None),
               "parallelism", "checkpoint.protocol mlperf writes DLIO's files: one replica writes, no shard_group")

    @property
    def time_factor(self) -> float:
        """Wall seconds here per second of the full-size design: run.scale x the dilation (1 while
        ``auto`` is not yet resolved by a run's probe)."""
        return self.run.scale * (self.run.dilation.factor or 1.0)

    @property
    def wall_step_seconds(self) -> float:
        """What a run really waits per step: the full-size step time x the time factor."""
        return self.training.step_seconds * self.time_factor

    @property
    def run_modes(self) -> tuple:
        """The modes a run goes through, in order: the no-checkpoint baseline first if enabled."""
        return (("none",) if self.checkpoint.baseline else ()) + tuple(self.checkpoint.modes)

    @property
    def tier_every(self) -> dict:
        """{tier: N}: each configured tier takes every N-th checkpoint (its interval over the base)."""
        base = self.checkpoint.interval_steps
        return {n: (self.tiers.entry(n).interval_steps or base) // base for n in self.tiers.configured()}

    def check_wall(self, factor: float, why: str = "", duration: float | None = None) -> None:
        """Refuse a dilation ``factor`` that makes the run longer here than ``run.wall_limit``: its
        modes' steps at full size x scale x factor (a soak's ``duration`` is its own limit)."""
        if duration is not None:
            return
        wall = self.steps_per_mode * self.training.step_seconds * len(self.run_modes) * self.run.scale * factor
        if wall > self.run.wall_limit_s:
            raise UserError(f"run.dilation: x{factor:g}{why} makes this run take about {wall / 60:,.1f} min here, "
                            f"over run.wall_limit ({self.run.wall_limit}): lower run.scale (--scale) or raise "
                            "run.wall_limit")

    @property
    def steps_per_mode(self) -> int:
        if self.training.steps is not None:
            return self.training.steps
        return self.checkpoint.interval_steps * self.checkpoint.saves

    def to_dict(self) -> dict:
        return to_plain(self)

    def with_overrides(self, *assignments: str) -> "Config":
        """A new, validated config: this one with ``a.b=c`` overrides applied (this one is frozen)."""
        data = self.to_dict()
        for assignment in assignments:
            data = apply_override(data, assignment)
        return from_mapping(data)


# --------------------------------------------------------------------------- loading

def from_mapping(data: dict) -> Config:
    if not isinstance(data, dict):
        raise ConfigError("config: the top level must be a mapping of sections")
    cfg = build(Config, data, "")
    if cfg.design is None:
        return cfg
    _check_described_once(cfg)
    return _job_filled(data, cfg)


CUSTOM[DesignSpec] = (parse_design, lambda d: d.text)


def _check_described_once(cfg: Config) -> None:
    """A tier is described by the design or by its emulate: knobs, not both; a design's part needs its tier."""
    d = cfg.design
    for name, part in (("memory", d.memory), ("local", d.local), ("global", d.global_)):
        if part is None:
            continue
        section = "design.global" if name == "global" else f"design.node.{name}"
        tier = cfg.tiers.entry(name)
        if tier is None:
            raise ConfigError(f"{section}: the config has no tiers.{name} to emulate it on")
        if tier.emulate is not None and (tier.emulate.write_gib_s or tier.emulate.read_gib_s):
            raise ConfigError(f"tiers.{name}.emulate: its rates are set by {section}; keep one of the two")


def _job_filled(data: dict, cfg: Config) -> Config:
    """With ``design.job.nodes`` the job's data parallelism is what its GPUs give: world / (tp x pp)."""
    d, p = cfg.design, cfg.parallelism
    if d.nodes is None:
        return cfg
    world = d.nodes * d.accelerators_per_node
    if world % (p.tp * p.pp):
        raise ConfigError(f"design.job.nodes: {d.nodes:,} nodes x {d.accelerators_per_node} accelerators = "
                          f"{world:,} ranks is not a multiple of tp x pp = {p.tp * p.pp} "
                          "(parallelism.tp, parallelism.pp): no layout fills the job")
    dp = world // (p.tp * p.pp)
    if dp == p.dp:
        return cfg
    data = copy.deepcopy(data)
    data.setdefault("parallelism", {})["dp"] = dp
    return build(Config, data, "")


def check_explicit_dp(cfg: Config, given_dp) -> None:
    """A ``parallelism.dp`` the user wrote (their file or --set) must be the one the design's job gives."""
    if given_dp is None or cfg.design is None or cfg.design.nodes is None or given_dp == cfg.parallelism.dp:
        return
    d, p = cfg.design, cfg.parallelism
    raise ConfigError(f"parallelism.dp: {given_dp} does not fill the design's job: {d.nodes:,} nodes x "
                      f"{d.accelerators_per_node} accelerators = {d.nodes * d.accelerators_per_node:,} ranks "
                      f"= tp {p.tp} x pp {p.pp} x dp {p.dp}; drop parallelism.dp (it follows from the job) "
                      "or change design.job.nodes")


# --------------------------------------------------------------------------- loading

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
    parent = data.pop("extends", None)
    if parent is None:
        return data
    if not isinstance(parent, str):
        raise ConfigError(f"{source}: extends must be a file or preset name")
    if base_dir is not None and names_a_file(base_dir / parent):
        parent = str(base_dir / parent)
    return deep_merge(_load_source(parent, seen + (source,)), data)


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
