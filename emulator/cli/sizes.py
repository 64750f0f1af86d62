"""``ckpt-emu sizes``: a config's checkpoint: bytes per parameter and where they come from, per rank
and per node (emulator/sizing.py)."""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace

from emulator.checkpoint.layout import key_layout
from emulator.cli.common import add_config_args, load
from emulator.sizing import (architecture, bytes_per_parameter, checkpoint_size, describe_bytes_per_parameter,
                             has_replicas, node_bytes, replicated, shard_group, writers_layout)
from emulator.design import requests, wear
from emulator.design.job import job_of
from emulator.units import fmt_bytes, fmt_duration

#: ranks per node where the config has no design (MLPerf Storage's subset mode: 8, one node)
RANKS_PER_NODE = 8


def add_sizes_parser(sub) -> None:
    p = sub.add_parser("sizes", help="checkpoint sizes of a config: bytes per parameter, per rank, per node",
                       examples=("ckpt-emu sizes llama3-405b", "ckpt-emu sizes design.yaml --json"))
    add_config_args(p)
    p.add_argument("--nvme-endurance", metavar="RATING", help="the NVMe's rated endurance: drive writes a day "
                   "over 5 years (1DWPD, 3DWPD) or the bytes it may write (7PB); default 1DWPD")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(func=cmd_sizes)


def _capacity(cfg, endurance) -> tuple[dict | None, str]:
    """(what each tier holds and is written a day at the config's intervals, as ``plan`` counts them, and
    the family the answer speaks; None where the design cannot be modelled, with why)."""
    from emulator import planner
    from emulator.design import resolve
    from emulator.design.capacity import fitted
    from emulator.errors import UserError
    try:
        design = fitted(resolve(cfg), cfg.checkpoint.on_local_full)
    except UserError as exc:
        return {"why_not": str(exc)}, wear.DECIMAL
    mode, cell, rows = planner.design_holdings(design, endurance)
    family = wear.answer_family(design)
    flags = wear.over_capacity_notes(rows, family) + tuple(n for n in design.notes if "OVER CAPACITY" in n)
    return {"mode": mode, "base_interval_s": cell.base_interval_s, "every": cell.every,
            "tiers": {h.name: h.to_dict() for h in rows}, "flags": list(flags),
            "notes": list(wear.endurance_notes(rows, endurance)), "holdings": rows}, family


def cmd_sizes(args) -> int:
    cfg = load(args)
    endurance = wear.parse_endurance(getattr(args, "nvme_endurance", None))
    model, par = cfg.model, cfg.parallelism
    size = checkpoint_size(model, par)
    scale = cfg.run.scale
    job = job_of(cfg)
    layout = _global_layout(cfg, size, job)
    parts = bytes_per_parameter(model, par)
    per_node = RANKS_PER_NODE if cfg.design is None else cfg.design.accelerators_per_node
    nodes = node_bytes(model, par, per_node)
    held, family = _capacity(cfg, endurance)
    obj = {
        "preset": model.name,
        "architecture": architecture(model),
        "params": size.params,
        "bytes_per_param": [{"bytes": p.bytes, "what": p.what, "dtype": p.dtype} for p in parts],
        "bytes_per_param_total": sum(p.bytes for p in parts),
        "checkpoint_bytes_per_param": size.total_bytes / size.params,
        "shard_group": shard_group(par),
        "writers": par.writers,
        "writers_layout": dict(zip(("layout", "why"), writers_layout(par))),
        "held_bytes": size.held_bytes,
        "ranks_per_node": per_node,
        "per_node_bytes": nodes,
        "world_size": size.world_size,
        "model_bytes": size.model_bytes,
        "optimizer_bytes": size.optimizer_bytes,
        "total_bytes": size.total_bytes,
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
                "emulated_node_bytes": [g.node_bytes for g in job.emulated],
                "mean_node_bytes": job.checkpoint_bytes / job.nodes, "heaviest_node_bytes": job.heaviest.node_bytes},
        "family": family,
        "capacity": {k: v for k, v in held.items() if k != "holdings"},
    }
    if args.json:
        print(json.dumps(obj, indent=1))
        return 0
    _print_text(cfg, size, parts, job, layout, held, family)
    return 0


def _print_text(cfg, size, parts, job, layout, held: dict, family: str) -> None:
    model, par, scale = cfg.model, cfg.parallelism, cfg.run.scale

    def b(x: float) -> str:
        return fmt_bytes(x, family)
    print(f"{model.name}: {size.params / 1e9:.2f} B parameters, {size.world_size} ranks "
          f"(TP{par.tp} PP{par.pp} DP{par.dp}, ZeRO-{par.zero_stage})")
    print(f"  bytes per parameter: {describe_bytes_per_parameter(parts)}")
    print(f"  model state     {b(size.model_bytes):>12}")
    print(f"  optimizer state {b(size.optimizer_bytes):>12}")
    print(f"  checkpoint      {b(size.total_bytes):>12}  ({size.total_bytes / size.params:.2f} bytes per parameter)")
    print(f"  {_writers_line(par)}")
    if size.held_bytes != size.total_bytes:
        once = "; checkpoint.restore_readers: one_per_dp_group reads it once" if replicated(par) else ""
        print(f"  restore: every rank reads the state it holds, {b(size.held_bytes)} "
              f"({size.held_bytes / size.total_bytes:.2f} x the checkpoint{once})")
    print(_job_lines(job, b))
    what = "subset mode, " if cfg.parallelism.subset else ""
    print(f"  this run: {what}{len(size.ranks)} ranks write {b(size.run_bytes)}"
          + (f", {b(size.run_bytes * scale)} at scale {scale:g}" if scale < 1 else ""))
    for r in size.ranks[:16]:
        print(f"    rank {r.rank:5d} (tp {r.tp}, pp {r.pp}, dp {r.dp}): {b(r.total_bytes):>10}")
    if len(size.ranks) > 16:
        print(f"    ... {len(size.ranks) - 16} more")
    if layout is not None:
        print(_layout_line(layout, cfg.tiers.global_.options.part_size_mib))
    _capacity_lines(held, family)


