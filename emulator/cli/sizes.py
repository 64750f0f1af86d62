"""``ckpt-emu sizes``: a preset's checkpoint sizes by the MLPerf Storage formulas."""
from __future__ import annotations

import json

from emulator.checkpoint.layout import key_layout
from emulator.cli.common import add_config_args, load
from emulator.sizing import checkpoint_size
from emulator.units import GIB


def add_sizes_parser(sub) -> None:
    p = sub.add_parser("sizes", help="checkpoint sizes of a preset (MLPerf Storage formulas)",
                       examples=("ckpt-emu sizes llama3-405b", "ckpt-emu sizes design.yaml --json"))
    add_config_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(func=cmd_sizes)


def cmd_sizes(args) -> int:
    cfg = load(args)
    size = checkpoint_size(cfg.model, cfg.parallelism)
    scale = cfg.run.scale
    layout = _global_layout(cfg, size)
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
        "key_layout": None if layout is None else layout.to_dict(),
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
    if layout is not None:
        print(_layout_line(layout, cfg.tiers.global_.options.part_size_mib))
    return 0


def _global_layout(cfg, size):
    """A checkpoint's keys on an S3 global tier, at full size: its prefixes and their request ceiling."""
    tier = cfg.tiers.global_
    if tier.backend != "s3":
        return None
    limits = tier.emulate
    kw = {} if limits is None else {"put_per_s": limits.put_per_s_per_prefix,
                                    "get_per_s": limits.get_per_s_per_prefix, "prefix_depth": limits.prefix_depth}
    files = [(r.rank, r.dp, r.tp, r.total_bytes) for r in size.ranks]
    return key_layout(files, part_size=tier.options.part_size_mib << 20, tier_prefix=tier.options.prefix or "", **kw)


def _layout_line(k, part_mib: int) -> str:
    where = k.prefixes[0] if len(k.prefixes) == 1 else f"{len(k.prefixes)} prefixes"
    rate = lambda v: "no limit" if v is None else f"{v:,.0f}/s"  # noqa: E731
    text = (f"  global tier keys: {k.files} files + 1 manifest under {where}: {k.put_requests:,} PUT-class "
            f"requests per checkpoint ({part_mib} MiB parts); ceiling {rate(k.put_ceiling)} PUT, "
            f"{rate(k.get_ceiling)} GET")
    if k.put_ceiling is not None:
        text += f": at least {k.min_put_s:.2f} s of requests per checkpoint"
    return text
