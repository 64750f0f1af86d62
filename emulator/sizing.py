"""Checkpoint bytes from a job's model, numerics and parallelism; the tensors each rank writes.

Pure functions, no I/O, no torch: ``ckpt-emu sizes``, ``plan``, ``simulate`` and the rank
processes (``workload/state.py``) all size from here. The design is in docs/checkpoints.md
("Sizing"); in short:

- **Model** (:func:`shape`): ``llama`` (gated MLP, RMSNorm, rotary, untied head: MLPerf Storage's
  formula), ``gpt2`` (two-matrix MLP, LayerNorm, biases, learned positions, tied head) or any mix
  of those styles, or ``uniform``: a parameter count alone, split evenly over ``num_layers``.
- **Numerics** (:func:`bytes_per_parameter`): the weights' dtype, a master copy or none, the
  optimizer's states and their dtype; Megatron's distributed optimizer keeps an fp32 main copy.
- **Layout**: DLIO's rank order (``tp = r % TP, pp = (r // TP) % PP, dp = r // (TP * PP)``);
  layers split over PP stages (the first L % PP stages one more), matrices over TP, norms and
  row-parallel biases replicated. ZeRO-3 shards the weights and ZeRO >= 1 the optimizer state
  over the shard group (``shard_group``, HSDP; all DP ranks by default); state that several DP
  ranks hold is written by the first of them (``writers: one_replica``), by each (``every_replica``),
  or spread over them (``balanced``): each replicated tensor cut into one even slice per holder
  (:func:`even_slice`, the torch_save engine), or, with ``checkpoint.engine: dcp``, kept whole and
  given to the holder with the fewest bytes so far, as DCP's deduplication does (:func:`balanced_writes`).
- **Optimizer elements per rank** (``optimizer_partition``): ``dlio``, MLPerf Storage's
  N // (G * TP * PP) + 5H per state (N // (TP * PP) + 5H unsharded), or ``local``: the
  parameters the rank holds (replicated ones included) // G, as Megatron and DeepSpeed keep them.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from functools import lru_cache

#: bytes per element of the dtypes a config may name
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
#: the optimizers a config may name: their per-parameter states (a factored one: see FACTORED)
OPTIMIZER_STATES = {"adam": ("exp_avg", "exp_avg_sq"), "adamw": ("exp_avg", "exp_avg_sq"),
                    "sgd": ("momentum_buffer",), "adafactor": ("exp_avg_sq_factored",), "none": ()}
#: optimizers whose state is factored: rows + columns of each matrix, a vector's own length
FACTORED = frozenset({"adafactor"})
#: what the per-parameter part of ``bytes_per_parameter`` calls each optimizer's states
_STATE_WORDS = {"adam": "adam moments", "adamw": "adamw moments", "sgd": "sgd momentum",
                "adafactor": "adafactor factored second moment"}
ARCHITECTURES = ("llama", "gpt2", "uniform")
#: each dimensioned architecture's style, and its defaults for the dimensions a config may leave out
STYLES = {
    "llama": {"mlp": "gated", "embeddings": "untied", "positions": "rotary", "norm": "rms", "bias": False},
    "gpt2": {"mlp": "plain", "embeddings": "tied", "positions": "learned", "norm": "layer", "bias": True},
}
STYLE_CHOICES = {"mlp": ("gated", "plain"), "embeddings": ("untied", "tied"), "positions": ("rotary", "learned"),
                 "norm": ("rms", "layer")}
WRITERS = ("one_replica", "every_replica", "balanced")
PARTITIONS = ("dlio", "local")
#: llama's defaults for the dimensions left out: Llama 3 8B's, as the other dimensions' defaults
LLAMA_FFN, LLAMA_KV_HEADS = 14336, 8
DEFAULT_MAX_POSITIONS = 1024


# --------------------------------------------------------------------------- the model

@dataclass(frozen=True)
class Shape:
    """A model's resolved dimensions and style (what every count below follows)."""

    architecture: str
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    kv_heads: int
    kv_dim: int
    vocab_size: int
    mlp: str
    embeddings: str
    positions: str
    max_positions: int
    norm: str
    bias: bool
    params: int | None = None  # uniform: the parameter count it was given


