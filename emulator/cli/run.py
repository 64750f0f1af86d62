"""``ckpt-emu run``: one emulated run (every mode, then loads), or a soak with ``--duration``."""
from __future__ import annotations

import json

from emulator.checkpoint.injection import kill_override
from emulator.checkpoint.node_loss import lose_nodes_override
from emulator.cli.common import add_config_args, add_fail_on_miss, load, report_misses
from emulator.errors import UserError
from emulator.job import outdir
from emulator.results.verdict import load_failed, misses
from emulator.units import parse_duration


def add_run_parser(sub) -> None:
    run = sub.add_parser("run", help="run the emulator (sync and async checkpointing, then loads)", examples=(
        "ckpt-emu run  # the embedded default, about a minute",
        "ckpt-emu run llama3-70b-subset --scale 0.01 --out runs/70b",
        "ckpt-emu run design.yaml --soak 2h --lose-local-after 60 --metrics-port 9400 --quiet"))
    add_config_args(run)
    run.add_argument("--out", help="results folder (run.out); one that holds a finished run's results is refused")
    run.add_argument("--force", action="store_true", help="replace the results a finished run left in --out")
    run.add_argument("--duration", help="train for this long (90s, 30m, 2h) of wall time here, split over the "
                     "modes (the baseline, sync, async)")
    run.add_argument("--soak", metavar="DURATION",
                     help="a soak (a proof of concept's hours): async checkpoints only, for this long of wall "
                          "time here; the failures given (--lose-local-after N, --lose-nodes N:NODES, "
                          "failures.global_fault) come again every N checkpoints, and the run recovers from each")
    add_fail_on_miss(run)
    run.add_argument("--keep-tiers", action="store_const", const="true",
                     help="keep the checkpoints of tiers in host memory (tmpfs: the default's) after the run "
                          "(run.keep_tiers); without it they are deleted when the run ends")
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
    run.add_argument("--node-addr", metavar="ADDR",
                     help="this node's IPv4 address on the job's network (multi-node): the rendezvous (on the "
                          "endpoint's node), the job's store, gloo and the metrics (unless --metrics-addr) "
                          "listen on it alone")
    run.set_defaults(func=cmd_run)


#: a soak's modes: async alone, no baseline (emulator/rank/soak.py)
SOAK_SETTINGS = ("checkpoint.modes=[async]", "checkpoint.baseline=false")


def cmd_run(args) -> int:
    from emulator.launch.runner import execute_run  # the run's stack (torchrun, tiers) only when running
    if args.node_addr and not args.metrics_addr:  # the metrics listen where the node does
        args.metrics_addr = args.node_addr
    if args.soak is not None:
        if args.duration is not None:
            raise UserError("--soak DURATION is the run's duration: give it or --duration, not both")
        args.set = list(args.set or []) + list(SOAK_SETTINGS)
    cfg = load(args)
    duration = parse_duration(args.duration, "--duration") if args.duration is not None else None
    if args.soak is not None:
        duration = parse_duration(args.soak, "--soak")
    out = execute_run(cfg, duration=duration, soak=args.soak is not None, nnodes=args.nnodes,
                      nproc_per_node=args.nproc_per_node, rdzv_endpoint=args.rdzv_endpoint, rdzv_id=args.rdzv_id,
                      quiet=args.quiet, node_rank=args.node_rank, node_addr=args.node_addr, force=args.force)
    report = out / outdir.REPORT
    if not report.exists():
        print(f"this node finished; the report is written where rank 0 runs ({out})")
        return 0
    print(report.read_text(), end="")
    print(f"results: {out / outdir.RESULTS}")
    results = json.loads((out / outdir.RESULTS).read_text())
    # a load that restored nothing fails the run whatever the gate: loading back is half of what it checks
    return report_misses(misses(results), cfg.run.fail_on_miss or load_failed(results))
