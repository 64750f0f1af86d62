"""Synthetic model + optimizer state for one rank, and its reusable staging buffers.

Shapes follow the rank's share of the model (sizing.py): bf16 per-layer
weights for its pipeline stage, split by TP (and flattened over DP under
ZeRO-3, as ZeRO stores them), and ZeRO-style flat fp32 partitions for the
optimizer (master weights, exp_avg, exp_avg_sq, each plus a 5H tail as in
DLIO). ``scale`` shrinks every tensor by the same factor.

Content (``emulator/content.py``) is made once, before any timing, from a
per-rank random pool keyed per 4 KiB block, so storage cannot dedup or
compress it; each training step re-keys 1/interval of it, so consecutive
checkpoints share no block either. Staging buffers are allocated and touched
once and reused for every snapshot, because fresh pages are far slower to
touch than pages in use (docs/performance.md). The snapshot copies each tensor's bytes with libc's
memmove (non-temporal stores for large blocks; never slower than torch's
``copy_`` on one thread, figures in docs/performance.md). That copy is the whole async stall.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import torch

from . import sizing
from .content import Content


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * torch.empty((), dtype=self.dtype).element_size()


def _scaled(shape: tuple, scale: float) -> tuple:
    """Shrink the leading dimension so numel scales by ``scale`` (at least one row)."""
    if scale >= 1.0:
        return shape
    lead = max(1, round(shape[0] * scale))
    return (lead,) + tuple(shape[1:])


def model_specs(model, par, coords: sizing.RankCoords, scale: float = 1.0) -> list[TensorSpec]:
    """bf16 weights this rank writes: per-layer tensors of its stage, or none (ZeRO<3, DP>0)."""
    if par.zero_stage < 3 and coords.dp != 0:
        return []
    h, f, v, tp = model.hidden_size, model.ffn_hidden_size, model.vocab_size, par.tp
    kv = sizing.kv_dim(model)
    first = sum(sizing.layers_on_stage(model.num_layers, par.pp, s) for s in range(coords.pp))
    count = sizing.layers_on_stage(model.num_layers, par.pp, coords.pp)
    shapes: list[tuple[str, tuple]] = []
    if coords.pp == 0:
        shapes.append(("embedding.weight", (v // tp, h)))
    for layer in range(first, first + count):
        p = f"layers.{layer}."
        shapes += [
            (p + "input_norm.weight", (h,)),
            (p + "attention.qkv.weight", ((h + 2 * kv) // tp, h)),
            (p + "attention.dense.weight", (h, h // tp)),
            (p + "post_attention_norm.weight", (h,)),
            (p + "mlp.gate_up.weight", (2 * f // tp, h)),
            (p + "mlp.down.weight", (h, f // tp)),
        ]
    if coords.pp == par.pp - 1:
        shapes += [("lm_head.weight", (v // tp, h)), ("final_norm.weight", (h,))]
    specs = []
    for name, shape in shapes:
        if par.zero_stage == 3:  # ZeRO-3 keeps a flat 1/DP partition of every parameter
            numel = 1
            for d in shape:
                numel *= d
            shape = (max(1, numel // par.dp),)
        specs.append(TensorSpec(name, _scaled(shape, scale), torch.bfloat16))
    return specs


def optimizer_specs(model, par, coords: sizing.RankCoords, scale: float = 1.0) -> list[TensorSpec]:
    """fp32 flat partitions: master weights and Adam's two moments, each with a 5H tail."""
    elems = sizing.optimizer_elems_for_rank(model, par, coords)
    if elems == 0:
        return []
    tail = 5 * model.hidden_size
    specs = []
    for state in ("fp32_master", "exp_avg", "exp_avg_sq"):
        specs.append(TensorSpec(f"{state}.partition", _scaled((elems - tail,), scale), torch.float32))
        specs.append(TensorSpec(f"{state}.tail", _scaled((tail,), scale), torch.float32))
    return specs


def _copy_bytes(dst: torch.Tensor, src: torch.Tensor) -> None:
    """``dst.copy_(src)`` for same-layout CPU tensors, as one memmove (releases the GIL)."""
    if (dst.dtype == src.dtype and dst.shape == src.shape and dst.device.type == src.device.type == "cpu"
            and dst.is_contiguous() and src.is_contiguous()):
        ctypes.memmove(dst.data_ptr(), src.data_ptr(), src.numel() * src.element_size())
    else:
        dst.copy_(src)


def _allocate(specs: list[TensorSpec]) -> dict[str, torch.Tensor]:
    return {s.name: torch.empty(s.shape, dtype=s.dtype) for s in specs}


class RankState:
    """The live state a rank checkpoints, plus staging buffers of identical layout."""

    def __init__(self, model, par, rank: int, scale: float = 1.0, seed: int = 0, *,
                 update_slices: int = 1, dedup_ratio: float = 1.0, compress_ratio: float = 1.0):
        self.coords = sizing.rank_coords(rank, par.tp, par.pp, par.dp)
        self.model_specs = model_specs(model, par, self.coords, scale)
        self.optim_specs = optimizer_specs(model, par, self.coords, scale)
        self.emulated_bytes = sizing.rank_size(model, par, rank).total_bytes
        self.live = {"model": _allocate(self.model_specs), "optimizer": _allocate(self.optim_specs)}
        self.content = Content(list(self.tensors("live")), seed=seed, rank=rank, slices=update_slices,
                               dedup_ratio=dedup_ratio, compress_ratio=compress_ratio)
        self.content.fill()
        # staging buffers: allocated and touched once here, reused by every snapshot
        self.staging = {g: {k: t.clone() for k, t in ts.items()} for g, ts in self.live.items()}

    @classmethod
    def from_config(cls, cfg, rank: int) -> "RankState":
        """The state rank ``rank`` of a run of ``cfg`` trains and checkpoints."""
        return cls(cfg.model, cfg.parallelism, rank, cfg.run.scale, cfg.run.seed,
                   update_slices=cfg.checkpoint.interval_steps, dedup_ratio=cfg.state.dedup_ratio,
                   compress_ratio=cfg.state.compress_ratio)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for g in self.live.values() for t in g.values())

    def tensors(self, which: str = "live"):
        state = self.live if which == "live" else self.staging
        for group in state.values():
            yield from group.values()

    def snapshot(self) -> None:
        """Copy live state into the staging buffers (the GPU-to-host copy stand-in)."""
        for g, ts in self.live.items():
            dst = self.staging[g]
            for k, t in ts.items():
                _copy_bytes(dst[k], t)

    def adopt_staging(self) -> None:
        """Swap roles: the staging buffers become the live state and vice versa.

        A restore reads a verified checkpoint straight into the staging buffers
        (same layout, pages already touched) and then swaps, instead of copying
        the whole state a second time. Call it only with no checkpoint in flight
        (the pipeline reads the staging buffers).
        """
        self.live, self.staging = self.staging, self.live
        self.content.bind(list(self.tensors("live")))

    def mutate(self, step: int) -> None:
        """One training step's update of the live state: re-keys 1/update_slices of its bytes."""
        self.content.advance(step)

    def payload(self, step: int) -> dict:
        """What torch.save writes: the staged tensors plus a little metadata."""
        return {"step": step, "rank": self.coords.rank, **self.staging}

    def fill_staging(self, loaded: dict) -> int:
        """Copy a loaded checkpoint into the staging buffers (``adopt_staging`` makes it live)."""
        n = 0
        for g, ts in self.staging.items():
            src = loaded[g]
            for k, t in ts.items():
                t.copy_(src[k])
                n += t.numel() * t.element_size()
        return n
