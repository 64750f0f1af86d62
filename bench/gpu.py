"""``python -m bench.gpu``: a rank's state on a GPU, our staging against the best baselines (issue 16).

One process, one GPU, the same state (Llama-3 8B's rank-0 layout scaled to ``--rank-gib``);
per round, in rotating order:

- ours: ``Checkpointer.checkpoint(mode='async')`` stall (device-to-host into the one pinned
  staging copy on a side stream, until the copy-done event), the drain waited untimed;
- floor: a bare ``copy_(non_blocking=True)`` of every tensor into pinned buffers allocated
  and touched once, then ``torch.cuda.synchronize()``: what no stager can beat;
- ``dcp.async_save`` with a reused ``DefaultStager`` (pinned, non-blocking copies, async
  staging): its "staging done" time, what the loop must wait before changing the state;
- ``dcp.async_save`` with its default stager: the time until it returns;
- restore: ``RankState.adopt_staging`` (host-to-device from the pinned staging copy into the
  live tensors, the last step of a verified restore) against a bare pinned host-to-device copy;
- then, on a second state with a pinned budget of a quarter of its size, the snapshot through
  pinned bucket slots against the same bare copy (no target: what staying in budget costs).

Targets: async stall / floor <= 1.2, / DCP pinned stager <= 0.5; restore host-to-device
throughput / bare >= 0.8. Without CUDA it prints ``skipped: no CUDA`` and exits 0.
"""
from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import time
from pathlib import Path

from .common import GIB, HIGHER, LOWER, Params, median, result, remove, run_rounds, work_folder


def no_cuda_reason() -> str | None:
    import torch
    if not torch.backends.cuda.is_built():
        return f"torch {torch.__version__} is built without CUDA"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA device"
    return None


def _pinned_like(tensors) -> list:
    import torch
    out = [torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for t in tensors]
    for b, t in zip(out, tensors):  # touched once: warm buffers
        b.copy_(t)
    return out


def _bare(pairs_of) -> callable:
    """Time a bare non-blocking copy of every (dst, src) pair, to the end of the copies."""
    import torch

    def copy(_i) -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for dst, src in pairs_of():
            dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        return time.perf_counter() - t0
    return copy


def _dcp_pinned_stager():
    from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
    return DefaultStager(StagingOptions(use_pinned_memory=True, use_shared_memory=False,
                                        use_async_staging=True, use_non_blocking_copy=True))


def _ours(ck, recs: list, warmup: int):
    step = [0]

    def run(i) -> float:
        step[0] += 1
        rec = ck.checkpoint(step[0], "async")
        ck.finish()  # untimed: the next checkpoint comes after the write (interval long enough)
        if not rec.global_complete:
            raise RuntimeError(f"async checkpoint incomplete: {rec.error}")
        if i >= warmup:
            recs.append(rec)
        return rec.stall_s
    return run


def _restore(state):
    def run(_i) -> float:
        import torch
        torch.cuda.synchronize()
        return state.adopt_staging().device_s
    return run


def _functions(params: Params, state, ck, wd: Path, stager, recs: list) -> dict:
    from . import baselines
    live = list(state.tensors("live"))
    floor_bufs = _pinned_like(live)
    return {
        "async": _ours(ck, recs, params.warmup),
        "floor_d2h": _bare(lambda: zip(floor_bufs, live)),
        "dcp_pinned": lambda i: baselines.dcp_async_save(state.live, wd / f"dcpp{i}", stager)["staged_s"],
        "dcp_default": lambda i: baselines.dcp_async_save(state.live, wd / f"dcpd{i}")["stall_s"],
        "restore_h2d": _restore(state),
        "floor_h2d": _bare(lambda: zip(live, floor_bufs)),
    }


def run_bench(params: Params) -> dict:
    import torch
    import torch.distributed as dist

    from emulator.checkpoint.checkpointer import Checkpointer
    from emulator.design import resolve
    from emulator.rank.comm import SoloComm
    from emulator.workload.state import RankState
    from tiers.directory import DirTier

    from .benches import rank_config, setup_process
    wd = Path(params.workdir)
    cfg = rank_config(params)
    setup_process(params, cfg)
    state = RankState.of_run(cfg, resolve(cfg, run=True), 0, torch.device("cuda", 0))
    ck = Checkpointer(state, None, DirTier(wd / "global"), SoloComm(), keep=cfg.checkpoint.keep)
    dist.init_process_group("gloo", init_method=f"file://{wd}/pg.store", rank=0, world_size=1)
    stager, recs = _dcp_pinned_stager(), []
    try:
        rounds = run_rounds(params, _functions(params, state, ck, wd, stager, recs))
    finally:
        stager.close()
        ck.close()
        dist.destroy_process_group()
        shutil.rmtree(wd / "global", ignore_errors=True)  # what it wrote (the folder is the caller's)
        remove(wd / "pg.store")
    res = _results(rounds, recs, state)
    del ck, state
    torch.cuda.empty_cache()
    res["gpu_bucketed_snapshot_vs_floor"] = _bucketed(params, cfg)
    return res


