"""The MLPerf-mode write against ``dd`` with fsync, on the same bytes.

One rank's checkpoint as ``checkpoint.protocol: mlperf`` writes it
(``emulator.mlperf.protocol.save_files``: DLIO's model and optimizer files, ``torch.save``
with its zip CRC32 on, each file fsynced by the directory tier's durable
publish) against ``dd conv=fsync`` writing files of the same byte counts in
the same folder, one after the other.
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path

from . import baselines
from .benches import rank_config, throughput_samples
from .common import HIGHER, Params, remove, result, run_pairs


def rank_tensors(cfg, files) -> dict:
    """Rank 0's tensors, filled with unique incompressible content as a rank fills them."""
    import torch

    from emulator.workload.content import Content
    tensors = {s.name: torch.empty(s.shape, dtype=s.dtype) for f in files for s in f.specs}
    Content(list(tensors.values()), seed=0, rank=0).fill()
    return tensors


def bench_mlperf_write(params: Params, wd: Path) -> dict:
    import os

    import torch
    import torch.utils.serialization as ser

    from emulator.mlperf.protocol import checkpoint_dir, rank_files, save_files
    from tiers.directory import DirTier
    cfg = rank_config(params).with_overrides("checkpoint.protocol=mlperf")
    torch.set_num_threads(params.threads)
    ser.config.save.compute_crc32 = True  # as emulator.rank sets it in mlperf mode
    files = rank_files(cfg, 0)
    tensors = rank_tensors(cfg, files)
    tier = DirTier(wd / "storage")
    save_files(tier, 0, files, tensors)  # untimed: the sizes dd must match
    sizes = [(wd / "storage" / checkpoint_dir(0) / f.name).stat().st_size for f in files]
    shutil.rmtree(wd / "storage" / checkpoint_dir(0))
    source = baselines.random_file(wd / "random.bin", max(sizes))

    def ours(i):
        t = time.perf_counter()
        save_files(tier, i + 1, files, tensors)
        dt = time.perf_counter() - t
        shutil.rmtree(wd / "storage" / checkpoint_dir(i + 1))
        return dt

    def base(i):
        paths = [wd / "storage" / f"dd{j}.bin" for j in range(len(sizes))]
        dt = sum(baselines.dd_write(p, n, source) for p, n in zip(paths, sizes))
        for p in paths:
            remove(p)
        return dt

    pairs = run_pairs(params, ours, base, before=lambda _: os.sync())
    nbytes = sum(sizes)
    return {"mlperf_write": result(
        **throughput_samples(pairs, nbytes), unit="GiB/s", target=0.9, better=HIGHER,
        ratio_is="throughput ours/baseline (= dd time / our time, same bytes)",
        ours_is="emulator.mlperf.protocol.save_files: DLIO's files of rank 0, torch.save (zip CRC32 on), "
                "DirTier sink: fsync, rename, fsync dir, per file",
        baseline_is=f"dd if=RANDOM of=F bs=64M count=N iflag=count_bytes conv=fsync, per file ({len(sizes)} files)",
        bytes=nbytes, files=len(sizes))}
