"""``ckpt-emu sizes``: a config's checkpoint: bytes per parameter and where they come from, per rank
and per node (emulator/sizing.py)."""
from __future__ import annotations

import json

from emulator.checkpoint.layout import key_layout
from emulator.cli.common import add_config_args, load
from emulator.sizing import (architecture, bytes_per_parameter, checkpoint_size, describe_bytes_per_parameter,
                             node_bytes, replicated, shard_group)
from emulator.design.job import job_of
from emulator.units import GIB

#: ranks per node where the config has no design (MLPerf Storage's subset mode: 8, one node)
RANKS_PER_NODE = 8


def add_sizes_parser(sub) -> None:
    p = sub.add_parser("sizes", help="checkpoint sizes of a config: bytes per parameter, per rank, per node",
                       examples=("ckpt-emu sizes llama3-405b", "ckpt-emu sizes design.yaml --json"))
    add_config_args(p)
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(func=cmd_sizes)


def cmd_sizes(args) -> int:
    cfg = load(args)
    model, par = cfg.model, cfg.parallelism
    size = checkpoint_size(model, par)
    scale = cfg.run.scale
    layout = _global_layout(cfg, size)
    parts = bytes_per_parameter(model, par)
    per_node = RANKS_PER_NODE if cfg.design is None else cfg.design.accelerators_per_node
    nodes = node_bytes(model, par, per_node)
    job = job_of(cfg)
    obj = {
        "preset": model.name,
        "architecture": architecture(model),
        "params": size.params,
        "bytes_per_param": [{"bytes": p.bytes, "what": p.what, "dtype": p.dtype} for p in parts],
        "bytes_per_param_total": sum(p.bytes for p in parts),
        "checkpoint_bytes_per_param": size.total_bytes / size.params,
        "shard_group": shard_group(par),
        "writers": par.writers,
        "held_bytes": size.held_bytes,
        "ranks_per_node": per_node,
        "per_node_bytes": nodes,
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
        "job": {"nodes": job.nodes, "accelerators_per_node": job.accelerators_per_node,
                "node_groups": [{"nodes": g.nodes, "node_bytes": g.node_bytes, "ranks": g.files}
                                for g in job.groups],
                "emulated_node_bytes": [g.node_bytes for g in job.emulated]},
    }
    if args.json:
        print(json.dumps(obj, indent=1))
        return 0
    print(f"{model.name}: {size.params / 1e9:.2f} B parameters, {size.world_size} ranks "
          f"(TP{par.tp} PP{par.pp} DP{par.dp}, ZeRO-{par.zero_stage})")
    print(f"  bytes per parameter: {describe_bytes_per_parameter(parts)}")
    print(f"  model state     {size.model_bytes / GIB:12.1f} GiB")
    print(f"  optimizer state {size.optimizer_bytes / GIB:12.1f} GiB")
    print(f"  checkpoint      {size.total_bytes / GIB:12.1f} GiB  ({size.total_bytes / 1e9:,.1f} GB, "
          f"{size.total_bytes / size.params:.2f} bytes per parameter)")
    print(f"  {_writers_line(par)}")
    if size.held_bytes != size.total_bytes:
        once = "; checkpoint.restore_readers: one_per_dp_group reads it once" if replicated(par) else ""
        print(f"  restore: every rank reads the state it holds, {size.held_bytes / GIB:.1f} GiB "
              f"({size.held_bytes / size.total_bytes:.2f} x the checkpoint{once})")
    print(_job_lines(job))
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


def _writers_line(par) -> str:
    """Who holds and who writes the state: ZeRO's sharding, HSDP's groups, one replica or each."""
    g = shard_group(par)
    what = {1: "optimizer state", 2: "optimizer state", 3: "weights and optimizer state"}
    over = f"groups of {g} (HSDP, {par.dp // g} replicas)" if g < par.dp else f"all {par.dp}"
    text = ("DP ranks: each holds a whole replica" if par.zero_stage == 0
            else f"DP ranks: {what[par.zero_stage]} sharded over {over}")
    if par.distributed_optimizer:
        text += " (Megatron's distributed optimizer)"
    if par.dp == 1 or (par.zero_stage == 3 and g == par.dp):
        return text  # no DP rank holds a copy of another's state
    if par.writers == "every_replica":
        return text + "; every replica writes its copy"
    return text + "; the first replica writes, the others' copies deduplicated"


def _job_lines(job) -> str:
    """The job's nodes and what each writes (nodes of equal bytes in one line, the heaviest first)."""
    lines = [f"  the job: {job.nodes:,} node(s) x {job.accelerators_per_node} accelerators "
             f"({job.accelerators:,} ranks)"]
    counts: dict = {}
    for g in job.groups:
        counts[(g.node_bytes, g.files)] = counts.get((g.node_bytes, g.files), 0) + g.nodes
    kinds = sorted(counts.items(), key=lambda kv: -kv[0][0])
    for (written, files), nodes in kinds[:6]:
        lines.append(f"    {nodes:6,} node(s) of {files} ranks hold {written / GIB:10.2f} GiB each")
    if len(kinds) > 6:
        lines.append(f"    ... {len(kinds) - 6} more kinds of node")
    return "\n".join(lines)


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
