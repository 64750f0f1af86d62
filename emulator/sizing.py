"""Checkpoint sizing from model dimensions and parallelism (MLPerf Storage v2.0 / DLIO).

Pure functions, no I/O. Rank layout follows DLIO: tensor-parallel rank varies
fastest, then pipeline stage, then data-parallel replica
(``tp = r % TP, pp = (r // TP) % PP, dp = r // (TP * PP)``).

Per transformer layer, P = 2H + H(H + 2*dkv) + H^2 + 3*H*F with
dkv = (H // A) * KV; the whole model has N = 2*V*H + L*P + H parameters.
Model state is 2-byte floats with matrix terms split by TP and layers split
over PP stages (the first L % PP stages get one more layer); stage 0 adds the
embedding V*H/TP, the last stage the lm_head V*H/TP and the final norm H.
ZeRO-3 shards the model over DP as well; below ZeRO-3 only DP rank 0 writes
it. Optimizer state is fp32 master weights and Adam's two moments:
3 * (N // (DP*TP*PP) + 5H) * 4 bytes per rank (ZeRO-0: DP rank 0 writes
N // (TP*PP)).
"""
from __future__ import annotations

from dataclasses import dataclass

MODEL_DTYPE_BYTES = 2
OPTIMIZER_DTYPE_BYTES = 4
OPTIMIZER_STATES = 3  # fp32 master, exp_avg, exp_avg_sq


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


def kv_dim(model) -> int:
    return (model.hidden_size // model.num_attention_heads) * model.num_kv_heads


def layer_matrix_params(model) -> int:
    """Matrix parameters of one transformer layer (split by TP): QKV, output, gated MLP."""
    h, f = model.hidden_size, model.ffn_hidden_size
    return h * (h + 2 * kv_dim(model)) + h * h + 3 * h * f


def layer_params(model) -> int:
    """P: one layer's parameters, its two norms (2H) included."""
    return 2 * model.hidden_size + layer_matrix_params(model)


def total_params(model) -> int:
    """N = 2VH (embedding + lm_head) + L*P + H (final norm)."""
    return 2 * model.vocab_size * model.hidden_size + model.num_layers * layer_params(model) + model.hidden_size


def layers_on_stage(num_layers: int, pp: int, stage: int) -> int:
    return num_layers // pp + (1 if stage < num_layers % pp else 0)


def stage_model_params(model, par, stage: int) -> int:
    """Parameters one TP rank of pipeline stage ``stage`` holds, before any ZeRO-3 sharding."""
    h, v, tp = model.hidden_size, model.vocab_size, par.tp
    per_layer = 2 * h + layer_matrix_params(model) // tp
    n = layers_on_stage(model.num_layers, par.pp, stage) * per_layer
    if stage == 0:
        n += v * h // tp
    if stage == par.pp - 1:
        n += v * h // tp + h
    return n


def model_bytes_for_rank(model, par, c: RankCoords) -> int:
    n = stage_model_params(model, par, c.pp)
    if par.zero_stage == 3:
        return n // par.dp * MODEL_DTYPE_BYTES
    return n * MODEL_DTYPE_BYTES if c.dp == 0 else 0


def optimizer_elems_for_rank(model, par, c: RankCoords) -> int:
    """Elements in each of the three fp32 optimizer states on this rank."""
    n = total_params(model)
    if par.zero_stage == 0:
        return n // (par.tp * par.pp) + 5 * model.hidden_size if c.dp == 0 else 0
    return n // (par.dp * par.tp * par.pp) + 5 * model.hidden_size


def optimizer_bytes_for_rank(model, par, c: RankCoords) -> int:
    return OPTIMIZER_STATES * optimizer_elems_for_rank(model, par, c) * OPTIMIZER_DTYPE_BYTES


@dataclass(frozen=True)
class RankSize:
    rank: int
    tp: int
    pp: int
    dp: int
    model_bytes: int
    optimizer_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.model_bytes + self.optimizer_bytes


def rank_size(model, par, rank: int) -> RankSize:
    c = rank_coords(rank, par.tp, par.pp, par.dp)
    return RankSize(rank, c.tp, c.pp, c.dp, model_bytes_for_rank(model, par, c),
                    optimizer_bytes_for_rank(model, par, c))


@dataclass(frozen=True)
class CheckpointSize:
    """Sizes of the full job's checkpoint and of the ranks this run starts."""

    params: int
    world_size: int
    model_bytes: int
    optimizer_bytes: int
    ranks: list  # RankSize for each rank this run starts

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
    model_total = 0
    optim_total = 0
    for r in range(world):
        s = rank_size(model, par, r)
        model_total += s.model_bytes
        optim_total += s.optimizer_bytes
    started = [rank_size(model, par, r) for r in range(par.active_ranks)]
    return CheckpointSize(total_params(model), world, model_total, optim_total, started)
