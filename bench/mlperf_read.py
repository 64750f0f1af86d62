"""The MLPerf-mode read against DLIO's own load call, on the same files.

One rank's checkpoint as ``checkpoint.protocol: mlperf`` writes it; ours is
``emulator.mlperf.protocol.load_files`` on a directory tier (what a rank's
timed load runs), the baseline is DLIO's ``PyTorchCheckpointing.load_state``
body for each file: ``torch.load(path)`` and its ``len(state.keys()) > 0``
check. A ratio near 1 says our load figures are DLIO's on the same bytes; an
earlier read path (a Python file object) ran about 1.3x faster than DLIO.
"""
from __future__ import annotations

import time
from pathlib import Path

from .benches import rank_config, throughput_samples
from .common import HIGHER, Params, drop_page_cache, probe_drop_cache, result, run_pairs
from .mlperf_write import rank_tensors


def bench_mlperf_read(params: Params, wd: Path) -> dict:
    import torch

    from emulator.mlperf.protocol import checkpoint_dir, load_files, rank_files, save_files
    from tiers.directory import DirTier
    cfg = rank_config(params).with_overrides("checkpoint.protocol=mlperf")
    torch.set_num_threads(params.threads)
    files = rank_files(cfg, 0)
    tier = DirTier(wd / "storage")
    nbytes = save_files(tier, 0, files, rank_tensors(cfg, files))
    paths = [wd / "storage" / checkpoint_dir(0) / f.name for f in files]
    dropping, how = probe_drop_cache(wd) if params.drop_cache else (False, "not asked (--no-drop-cache)")

    def before(_):
        if dropping:
            drop_page_cache()

    def ours(i):
        t = time.perf_counter()
        load_files(tier, 0, files)
        return time.perf_counter() - t

    def dlio(i):  # DLIO's load_state, per file
        t = time.perf_counter()
        for p in paths:
            state = torch.load(str(p))
            assert len(state.keys()) > 0
        return time.perf_counter() - t

    pairs = run_pairs(params, ours, dlio, before=before)
    cache = "cold (page cache dropped before each read)" if dropping else f"warm vs warm ({how})"
    return {"mlperf_read": result(
        **throughput_samples(pairs, nbytes), unit="GiB/s", target=0.9, better=HIGHER,
        ratio_is="throughput ours/DLIO's call (= DLIO time / our time, same files)",
        ours_is="emulator.mlperf.protocol.load_files on a DirTier: torch.load(path, weights_only=True) + "
                "the tensor check, per file",
        baseline_is="DLIO's PyTorchCheckpointing.load_state: torch.load(path); assert len(state.keys()) > 0",
        bytes=nbytes, files=len(paths), cache=cache)}
