"""The dcp engine's save against PyTorch's own: ``checkpoint.engine: dcp``'s write (DCP's planner and
writer through our tier: its sink's fsync and atomic publish, CRC32C for the manifest) against a
bare ``torch.distributed.checkpoint.save`` of the same state dict to the same folder (DCP's
``FileSystemWriter``, its files fsynced), alternating, in a one-process gloo world."""
from __future__ import annotations

import shutil
import time
from pathlib import Path

from .benches import make_state, throughput_samples
from .common import HIGHER, Params, result, run_pairs


def bench_dcp_save(params: Params, wd: Path) -> dict:
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    from emulator.checkpoint.dcp_engine import DcpSaver, state_dict
    from tiers.directory import DirTier
    cfg, state = make_state(params)
    dist.init_process_group("gloo", init_method=f"file://{wd / 'rendezvous'}", rank=0, world_size=1)
    try:
        group = dist.new_group(backend="gloo")
        saver, tier, folder = DcpSaver(state, cfg.parallelism, group), DirTier(wd / "tier"), "step_00000001"
        sd = state_dict(state, cfg.parallelism)

        def ours(i):
            t = time.perf_counter()
            saver.save(tier, folder)
            dt = time.perf_counter() - t
            shutil.rmtree(wd / "tier" / folder)
            return dt

        def base(i):
            t = time.perf_counter()
            dcp.save(sd, checkpoint_id=str(wd / "tier" / folder), process_group=group)
            dt = time.perf_counter() - t
            shutil.rmtree(wd / "tier" / folder)
            return dt

        pairs = run_pairs(params, ours, base)
        nbytes = state.nbytes
    finally:
        dist.destroy_process_group()
    return {"dcp_save": result(
        **throughput_samples(pairs, nbytes), unit="GiB/s", target=0.9, better=HIGHER,
        ratio_is="throughput ours/baseline (= bare dcp.save time / our time, same state, same folder)",
        ours_is="the dcp engine's write: dcp.save, DCP's planner and FileSystemWriter through a DirTier's sink "
                "(CRC32C, fsync, rename, fsync dir)",
        baseline_is="dcp.save(state_dict, checkpoint_id=FOLDER): FileSystemWriter, its files fsynced",
        bytes=nbytes, tensors=len(sd))}