def _bucketed(params: Params, cfg) -> dict:
    """The snapshot of a state whose pinned budget is a quarter of its size, against a bare copy."""
    import torch

    from emulator.workload.state import RankState
    state = RankState(cfg.model, cfg.parallelism, 0, cfg.run.scale, cfg.run.seed, device=torch.device("cuda", 0),
                      pinned_budget=max(2 << 20, int(params.rank_gib * GIB) // 4))
    live = list(state.tensors("live"))
    bufs = _pinned_like(live)
    rounds = run_rounds(params, {"bucketed": lambda i: state.snapshot().seconds,
                                 "floor": _bare(lambda: zip(bufs, live))})
    col = {k: [r[k] for r in rounds] for k in rounds[0]}
    return result(ratio_samples=[o / b for o, b in zip(col["bucketed"], col["floor"])],
                  ours_samples=col["bucketed"], base_samples=col["floor"], unit="s", target=None, better=LOWER,
                  ratio_is="snapshot ours/bare (pinned budget = state / 4, same state)",
                  ours_is="RankState.snapshot through two pinned bucket slots into a pageable staging copy",
                  baseline_is="bare copy_(non_blocking=True) into warm pinned buffers of the whole state",
                  staging=state.stager.describe())


def _results(rounds: list, recs: list, state) -> dict:
    col = {k: [r[k] for r in rounds] for k in rounds[0]}
    extra = {"state_bytes": state.nbytes, "tensors": sum(1 for _ in state.tensors()),
             "async_d2h_s": median(r.d2h_s for r in recs), "staging": state.stager.describe()}

    def stall_vs(base: str, target, baseline_is: str) -> dict:
        return result(ratio_samples=[o / b for o, b in zip(col["async"], col[base])], ours_samples=col["async"],
                      base_samples=col[base], unit="s", target=target, better=LOWER,
                      ratio_is=f"stall ours/baseline (our async stall / {base}, same state)",
                      ours_is="Checkpointer.checkpoint(mode='async') stall: D2H into the pinned staging copy, "
                              "side stream, until the copy-done event", baseline_is=baseline_is, **extra)
    nbytes = state.nbytes
    return {
        "gpu_async_stall_vs_floor": stall_vs("floor_d2h", 1.2, "bare copy_(non_blocking=True) of every tensor "
                                             "into warm pinned buffers, then synchronize"),
        "gpu_async_stall_vs_dcp_pinned": stall_vs("dcp_pinned", 0.5, "dcp.async_save, reused DefaultStager "
                                                  "(pinned, non-blocking, async staging): staging done"),
        "gpu_async_stall_vs_dcp_default": stall_vs("dcp_default", None, "dcp.async_save, default stager: "
                                                   "time until it returns"),
        "gpu_restore_h2d_vs_floor": result(
            ratio_samples=[b / o for o, b in zip(col["restore_h2d"], col["floor_h2d"])],
            ours_samples=[nbytes / o / GIB for o in col["restore_h2d"]],
            base_samples=[nbytes / b / GIB for b in col["floor_h2d"]], unit="GiB/s", target=0.8, better=HIGHER,
            ratio_is="throughput ours/bare (host-to-device of the same bytes)",
            ours_is="RankState.adopt_staging: the verified staging copy host-to-device into the live tensors",
            baseline_is="bare copy_(non_blocking=True) from warm pinned buffers, then synchronize",
            bytes=nbytes, **{k: v for k, v in extra.items() if k != "async_d2h_s"}),
    }


def _header(params: Params) -> list[str]:
    import torch
    return [f"bench.gpu: {torch.cuda.get_device_name(0)}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
            f"{platform.node()}",
            f"state {params.rank_gib:g} GiB (Llama-3 8B rank-0 layout), {params.pairs} pairs after "
            f"{params.warmup} warm-up; medians of per-round ratios"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gpu", description=__doc__.split("\n")[0])
    ap.add_argument("--rank-gib", type=float, default=4.0)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--workdir", help="an empty folder of yours to work in (default: a new private one, removed after)")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    args = ap.parse_args(argv)
    reason = no_cuda_reason()
    if reason is not None:
        print(f"skipped: no CUDA ({reason})")
        return 0
    workdir, made = work_folder(args.workdir, "ckpt-emu-bench-gpu-")
    params = Params(pairs=args.pairs, warmup=args.warmup, rank_gib=args.rank_gib, workdir=str(workdir))
    try:
        res = run_bench(params)
    finally:
        if made:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        from .suite import _finite
        print(json.dumps(_finite(res), indent=1))
    else:
        from .suite import format_table
        print(format_table(res, _header(params)), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