def architecture(model) -> str:
    """The model's architecture: as given, else ``uniform`` when only ``params`` is, else ``llama``."""
    if model.architecture is not None:
        return model.architecture
    return "uniform" if model.params is not None else "llama"


@lru_cache(maxsize=256)
def shape(model) -> Shape:
    """``model`` (a ModelConfig) with every style key and left-out dimension resolved."""
    arch = architecture(model)
    style = dict(STYLES.get(arch, STYLES["llama"]))
    for key in ("mlp", "embeddings", "positions", "norm", "bias"):
        if getattr(model, key) is not None:
            style[key] = getattr(model, key)
    h, heads = model.hidden_size, model.num_attention_heads
    ffn = model.ffn_hidden_size or (4 * h if arch == "gpt2" else LLAMA_FFN)
    kv_heads = model.num_kv_heads or (heads if arch == "gpt2" else LLAMA_KV_HEADS)
    params = None if model.params is None else int(round(model.params))
    return Shape(arch, model.num_layers, h, ffn, kv_heads, (h // heads) * kv_heads, model.vocab_size,
                 max_positions=model.max_positions or DEFAULT_MAX_POSITIONS, params=params, **style)


def kv_dim(model) -> int:
    return shape(model).kv_dim


def _norm(s: Shape) -> int:
    return (2 if s.norm == "layer" else 1) * s.hidden_size


def layer_matrix_params(model) -> int:
    """Matrix parameters of one transformer layer (split by TP): QKV, output, MLP."""
    s = shape(model)
    h, f = s.hidden_size, s.ffn_hidden_size
    return h * (h + 2 * s.kv_dim) + h * h + (3 if s.mlp == "gated" else 2) * h * f


def layer_params(model) -> int:
    """P: one layer's parameters, its two norms and its biases included."""
    s = shape(model)
    if s.architecture == "uniform":
        return s.params // s.num_layers
    h, f = s.hidden_size, s.ffn_hidden_size
    bias = (h + 2 * s.kv_dim) + h + ((2 if s.mlp == "gated" else 1) * f + h) if s.bias else 0
    return 2 * _norm(s) + layer_matrix_params(model) + bias


def total_params(model) -> int:
    """N: the model's parameters, each once (a tied head counts with the embedding)."""
    s = shape(model)
    if s.architecture == "uniform":
        return s.params
    vh = s.vocab_size * s.hidden_size
    n = vh + s.num_layers * layer_params(model) + _norm(s)
    n += vh if s.embeddings == "untied" else 0
    return n + (s.max_positions * s.hidden_size if s.positions == "learned" else 0)


def layers_on_stage(num_layers: int, pp: int, stage: int) -> int:
    return num_layers // pp + (1 if stage < num_layers % pp else 0)


def _layer_tensors(s: Shape, tp: int, p: str) -> list:
    h, f, kv, bias = s.hidden_size, s.ffn_hidden_size, s.kv_dim, s.bias

    def norm(name):
        return [(p + name + ".weight", (h,))] + ([(p + name + ".bias", (h,))] if s.norm == "layer" else [])

    def linear(name, shape, bias_len):  # a bias split by TP (column-parallel) or replicated (row-parallel)
        return [(p + name + ".weight", shape)] + ([(p + name + ".bias", (bias_len,))] if bias else [])

    up, up_rows = ("mlp.gate_up", 2 * f // tp) if s.mlp == "gated" else ("mlp.up", f // tp)
    return (norm("input_norm") + linear("attention.qkv", ((h + 2 * kv) // tp, h), (h + 2 * kv) // tp)
            + linear("attention.dense", (h, h // tp), h) + norm("post_attention_norm")
            + linear(up, (up_rows, h), up_rows) + linear("mlp.down", (h, f // tp), h))


@lru_cache(maxsize=1024)
def stage_tensors(model, tp: int, pp: int, stage: int) -> tuple:
    """(name, shape) of every parameter tensor one TP rank of pipeline stage ``stage`` holds, unsharded.

    Stage 0 holds the embedding (split by TP over the vocabulary) and learned positions; the last
    stage the head (a tied head too when PP > 1: Megatron keeps a copy there) and the final norm.
    A ``uniform`` model's layers are one flat tensor each: its ``params`` split evenly over the
    layers (the first ``params % num_layers`` one more), each layer evenly over TP."""
    s = shape(model)
    first = sum(layers_on_stage(s.num_layers, pp, k) for k in range(stage))
    layers = range(first, first + layers_on_stage(s.num_layers, pp, stage))
    if s.architecture == "uniform":
        per, extra = divmod(s.params, s.num_layers)
        return tuple((f"layers.{i}.weight", ((per + (i < extra)) // tp,)) for i in layers)
    h, v = s.hidden_size, s.vocab_size
    out = []
    if stage == 0:
        out.append(("embedding.weight", (v // tp, h)))
        if s.positions == "learned":
            out.append(("position_embedding.weight", (s.max_positions, h)))
    for i in layers:
        out += _layer_tensors(s, tp, f"layers.{i}.")
    if stage == pp - 1:
        if s.embeddings == "untied" or pp > 1:
            out.append(("lm_head.weight", (v // tp, h)))
        out += [("final_norm.weight", (h,))] + ([("final_norm.bias", (h,))] if s.norm == "layer" else [])
    return tuple(out)


def _numel(shape_: tuple) -> int:
    n = 1
    for d in shape_:
        n *= d
    return n


@lru_cache(maxsize=1024)
def stage_params(model, tp: int, pp: int, stage: int) -> int:
    """Parameters one TP rank of pipeline stage ``stage`` holds, before any sharding."""
    return sum(_numel(sh) for _, sh in stage_tensors(model, tp, pp, stage))


def stage_model_params(model, par, stage: int) -> int:
    return stage_params(model, par.tp, par.pp, stage)


@lru_cache(maxsize=1024)
def _stage_factored(model, tp: int, pp: int, stage: int) -> int:
    """Elements of a factored second moment for the stage's tensors: rows + columns of a matrix."""
    return sum(sh[0] + sh[1] if len(sh) == 2 else _numel(sh) for _, sh in stage_tensors(model, tp, pp, stage))


# --------------------------------------------------------------------------- numerics

@dataclass(frozen=True)
class Part:
    """One component of a parameter's bytes: ``bytes`` per parameter of ``what``, in ``dtype``."""

    bytes: float
    what: str
    dtype: str


def master_dtype(model, par) -> str | None:
    """The dtype of the optimizer's copy of the weights: the master copy, else the distributed
    optimizer's fp32 main copy (Megatron keeps one even when the weights are fp32), else none."""
    if model.master_dtype != "none":
        return model.master_dtype
    return "fp32" if par.distributed_optimizer else None


def bytes_per_parameter(model, par) -> tuple:
    """The checkpoint's bytes per model parameter, by component (a factored state: its mean)."""
    parts = [Part(DTYPE_BYTES[model.params_dtype], "weights", model.params_dtype)]
    master = master_dtype(model, par)
    if master is not None:
        what = "master" if model.master_dtype != "none" else "main copy (distributed optimizer)"
        parts.append(Part(DTYPE_BYTES[master], what, master))
    states = OPTIMIZER_STATES[model.optimizer]
    if states:
        per = DTYPE_BYTES[model.optimizer_dtype]
        if model.optimizer in FACTORED:  # its mean over the stages' tensors
            tp, pp = par.tp, par.pp
            elems = sum(_stage_factored(model, tp, pp, k) for k in range(pp))
            n = sum(stage_params(model, tp, pp, k) for k in range(pp))
            parts.append(Part(per * elems / n, _STATE_WORDS[model.optimizer], model.optimizer_dtype))
        else:
            parts.append(Part(per * len(states), _STATE_WORDS[model.optimizer], model.optimizer_dtype))
    return tuple(parts)


def describe_bytes_per_parameter(parts) -> str:
    """'2 weights bf16 + 4 master fp32 + 8 adam moments fp32 = 14'."""
    num = lambda b: f"{b:g}" if b >= 0.1 or b == 0 else f"{b:.2g}"  # noqa: E731
    total = sum(p.bytes for p in parts)
    return " + ".join(f"{num(p.bytes)} {p.what} {p.dtype}" for p in parts) + f" = {num(total)}"


# --------------------------------------------------------------------------- layout

@dataclass(frozen=True)
class RankCoords:
    rank: int
    tp: int
    pp: int
    dp: int


def rank_coords(rank: int, tp: int, pp: int, dp: int) -> RankCoords:
    if not 0 <= rank < tp * pp * dp:
        raise ValueError(f"rank {rank} outside a world of {tp * pp * dp}")
    return RankCoords(rank=rank, tp=rank % tp, pp=(rank // tp) % pp, dp=rank // (tp * pp))


def shard_group(par) -> int:
    """G: how many DP ranks share a sharded part (HSDP's group; all DP ranks without one)."""
    return par.shard_group or par.dp


def sharded(par, part: str) -> bool:
    """Whether ``part`` ('model' or 'optimizer') is sharded over the shard group."""
    return par.zero_stage == 3 if part == "model" else par.zero_stage >= 1


def writes(par, part: str, dp_rank: int) -> bool:
    """Whether DP rank ``dp_rank`` writes its copy of ``part``: every replica, or only the first holder
    (of a sharded part: the first shard group's rank with that shard; of a replicated one: DP rank 0).
    With ``balanced`` writers a part is split tensor by tensor: ask :func:`balanced_writes`."""
    if par.writers == "every_replica":
        return True
    if par.writers == "balanced":
        raise ValueError("balanced writers split a part tensor by tensor: see balanced_writes")
    return dp_rank < shard_group(par) if sharded(par, part) else dp_rank == 0


def has_replicas(par) -> bool:
    """Whether some DP ranks hold a copy of state another DP rank holds too (ZeRO below 3, or a shard
    group smaller than DP): what ``writers`` chooses among; without replicas every rank writes its own."""
    return par.dp > 1 and (par.zero_stage < 3 or shard_group(par) < par.dp)


def writers_layout(par) -> tuple[str, str]:
    """(the name of the layout of who writes replicated state, a line saying why): what ``sizes`` shows."""
    if not has_replicas(par):
        return "own_state", "no DP rank holds a copy of another's state: each writes its own"
    if par.writers == "every_replica":
        return "every_replica", "every replica writes its copy"
    if par.writers == "one_replica":
        return "first_replica", "the first replica writes, the others' copies deduplicated"
    if par.whole_tensors:
        return "whole_tensors", ("the replicas share the writes as checkpoint.engine dcp's deduplication does: "
                                 "each tensor whole to the holder with the fewest bytes; DCP never splits a tensor")
    return "even_slices", ("the replicas share the writes, each replicated tensor cut into one even slice per "
                           "holder (checkpoint.engine torch_save): every holder writes 1/replicas of it")


def replicated(par) -> bool:
    """Whether some DP ranks hold a copy of state that another rank writes for them (ZeRO-0, or a
    shard group smaller than DP, with one replica writing): a restore can read it once per group."""
    return (par.writers == "one_replica" and par.dp > 1
            and (par.zero_stage == 0 or shard_group(par) < par.dp))


def state_holders(par, rank: int) -> list[int]:
    """The job's ranks that hold the same state as ``rank`` (its writer, with one replica writing,
    first): the same TP and PP coordinates and, where ZeRO shards, the same shard."""
    if not replicated(par):
        return [rank]
    mp, c = par.tp * par.pp, rank_coords(rank, par.tp, par.pp, par.dp)
    g = shard_group(par)
    dps = range(par.dp) if par.zero_stage == 0 else range(c.dp % g, par.dp, g)
    return [rank % mp + d * mp for d in dps]


def optimizer_partition(model) -> str:
    """How optimizer elements per rank are counted: as given, else ``dlio`` for llama (MLPerf
    Storage's sizing, the presets'), ``local`` for every other architecture."""
    if model.optimizer_partition is not None:
        return model.optimizer_partition
    return "dlio" if architecture(model) == "llama" else "local"


def _optimizer_elems(model, par, stage: int) -> tuple[int, int]:
    """(elements of each elementwise state, elements of a factored state) one rank holds."""
    g = shard_group(par) if sharded(par, "optimizer") else 1
    if optimizer_partition(model) == "dlio":
        elementwise = total_params(model) // (g * par.tp * par.pp) + 5 * model.hidden_size
    else:
        elementwise = stage_params(model, par.tp, par.pp, stage) // g
    return elementwise, _stage_factored(model, par.tp, par.pp, stage) // g


@lru_cache(maxsize=4096)
def _held(model, par, stage: int) -> tuple[int, int]:
    """(model bytes, optimizer bytes) a rank of pipeline stage ``stage`` holds."""
    n = stage_params(model, par.tp, par.pp, stage)
    model_bytes = (n // shard_group(par) if sharded(par, "model") else n) * DTYPE_BYTES[model.params_dtype]
    elementwise, factored = _optimizer_elems(model, par, stage)
    master = master_dtype(model, par)
    optim = elementwise * DTYPE_BYTES[master] if master is not None else 0
    states = OPTIMIZER_STATES[model.optimizer]
    per_state = factored if model.optimizer in FACTORED else elementwise
    optim += len(states) * per_state * DTYPE_BYTES[model.optimizer_dtype]
    return model_bytes, optim


@dataclass(frozen=True)
class RankSize:
    rank: int
    tp: int
    pp: int
    dp: int
    model_bytes: int       # what it writes of the weights
    optimizer_bytes: int   # what it writes of the optimizer state
    held_bytes: int = 0    # the state it holds (what it reads back when every rank restores its own)

    @property
    def total_bytes(self) -> int:
        return self.model_bytes + self.optimizer_bytes


def rank_size(model, par, rank: int) -> RankSize:
    c = rank_coords(rank, par.tp, par.pp, par.dp)
    m, o = _held(model, par, c.pp)
    if par.writers == "balanced":
        written = _balanced_bytes(model, par, c.tp, c.pp)[c.dp]
        return RankSize(rank, c.tp, c.pp, c.dp, written[0], written[1], m + o)
    return RankSize(rank, c.tp, c.pp, c.dp, m if writes(par, "model", c.dp) else 0,
                    o if writes(par, "optimizer", c.dp) else 0, m + o)


def size_key(par, c: RankCoords) -> tuple:
    """Ranks with the same key write and hold the same bytes (a job of 100,000 ranks sizes a few)."""
    if par.writers == "balanced":
        return c.tp, c.pp, c.dp
    return c.pp, writes(par, "model", c.dp), writes(par, "optimizer", c.dp)


def node_bytes(model, par, ranks_per_node: int) -> list[int]:
    """Bytes each node of the full job writes, ``ranks_per_node`` consecutive ranks each (the last
    node may have fewer): unequal where only some DP ranks write (ZeRO-0, one replica writing)."""
    world = par.world_size
    return [sum(rank_size(model, par, r).total_bytes for r in range(lo, min(world, lo + ranks_per_node)))
            for lo in range(0, world, ranks_per_node)]


# --------------------------------------------------------------------------- the tensors a rank writes

@dataclass(frozen=True)
class TensorLayout:
    """One tensor a rank writes: its name, shape and dtype (a DTYPE_BYTES name)."""

    name: str
    shape: tuple
    dtype: str


def held_model_tensors(model, par, stage: int) -> list[TensorLayout]:
    """The weights a rank of pipeline stage ``stage`` holds: its stage's tensors split by TP (flattened
    and sharded over the shard group under ZeRO-3, as ZeRO keeps them)."""
    g, dtype = shard_group(par), model.params_dtype
    out = []
    for name, sh in stage_tensors(model, par.tp, par.pp, stage):
        out.append(TensorLayout(name, (max(1, _numel(sh) // g),) if sharded(par, "model") else sh, dtype))
    return out


def held_optimizer_tensors(model, par, stage: int) -> list[TensorLayout]:
    """The optimizer state a rank of stage ``stage`` holds, one flat partition per state (``dlio``:
    each with DLIO's 5H tail apart)."""
    elementwise, factored = _optimizer_elems(model, par, stage)
    tail = 5 * model.hidden_size if optimizer_partition(model) == "dlio" else 0
    master = master_dtype(model, par)
    states = [] if master is None else [(f"{master}_master", master, False)]
    states += [(name, model.optimizer_dtype, model.optimizer in FACTORED) for name in OPTIMIZER_STATES[model.optimizer]]
    out = []
    for name, dtype, is_factored in states:
        if is_factored:
            out.append(TensorLayout(f"{name}.partition", (factored,), dtype))
            continue
        out.append(TensorLayout(f"{name}.partition", (elementwise - tail,), dtype))
        if tail:
            out.append(TensorLayout(f"{name}.tail", (tail,), dtype))
    return out


HELD = {"model": held_model_tensors, "optimizer": held_optimizer_tensors}


def _written(model, par, c: RankCoords, part: str) -> list[TensorLayout]:
    held = HELD[part](model, par, c.pp)
    if par.writers != "balanced":
        return held if writes(par, part, c.dp) else []
    if not par.whole_tensors:
        place, count = holder_place(par, part, c.dp)
        return held if count == 1 else [t for t in (even_slice(t, place, count) for t in held) if t is not None]
    mine = balanced_writes(model, par, c.tp, c.pp)[c.dp][0 if part == "model" else 1]
    return [t for i, t in enumerate(held) if i in mine]


def holder_place(par, part: str, dp_rank: int) -> tuple[int, int]:
    """(this DP rank's place among the DP ranks holding its copy of ``part``, how many hold it)."""
    g = shard_group(par)
    if replica_class(par, part, dp_rank) is None:
        return dp_rank, par.dp
    return dp_rank // g, par.dp // g


def _slice_bounds(numel: int, place: int, count: int) -> tuple[int, int]:
    return place * numel // count, (place + 1) * numel // count


def even_slice(t: TensorLayout, place: int, count: int) -> TensorLayout | None:
    """Holder ``place`` of ``count``'s slice of ``t``: its elements [lo, hi) flat, named ``name[lo:hi]``;
    the ``count`` slices tile the tensor, at most one element apart (None: an empty slice, unwritten)."""
    lo, hi = _slice_bounds(_numel(t.shape), place, count)
    return TensorLayout(f"{t.name}[{lo}:{hi}]", (hi - lo,), t.dtype) if hi > lo else None


def model_tensors(model, par, c: RankCoords) -> list[TensorLayout]:
    """The weights rank ``c`` writes (of those it holds, :func:`held_model_tensors`)."""
    return _written(model, par, c, "model")


def optimizer_tensors(model, par, c: RankCoords) -> list[TensorLayout]:
    """The optimizer state rank ``c`` writes (of what it holds, :func:`held_optimizer_tensors`)."""
    return _written(model, par, c, "optimizer")


def tensor_bytes(t: TensorLayout) -> int:
    return _numel(t.shape) * DTYPE_BYTES[t.dtype]


def replica_class(par, part: str, dp_rank: int) -> int | None:
    """Which copy of ``part`` DP rank ``dp_rank`` holds: its shard (dp % G) where ZeRO shards the part,
    None where every DP rank holds the same (the ranks of one class hold the same tensors)."""
    return dp_rank % shard_group(par) if sharded(par, part) else None


def replica_key(par, c: RankCoords, part: str, name: str) -> str:
    """A held tensor's name in the job's checkpoint: the same on every rank holding the same tensor
    (its replicas: same TP and PP coordinates, same shard) and on no other (DCP's item key)."""
    cls = replica_class(par, part, c.dp)
    return f"{part}.pp{c.pp}.tp{c.tp}" + ("" if cls is None else f".shard{cls}") + f".{name}"


def _tie_order(ranks) -> dict:
    """Rank -> its place among ``ranks`` when DCP breaks a tie: ``min`` over a Python set of plan
    indices built in rank order returns the first of equal ones in the set's iteration order, which
    for ints is deterministic but not always ascending (a set of ranks M apart wraps its table)."""
    held = set()
    for r in ranks:
        held.add(r)
    return {r: i for i, r in enumerate(held)}


@lru_cache(maxsize=256)
def balanced_writes(model, par, tp: int, stage: int) -> tuple:
    """Per DP rank of the (TP rank ``tp``, stage) column, the indices of the tensors it writes of
    those it holds: (model indices, optimizer indices). PyTorch DCP's deduplication
    (torch/distributed/checkpoint/_dedup_save_plans.py): the ranks' tensors in rank order, each new
    one to the holder with the fewest bytes so far (a tie to the first in DCP's set order,
    :func:`_tie_order`); a tensor only one rank holds stays with it. Columns never share a tensor
    (their TP and PP coordinates differ), so each is deduplicated alone."""
    sizes = [0] * par.dp
    chosen = [(set(), set()) for _ in range(par.dp)]
    nbytes = [[tensor_bytes(t) or 1 for t in HELD[part](model, par, stage)] for part in ("model", "optimizer")]
    mp, seen, g = par.tp * par.pp, set(), shard_group(par)
    for d in range(par.dp):
        for p, part in enumerate(("model", "optimizer")):
            cls = replica_class(par, part, d)
            if (p, cls) in seen:
                continue
            seen.add((p, cls))
            holders = range(par.dp) if cls is None else range(cls, par.dp, g)
            order = _tie_order(tp + stage * par.tp + h * mp for h in holders)
            heap = [(sizes[h], order[tp + stage * par.tp + h * mp], h) for h in holders]
            heapq.heapify(heap)
            for i, n in enumerate(nbytes[p]):
                size, place, h = heapq.heappop(heap)
                chosen[h][p].add(i)
                heapq.heappush(heap, (size + n, place, h))
            for size, _, h in heap:
                sizes[h] = size
    return tuple((frozenset(m), frozenset(o)) for m, o in chosen)


@lru_cache(maxsize=256)
def _balanced_bytes(model, par, tp: int, stage: int) -> tuple:
    """(model bytes, optimizer bytes) each DP rank of a column writes under ``balanced``."""
    held = [[(_numel(t.shape), DTYPE_BYTES[t.dtype]) for t in HELD[part](model, par, stage)]
            for part in ("model", "optimizer")]
    if not par.whole_tensors:
        return tuple(tuple(_sliced_bytes(held[p], *holder_place(par, part, d))
                           for p, part in enumerate(("model", "optimizer"))) for d in range(par.dp))
    return tuple((sum(held[0][i][0] * held[0][i][1] for i in m), sum(held[1][i][0] * held[1][i][1] for i in o))
                 for m, o in balanced_writes(model, par, tp, stage))


def _sliced_bytes(held: list, place: int, count: int) -> int:
    """Bytes holder ``place`` of ``count`` writes of tensors (numel, element bytes) cut by :func:`even_slice`."""
    return sum((hi - lo) * size for n, size in held for lo, hi in (_slice_bounds(n, place, count),))


# --------------------------------------------------------------------------- the whole job

@dataclass(frozen=True)
class CheckpointSize:
    """Sizes of the full job's checkpoint and of the ranks this run starts."""

    params: int
    world_size: int
    model_bytes: int
    optimizer_bytes: int
    ranks: list  # RankSize for each rank this run starts
    #: what the job reads when every rank restores the state it holds (every replica its own copy)
    held_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        return self.model_bytes + self.optimizer_bytes

    @property
    def run_bytes(self) -> int:
        """Bytes the started ranks write (the subset in subset mode)."""
        return sum(r.total_bytes for r in self.ranks)


def checkpoint_size(model, par) -> CheckpointSize:
    """Whole-job totals (every rank of the full layout) and the started ranks' sizes."""
    world = par.world_size
    model_total = optim_total = held = 0
    for r in range(world):
        s = rank_size(model, par, r)
        model_total += s.model_bytes
        optim_total += s.optimizer_bytes
        held += s.held_bytes
    started = [rank_size(model, par, r) for r in range(par.active_ranks)]
    return CheckpointSize(total_params(model), world, model_total, optim_total, started, held)
