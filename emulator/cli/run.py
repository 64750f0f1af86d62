"""``ckpt-emu run``: one emulated run (every mode, then loads), or a soak with ``--duration``."""
from __future__ import annotations

import json

from emulator.checkpoint.injection import kill_override
from emulator.checkpoint.node_loss import lose_nodes_override
from emulator.cli.common import add_config_args, load
from emulator.errors import RunFailed
from emulator.job import outdir
from emulator.units import parse_duration


def add_run_parser(sub) -> None:
    run = sub.add_parser("run", help="run the emulator (sync and async checkpointing, then loads)")
    add_config_args(run)
    run.add_argument("--out", help="results folder (run.out)")
    run.add_argument("--duration", help="soak mode: train for this long (90s, 30m, 2h), split over the modes")
    run.add_argument("--quiet", action="store_true", help="no live progress display (the summary is still printed)")
    run.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port (node N: port+N)")
    run.add_argument("--metrics-addr", help="address to bind the metrics endpoint (default 127.0.0.1)")
    run.add_argument("--phase", choices=("write", "read", "both"),
                     help="checkpoint.protocol mlperf: run only the writes or only the reads (checkpoint.phase)")
    run.add_argument("--lose-local-after", type=int, metavar="N",
                     help="emulate losing the node-local tier after checkpoint N")
    run.add_argument("--lose-nodes", dest="set", action="append", type=lose_nodes_override, metavar="N:NODE[,NODE...]",
                     help="emulate losing these nodes (their memory and local tiers, and the peer copies they "
                          "hold) after checkpoint N; the run then recovers from what survived")
    run.add_argument("--kill", dest="set", action="append", type=kill_override, metavar="RANK:CKPT:PHASE",
                     help="SIGKILL rank RANK during PHASE (staging, local_write, drain, manifest) of "
                          "checkpoint CKPT (failures.kill; one kill, use the config for several)")
    run.add_argument("--nnodes", type=int, default=1, help="nodes in the job (run this command on each)")
    run.add_argument("--nproc-per-node", type=int, help="ranks on this node (default: ranks / nnodes)")
    run.add_argument("--rdzv-endpoint", help="HOST:PORT of the c10d rendezvous (multi-node)")
    run.add_argument("--rdzv-id", default="ckpt-emu", help="rendezvous id shared by the nodes of one job")
    run.add_argument("--node-rank", type=int, help="this node's fixed rank (torchrun's static rendezvous, at node "
                     "0's --rdzv-endpoint): a replacement started with a lost node's rank takes its place")
    run.set_defaults(func=cmd_run)


def cmd_run(args) -> int:
    from emulator.launch.runner import execute_run  # the run's stack (torchrun, tiers) only when running
    cfg = load(args)
    duration = parse_duration(args.duration, "--duration") if args.duration else None
    out = execute_run(cfg, duration=duration, nnodes=args.nnodes, nproc_per_node=args.nproc_per_node,
                      rdzv_endpoint=args.rdzv_endpoint, rdzv_id=args.rdzv_id, quiet=args.quiet,
                      node_rank=args.node_rank)
    report = out / outdir.REPORT
    if report.exists():
        print(report.read_text(), end="")
        print(f"results: {out / outdir.RESULTS}")
        _fail_if_the_load_failed(out)
    else:
        print(f"this node finished; the report is written where rank 0 runs ({out})")
    return 0


def _fail_if_the_load_failed(out) -> None:
    """A run whose loads could not restore a checkpoint failed (RunFailed, exit status 1), whatever
    its saves did: loading back is half of what a run checks."""
    try:
        load = json.loads((out / outdir.RESULTS).read_text()).get("load") or {}
    except (OSError, ValueError):
        return
    if load.get("loads") and not load.get("ok", True):
        why = (load.get("errors") or ["no complete checkpoint could be restored"])[0]
        raise RunFailed(f"the run failed: a load did not restore a checkpoint ({why}); report: {out / outdir.REPORT}")
