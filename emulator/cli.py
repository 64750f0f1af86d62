"""``ckpt-emu``: run the emulator, print sizes, plan intervals, compare runs.

Every failure the user can cause ends as one line ``ckpt-emu: error: ...``
and exit status 2; nothing is written before the config and the tiers have
been checked.
"""
from __future__ import annotations

import argparse
import json
import re
import sys

from . import outdir
from .errors import UserError

GIB = 1 << 30


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own errors: one line, exit 2
        raise UserError(message)


def parse_duration(text: str) -> float:
    """'90s', '30m', '2h', '1h30m', '45' (seconds) -> seconds."""
    t = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", t):
        value = float(t)
    else:
        parts = re.findall(r"(\d+(?:\.\d+)?)([smhd])", t)
        if not parts or "".join(a + b for a, b in parts) != t:
            raise UserError(f"--duration {text!r}: use e.g. 90s, 30m, 2h or 1h30m")
        value = sum(float(a) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[u] for a, u in parts)
    if value <= 0:
        raise UserError(f"--duration {text!r}: must be > 0")
    return value


def _load(args):
    from .config import load_config
    overrides = list(args.set or [])
    if getattr(args, "scale", None) is not None:
        overrides.append(f"run.scale={args.scale}")
    if getattr(args, "out", None):
        overrides.append(f"run.out={args.out}")
    if getattr(args, "metrics_port", None) is not None:
        overrides.append(f"metrics.port={args.metrics_port}")
    if getattr(args, "metrics_addr", None):
        overrides.append(f"metrics.addr={args.metrics_addr}")
    if getattr(args, "phase", None):
        overrides.append(f"checkpoint.phase={args.phase}")
    if getattr(args, "lose_local_after", None) is not None:
        overrides.append(f"failures.lose_local_after={args.lose_local_after}")
    return load_config(args.config, overrides)


# --------------------------------------------------------------------------- sizes

def cmd_sizes(args) -> int:
    from .sizing import checkpoint_size
    cfg = _load(args)
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


# --------------------------------------------------------------------------- run

def cmd_run(args) -> int:
    from .runner import execute_run
    cfg = _load(args)
    duration = parse_duration(args.duration) if args.duration else None
    out = execute_run(cfg, duration=duration, nnodes=args.nnodes, nproc_per_node=args.nproc_per_node,
                      rdzv_endpoint=args.rdzv_endpoint, rdzv_id=args.rdzv_id, quiet=args.quiet)
    report = out / outdir.REPORT
    if report.exists():
        print(report.read_text(), end="")
        print(f"results: {out / outdir.RESULTS}")
    else:
        print(f"this node finished; the report is written where rank 0 runs ({out})")
    return 0


def cmd_tune(args) -> int:
    from .tune import tune, format_tune
    cfg = _load(args)
    result = tune(cfg, accelerators=args.accelerators, mttf_hours=args.mttf_hours,
                  confirm_seconds=args.confirm_seconds, measure_checkpoints=args.measure_checkpoints)
    print(json.dumps(result, indent=1) if args.json else format_tune(result), end="" if not args.json else "\n")
    return 0


def cmd_compare(args) -> int:
    from .compare import compare
    runs, text = compare(args.paths)
    if args.json:
        print(json.dumps([{"label": r.label, "kind": r.kind, **r.rows} for r in runs], indent=1))
    else:
        print(text, end="")
    return 0


# --------------------------------------------------------------------------- parser

def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="ckpt-emu", description="Tiered checkpoint emulator for LLM training storage.")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def common(p):
        p.add_argument("config", nargs="?", default=None,
                       help="preset name (e.g. llama3-8b-subset) or YAML file; default: the embedded default")
        p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override any config key")
        p.add_argument("--scale", type=float, help="shrink every tensor by this factor (0 < F <= 1)")

    run = sub.add_parser("run", help="run the emulator (sync and async checkpointing, then loads)")
    common(run)
    run.add_argument("--out", help="results folder (run.out)")
    run.add_argument("--duration", help="soak mode: train for this long (90s, 30m, 2h), split over the modes")
    run.add_argument("--quiet", action="store_true", help="no live progress display (the summary is still printed)")
    run.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port (node N: port+N)")
    run.add_argument("--metrics-addr", help="address to bind the metrics endpoint (default 127.0.0.1)")
    run.add_argument("--phase", choices=("write", "read", "both"),
                     help="checkpoint.protocol mlperf: run only the writes or only the reads (checkpoint.phase)")
    run.add_argument("--lose-local-after", type=int, metavar="N",
                     help="emulate losing the node-local tier after checkpoint N")
    from .faults import kill_override
    run.add_argument("--kill", dest="set", action="append", type=kill_override, metavar="RANK:CKPT:PHASE",
                     help="SIGKILL rank RANK during PHASE (staging, local_write, drain, manifest) of "
                          "checkpoint CKPT (failures.kill; one kill, use the config for several)")
    run.add_argument("--nnodes", type=int, default=1, help="nodes in the job (run this command on each)")
    run.add_argument("--nproc-per-node", type=int, help="ranks on this node (default: ranks / nnodes)")
    run.add_argument("--rdzv-endpoint", help="HOST:PORT of the c10d rendezvous (multi-node)")
    run.add_argument("--rdzv-id", default="ckpt-emu", help="rendezvous id shared by the nodes of one job")
    run.set_defaults(func=cmd_run)

    sizes = sub.add_parser("sizes", help="checkpoint sizes of a preset (MLPerf Storage formulas)")
    common(sizes)
    sizes.add_argument("--json", action="store_true", help="one JSON object")
    sizes.set_defaults(func=cmd_sizes)

    comp = sub.add_parser("compare", help="runs side by side: ours (results.json) and DLIO's (summary.json)")
    comp.add_argument("paths", nargs="+", metavar="PATH",
                      help="a results folder (ours or DLIO's), its results.json/summary.json, or a folder of DLIO runs")
    comp.add_argument("--json", action="store_true", help="the runs' rows as JSON")
    comp.set_defaults(func=cmd_compare)

    from .plan_cli import add_plan_parser
    add_plan_parser(sub)

    tune = sub.add_parser("tune", help="measure costs by emulation, plan the interval, confirm it by emulation")
    common(tune)
    tune.add_argument("--accelerators", type=int, required=True, help="accelerators in the target cluster")
    tune.add_argument("--mttf-hours", type=float, default=50_000.0, help="per-accelerator MTTF (default 50000)")
    tune.add_argument("--out", help="results folder (measurement and confirmation runs go below it)")
    tune.add_argument("--confirm-seconds", type=float, default=20.0,
                      help="longest training time of the confirmation run; longer intervals are time-compressed")
    tune.add_argument("--measure-checkpoints", type=int, default=3, help="checkpoints per mode when measuring")
    tune.add_argument("--json", action="store_true", help="one JSON object")
    tune.set_defaults(func=cmd_tune)
    return ap


def main(argv=None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except UserError as exc:
        print(f"ckpt-emu: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("ckpt-emu: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `ckpt-emu sizes ... | head`: the reader left, nothing to report
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
