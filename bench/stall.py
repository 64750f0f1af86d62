"""The async stall against the best baselines there are, on the same state, in one process.

Per round: our async checkpoint's stall, our sync checkpoint's stall, ``dcp.async_save``
with its default stager (a fresh copy every call) and with a reused ``DefaultStager``
doing async staging (DCP's best on a CPU build: pinned memory needs CUDA), whose
"staging done" time is what the training loop really waits for (it must not change the
state before), and the floor: a bare ``memmove`` of every tensor into warm, preallocated
buffers, which no checkpointer can beat.

Results: ``async_stall_vs_dcp_best`` (target <= 1.0) and ``async_stall_vs_floor``
(<= 1.5) are the headline; ``async_stall_vs_dcp_default`` and ``async_stall_vs_sync``
(<= 0.05) put them in context.
"""
from __future__ import annotations

import ctypes
import time
from pathlib import Path

from . import baselines
from .common import LOWER, Params, median, result, run_rounds


def _floor_copy(state) -> callable:
    """A bare copy of the live tensors into buffers allocated and touched once."""
    import torch
    buffers = [torch.empty_like(t) for t in state.tensors("live")]
    for b, t in zip(buffers, state.tensors("live")):
        b.copy_(t)

    def copy(_i) -> float:
        t0 = time.perf_counter()
        for b, t in zip(buffers, state.tensors("live")):
            ctypes.memmove(b.data_ptr(), t.data_ptr(), t.numel() * t.element_size())
        return time.perf_counter() - t0
    return copy


def _dcp_best_stager():
    from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
    return DefaultStager(StagingOptions(use_pinned_memory=False, use_shared_memory=False,
                                        use_async_staging=True, use_non_blocking_copy=False))


def _ours(ck, recs: dict, warmup: int):
    step = [0]

    def make(mode):
        def run(i):
            step[0] += 1
            rec = ck.checkpoint(step[0], mode)
            ck.finish()  # untimed: the next checkpoint comes after the drain (interval long enough)
            if not rec.global_complete:
                raise RuntimeError(f"{mode} checkpoint incomplete: {rec.error}")
            if i >= warmup:
                recs[mode].append(rec)
            return rec.stall_s
        return run
    return make


def _rounds(params: Params, state, ck, wd: Path, stager) -> tuple[list, dict]:
    recs = {"sync": [], "async": []}
    ours = _ours(ck, recs, params.warmup)
    fns = {
        "async": ours("async"), "sync": ours("sync"), "floor": _floor_copy(state),
        "dcp_default": lambda i: baselines.dcp_async_save(state.live, wd / f"dcp{i}")["stall_s"],
        # the loop may change the state only once staging is done: that is DCP's real stall
        "dcp_best": lambda i: baselines.dcp_async_save(state.live, wd / f"dcpb{i}", stager)["staged_s"],
    }
    return run_rounds(params, fns), recs


def bench_async_stall(params: Params, wd: Path) -> dict:
    import torch.distributed as dist

    from .benches import make_checkpointer, make_state
    cfg, state = make_state(params)
    ck, _, _ = make_checkpointer(cfg, state, wd)
    dist.init_process_group("gloo", init_method=f"file://{wd}/pg.store", rank=0, world_size=1)
    stager = _dcp_best_stager()
    try:
        rounds, recs = _rounds(params, state, ck, wd, stager)
    finally:
        stager.close()
        ck.close()
        dist.destroy_process_group()
    return _results(rounds, recs, state)


def _results(rounds: list, recs: dict, state) -> dict:
    col = {k: [r[k] for r in rounds] for k in rounds[0]}
    breakdown = {"async_snapshot_s": median(r.snapshot_s for r in recs["async"]),
                 "sync_local_write_s": median(r.local_write_s for r in recs["sync"]),
                 "sync_drain_s": median(r.drain_s for r in recs["sync"]), "state_bytes": state.nbytes}

    def vs(base: str, target: float, baseline_is: str) -> dict:
        return result(ratio_samples=[x / y for x, y in zip(col["async"], col[base])], ours_samples=col["async"],
                      base_samples=col[base], unit="s", target=target, better=LOWER,
                      ratio_is=f"stall ours/baseline (our async stall / {base}, same state)",
                      ours_is="Checkpointer.checkpoint(mode='async') stall: snapshot into staging buffers",
                      baseline_is=baseline_is, **breakdown)
    return {
        "async_stall_vs_dcp_best": vs("dcp_best", 1.0, "dcp.async_save with a reused DefaultStager (async staging; "
                                     "pinned memory needs CUDA): time until staging is done"),
        "async_stall_vs_floor": vs("floor", 1.5, "bare memmove of every tensor into warm, preallocated buffers"),
        "async_stall_vs_dcp_default": vs("dcp_default", 1.0, "dcp.async_save, default stager (fresh copy each "
                                         "call, thread executor): time until it returns"),
        "async_stall_vs_sync": vs("sync", 0.05, "Checkpointer.checkpoint(mode='sync') stall: snapshot, local "
                                  "write, drain, manifests"),
    }