def _capacity_lines(held: dict, family: str) -> None:
    if "why_not" in held:
        print(f"  capacity and wear: not modelled: {held['why_not']}")
        return
    every = ", ".join(f"{n} every {e}" for n, e in held["every"].items())
    where = f"at the config's intervals ({held['mode']}, every {fmt_duration(held['base_interval_s'])}; {every})"
    print(wear.capacity_heading(where).replace("Capacity", "  capacity", 1))
    print(wear.capacity_table(held["holdings"], family, indent="    "))
    for line in held["flags"] + held["notes"]:
        print(f"    - {line}")


def _writers_line(par) -> str:
    """Who holds and who writes the state: ZeRO's sharding, HSDP's groups, one replica or each."""
    g = shard_group(par)
    what = {1: "optimizer state", 2: "optimizer state", 3: "weights and optimizer state"}
    over = f"groups of {g} (HSDP, {par.dp // g} replicas)" if g < par.dp else f"all {par.dp}"
    text = ("DP ranks: each holds a whole replica" if par.zero_stage == 0
            else f"DP ranks: {what[par.zero_stage]} sharded over {over}")
    if par.distributed_optimizer:
        text += " (Megatron's distributed optimizer)"
    return text if not has_replicas(par) else f"{text}; {writers_layout(par)[1]}"


def _per_node(job, b) -> str:
    """Per node: the mean, with the heaviest beside it where the nodes differ."""
    mean = job.checkpoint_bytes / job.nodes
    if len(job.groups) == 1:
        return f"{b(mean)} per node"
    return f"{b(mean)} per node on average, the heaviest {b(job.heaviest.node_bytes)}"


def _job_lines(job, b) -> str:
    """The job's nodes and what each writes (nodes of equal bytes in one line, the heaviest first)."""
    lines = [f"  the job: {job.nodes:,} node(s) x {job.accelerators_per_node} accelerators "
             f"({job.accelerators:,} ranks), {_per_node(job, b)}"]
    counts: dict = {}
    for g in job.groups:
        counts[(g.node_bytes, g.files)] = counts.get((g.node_bytes, g.files), 0) + g.nodes
    kinds = sorted(counts.items(), key=lambda kv: -kv[0][0])
    for (written, files), nodes in kinds[:6]:
        lines.append(f"    {nodes:6,} node(s) of {files} ranks hold {b(written):>10} each")
    if len(kinds) > 6:
        lines.append(f"    ... {len(kinds) - 6} more kinds of node")
    return "\n".join(lines)


def _global_layout(cfg, size, job):
    """A checkpoint's keys on an S3 global tier, at full size: its prefixes and their request ceiling,
    against the whole job's requests (emulator/design/requests.py), not the run's ranks'."""
    store = requests.store_of(cfg)
    if store is None:
        return None
    limits = cfg.tiers.global_.emulate
    files = [(r.rank, r.dp, r.tp, r.total_bytes) for r in size.ranks]
    layout = key_layout(files, part_size=store.part_bytes, tier_prefix=cfg.tiers.global_.options.prefix or "",
                        put_per_s=store.put_per_s, get_per_s=store.get_per_s,
                        prefix_depth=limits.prefix_depth if limits is not None else None)
    uploads = sum((requests.file_requests(g.nodes * g.files, g.file_bytes, store.part_bytes, "none",
                                          store.single_get_threshold) for g in job.groups if g.node_bytes > 0),
                  Counter(PUT=1))  # the manifest
    return replace(layout, files=sum(g.nodes * g.files for g in job.groups if g.node_bytes > 0),
                   put_requests=requests.limit_classes(uploads)["put"])


def _layout_line(k, part_mib: int) -> str:
    where = k.prefixes[0] if len(k.prefixes) == 1 else f"{len(k.prefixes)} prefixes"
    rate = lambda v: "no limit" if v is None else f"{v:,.0f}/s"  # noqa: E731
    text = (f"  global tier keys: {k.files} files + 1 manifest under {where}: {k.put_requests:,} PUT-class "
            f"requests per checkpoint ({part_mib} MiB parts); ceiling {rate(k.put_ceiling)} PUT, "
            f"{rate(k.get_ceiling)} GET")
    if k.put_ceiling is not None:
        text += f": at least {k.min_put_s:.2f} s of requests per checkpoint"
    return text
