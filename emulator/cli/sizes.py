"""``ckpt-emu sizes``: a preset's checkpoint sizes by the MLPerf Storage formulas."""
from __future__ import annotations

import json

from emulator.cli.common import add_config_args, load
from emulator.sizing import checkpoint_size
from emulator.units import GIB


def add_sizes_parser(sub) -> None:
    p = sub.add_parser("sizes", help="checkpoint sizes of a preset (MLPerf Storage formulas)")
    add_config_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(func=cmd_sizes)


def cmd_sizes(args) -> int:
    cfg = load(args)
    size = checkpoint_size(cfg.model, cfg.parallelism)
    scale = cfg.run.scale
    obj = {
        "preset": cfg.model.name,
        "params": size.params,
        "world_size": size.world_size,
        "model_bytes": size.model_bytes,
        "optimizer_bytes": size.optimizer_bytes,
        "total_bytes": size.total_bytes,
        "total_gib": size.total_bytes / GIB,
        "ranks": len(size.ranks),
        "subset": cfg.parallelism.subset,
        "per_rank_bytes": [r.total_bytes for r in size.ranks],
        "per_rank": [{"rank": r.rank, "tp": r.tp, "pp": r.pp, "dp": r.dp, "model_bytes": r.model_bytes,
                      "optimizer_bytes": r.optimizer_bytes} for r in size.ranks],
        "run_bytes": size.run_bytes,
        "scale": scale,
        "run_bytes_scaled": int(size.run_bytes * scale),
    }
    if args.json:
        print(json.dumps(obj, indent=1))
        return 0
    print(f"{cfg.model.name}: {size.params / 1e9:.2f} B parameters, {size.world_size} ranks "
          f"(TP{cfg.parallelism.tp} PP{cfg.parallelism.pp} DP{cfg.parallelism.dp}, ZeRO-{cfg.parallelism.zero_stage})")
    print(f"  model state     {size.model_bytes / GIB:12.1f} GiB")
    print(f"  optimizer state {size.optimizer_bytes / GIB:12.1f} GiB")
    print(f"  checkpoint      {size.total_bytes / GIB:12.1f} GiB")
    what = "subset mode, " if cfg.parallelism.subset else ""
    print(f"  this run: {what}{len(size.ranks)} ranks write {size.run_bytes / GIB:.2f} GiB"
          + (f", {size.run_bytes * scale / GIB:.3f} GiB at scale {scale:g}" if scale < 1 else ""))
    for r in size.ranks[:16]:
        print(f"    rank {r.rank:5d} (tp {r.tp}, pp {r.pp}, dp {r.dp}): {r.total_bytes / GIB:8.2f} GiB")
    if len(size.ranks) > 16:
        print(f"    ... {len(size.ranks) - 16} more")
    return 0
