"""The job's sections of a config: the model (what is checkpointed), its parallel layout, its training step.

Each dataclass checks its own values in ``__post_init__`` (emulator/config/schema.py assembles them).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from emulator.config.mapping import check as _check
from emulator.sizing import (ARCHITECTURES, DTYPE_BYTES, FACTORED, OPTIMIZER_STATES, PARTITIONS, STYLE_CHOICES,
                             WRITERS, architecture, has_replicas, shape)


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
    #: deduplicated, as DLIO writes), every_replica (each its own copy) or balanced (spread over the
    #: holders: each tensor cut evenly over them, or with checkpoint.engine dcp, DCP's whole tensors)
    writers: str = "one_replica"
    #: balanced writers keep each tensor whole (PyTorch DCP's deduplication) instead of slicing it:
    #: no key of its own, checkpoint.engine dcp sets it (emulator/config/schema.py)
    whole_tensors: bool = field(default=False, metadata={"derived": "checkpoint.engine"})
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
        _check(self.writers in WRITERS, "writers", f"must be {', '.join(WRITERS[:-1])} or {WRITERS[-1]}")
        if self.shard_group is not None:
            _check(self.shard_group >= 1, "shard_group", "must be >= 1")
            _check(self.dp % self.shard_group == 0, "shard_group",
                   f"{self.shard_group} does not divide the data-parallel size {self.dp} (dp)")
            _check(self.zero_stage >= 1, "shard_group", "ZeRO-0 shards nothing: a shard group needs zero_stage >= 1")
        _check(self.writers != "balanced" or has_replicas(self), "writers",
               f"balanced spreads the state DP replicas share over them, and this layout has none (dp {self.dp}, "
               f"ZeRO-{self.zero_stage} sharded over all of them): every rank writes its own; use one_replica")
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
