"""Synthetic model + optimizer state for one rank, and its reusable staging buffers.

Shapes and dtypes are the rank's share of the model as sizing.py lays it out: per-layer
weights of its pipeline stage in the weights' dtype, split by TP (flattened and sharded
under ZeRO-3, as ZeRO stores them), and ZeRO-style flat partitions for the optimizer (a
master copy and each optimizer state in their dtypes; with DLIO's sizing, each plus a 5H
tail). ``scale`` shrinks every tensor by the same factor, to the element.

Content (``emulator/workload/content.py``) is made once, before any timing, from a
per-rank random pool keyed per 4 KiB block, so storage cannot dedup or
compress it; each training step re-keys 1/interval of it, so consecutive
checkpoints share no block either. The live state lives on the rank's device
(``state.device``: the CPU, or a GPU); its one host staging copy is allocated and
touched once and reused for every snapshot, because fresh pages are far slower to
touch than pages in use (docs/performance.md). The snapshot is ``emulator.staging``:
a memmove per tensor on the CPU, device-to-host copies into pinned buffers on a GPU.
That copy is the whole async stall.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from emulator import sizing
from emulator.workload.content import Content
from emulator.workload.staging import Stager, StageTiming, copier_for


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
    """``scale`` of the tensor's elements (at least one): its leading dimension shrunk where that is
    exact, else flat (a weight of 1,024 rows at 0.001 is 1.024 rows: one row would be 2.4 % short)."""
    if scale >= 1.0:
        return shape
    rest = 1
    for d in shape[1:]:
        rest *= d
    numel = max(1, round(shape[0] * rest * scale))
    return (numel // rest,) + tuple(shape[1:]) if numel % rest == 0 else (numel,)


#: torch's dtype for each dtype name a config may use (emulator/sizing.py DTYPE_BYTES)
TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.float8_e4m3fn}


def _specs(layouts: list, scale: float) -> list[TensorSpec]:
    return [TensorSpec(t.name, _scaled(t.shape, scale), TORCH_DTYPES[t.dtype]) for t in layouts]


def model_specs(model, par, coords: sizing.RankCoords, scale: float = 1.0) -> list[TensorSpec]:
    """The weights this rank writes (sizing.model_tensors): its stage's tensors, or none."""
    return _specs(sizing.model_tensors(model, par, coords), scale)


def optimizer_specs(model, par, coords: sizing.RankCoords, scale: float = 1.0) -> list[TensorSpec]:
    """The optimizer state this rank writes (sizing.optimizer_tensors): flat partitions, one per state."""
    return _specs(sizing.optimizer_tensors(model, par, coords), scale)


def _allocate(specs: list[TensorSpec], device) -> dict[str, torch.Tensor]:
    return {s.name: torch.empty(s.shape, dtype=s.dtype, device=device) for s in specs}


class RankState:
    """The live state a rank checkpoints, plus staging buffers of identical layout."""

    def __init__(self, model, par, rank: int, scale: float = 1.0, seed: int = 0, *,
                 update_slices: int = 1, dedup_ratio: float = 1.0, compress_ratio: float = 1.0,
                 device="cpu", pinned_budget: int | None = None):
        self.coords = sizing.rank_coords(rank, par.tp, par.pp, par.dp)
        self.model_specs = model_specs(model, par, self.coords, scale)
        self.optim_specs = optimizer_specs(model, par, self.coords, scale)
        self.emulated_bytes = sizing.rank_size(model, par, rank).total_bytes
        self.device = torch.device(device)
        self.live = {"model": _allocate(self.model_specs, self.device),
                     "optimizer": _allocate(self.optim_specs, self.device)}
        self.content = Content(list(self.tensors("live")), seed=seed, rank=rank, slices=update_slices,
                               dedup_ratio=dedup_ratio, compress_ratio=compress_ratio)
        self.content.fill()
        live = list(self.tensors("live"))
        self.stager = Stager([t.numel() * t.element_size() for t in live], copier_for(self.device), pinned_budget)
        host = iter(self.stager.host_buffers(live))  # allocated and touched once, reused by every snapshot
        self.staging = {g: {k: next(host) for k in ts} for g, ts in self.live.items()}
        if not self.snapshot_copies:  # both sets' views made now: a paced snapshot swaps them in microseconds
            self.content.bind(self.tensors("staging"))
            self.content.bind(self.tensors("live"))

    @classmethod
    def of_run(cls, cfg, design, rank: int, device="cpu") -> "RankState":
        """The state rank ``rank`` of a run trains and checkpoints, on ``device``: its layout, scale and
        content from ``cfg``, re-keyed whole over the steps between checkpoints of the run's ``design``
        (its design.json), so that consecutive checkpoints share no block."""
        budget = cfg.state.pinned_budget_gib
        return cls(cfg.model, cfg.parallelism, rank, cfg.run.scale, cfg.run.seed,
                   update_slices=design.interval_steps, dedup_ratio=cfg.state.dedup_ratio,
                   compress_ratio=cfg.state.compress_ratio, device=device,
                   pinned_budget=None if budget is None else int(budget * (1 << 30)))

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for g in self.live.values() for t in g.values())

    def tensors(self, which: str = "live"):
        state = self.live if which == "live" else self.staging
        for group in state.values():
            yield from group.values()

    @property
    def snapshot_copies(self) -> bool:
        """Whether a paced snapshot still copies bytes here: a device's state does (its real
        device-to-host copy); a CPU state's buffers swap (:meth:`snapshot`)."""
        return self.device.type != "cpu"

    def snapshot(self, *, paced: bool = False) -> StageTiming:
        """Copy the live state into the staging buffers (device-to-host on a GPU). A ``paced`` snapshot
        of a CPU state swaps the two instead: the design's copy is a DMA the emulator paces, not this
        host's CPU work, and training re-keys every slice of the (older) new live state before the next
        checkpoint (``Content``: slices = the interval), so each checkpoint's bytes stay fresh."""
        if paced and not self.snapshot_copies:
            self.live, self.staging = self.staging, self.live
            self.content.bind(list(self.tensors("live")))
            return StageTiming(0.0, 0.0, self.nbytes, 0)
        return self.stager.to_host(list(self.tensors("live")), list(self.tensors("staging")))

    def adopt_staging(self) -> StageTiming | None:
        """Make the staging buffers' bytes (a verified restore) the live state.

        On the CPU the roles swap (staging becomes live and vice versa) instead of
        copying the whole state a second time; on a GPU the bytes go host-to-device
        into the live tensors (returns that copy's timing). Call it only with no
        checkpoint in flight (the pipeline reads the staging buffers).
        """
        if self.device.type != "cpu":
            return self.stager.to_device(list(self.tensors("staging")), list(self.tensors("live")))
        self.live, self.staging = self.staging, self.live
        self.content.bind(list(self.tensors("live")))
        return None

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
