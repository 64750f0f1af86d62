"""What each rank of a torchrun world runs in the DCP storage system test: the state it holds of a
config's layout (replicated tensors under their replica keys, bytes seeded by the key, so every
replica holds the same), saved with ``dcp.save`` through a directory tier; rank 0 writes every
rank's file entries as JSON. ``python dcp_ranks.py TIER_DIR FOLDER OUT_JSON CONFIG [--set K=V ...]``."""
from __future__ import annotations

import json
import sys
import zlib

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from emulator import sizing
from emulator.checkpoint.dcp_storage import TierStorageWriter
from emulator.config import load_config
from emulator.workload.state import TORCH_DTYPES
from tiers.directory import DirTier


def held_state(cfg, rank: int) -> dict:
    """Every tensor ``rank`` holds, keyed by replica, its bytes a function of the key alone."""
    par = cfg.parallelism
    c = sizing.rank_coords(rank, par.tp, par.pp, par.dp)
    out = {}
    for part, held in sizing.HELD.items():
        for t in held(cfg.model, par, c.pp):
            key = sizing.replica_key(par, c, part, t.name)
            g = torch.Generator().manual_seed(zlib.crc32(key.encode()))
            out[key] = torch.randn(t.shape, generator=g).to(TORCH_DTYPES[t.dtype])
    return out


def main(argv: list[str]) -> None:
    tier_dir, folder, out, preset, *rest = argv
    sets = [s for flag, s in zip(rest[::2], rest[1::2]) if flag == "--set"]
    cfg = load_config(preset, sets)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    writer = TierStorageWriter(DirTier(tier_dir), folder)
    dcp.save(held_state(cfg, rank), storage_writer=writer)
    files = [None] * dist.get_world_size()
    dist.all_gather_object(files, [vars(f) for f in writer.files])
    if rank == 0:
        with open(out, "w") as fh:
            json.dump([f for per_rank in files for f in per_rank], fh)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
