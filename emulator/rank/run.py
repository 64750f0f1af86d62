"""The rank process: started by torchrun, one per emulated accelerator.

``python -m torch.distributed.run ... -m emulator.rank --config RESOLVED.json`` (``__main__.py``)

Builds the rank's state once (on its device, ``emulator/workload/device.py``), then for each mode trains (compute for
``step_seconds`` per step, an all-reduce per step like a real data-parallel
step, which also carries the stop flag so every rank stops at the same
step) and checkpoints every ``interval_steps``; then runs the loads. Rank 0
gathers every rank's records and writes results.json, report.txt and
timeline.png.

Before training, a run cleans up after a crashed one (partial files,
multipart uploads) and drains checkpoints that are complete locally but not
globally (``Checkpointer.resume``). When torchrun restarted the workers
(``--max-restarts``; an injected kill, a real crash), the new attempt first
restores the newest complete checkpoint, the recovery the report times, and
continues from there. Fault counts, resumed drains and the recovery are
added to results.json under ``faults``.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import torch
import torch.distributed as dist

from emulator import metrics
from emulator.checkpoint.audit import audit_tiers
from emulator.checkpoint.broadcast_restore import new_dp_group
from emulator.checkpoint.checkpointer import Checkpointer
from emulator.checkpoint.context import PipelineConfig
from emulator.checkpoint.engines import engine_for
from emulator.checkpoint.rank_file import design_bytes_weight
from emulator.checkpoint.injection import Faults
from emulator.checkpoint.layout import delete_all, list_steps
from emulator.checkpoint.loop import LoopThread
from emulator.checkpoint.node_loss import NodeLoss
from emulator.checkpoint.records import RankResult
from emulator.checkpoint.replicas import PeerReplicas
from emulator.checkpoint.restore import lists_tier
from emulator.checkpoint.retry import RetryPolicy, describe_error
from emulator.checkpoint.schedule import Schedule
from emulator.checkpoint.tally import Tally
from emulator.design.emulation import rescaled
from emulator.config import from_mapping
from emulator.design.codec import from_json
from emulator.errors import EXIT_FAILED, UserError, say
from emulator.fullsize import DesignClock
from emulator.host import proc_bytes
from emulator.job import outdir
from emulator.job.lifeline import name_rank_process, watch_parent
from emulator.job.outdir import OutDir
from emulator.job.ownership import claim_tiers, lost_claim, release
from emulator.job.rank_tiers import build_tiers, pace_tier, tier_scope
from emulator.mlperf.protocol import run_rank
from emulator.mlperf.report import write_outputs as write_mlperf_outputs
from emulator.rank import dilation
from emulator.rank.comm import DistComm
from emulator.rank.loads import Loads
from emulator.rank.malloc import cap_arenas
from emulator.rank.membership import Membership, join_process_group
from emulator.rank.recovery import Recoveries
from emulator.rank.soak import Soak
from emulator.rank.training import ModeLoop
from emulator.results.report import write_outputs as write_run_outputs
from emulator.workload.device import place
from emulator.workload.state import RankState
from emulator.sizing import rank_size
from tiers import s3_limits
from tiers.base import unwrap
from tiers.emulated import counted_as, device_waits
from tiers.mapped import mapped_peak_bytes
from tiers.pacing import FileTokenBucket
from tiers.fileops import write_all
from tiers.safepath import fresh_folder, open_own_file


class RankRun(Loads, Recoveries):
    """One rank's whole run: set-up, resume/recovery, the modes, the loads, its RankResult."""

    def __init__(self, cfg, design, out: Path, duration: float | None, membership: Membership, *,
                 soak: bool = False):
        """``cfg``: where the tiers live, their backends, ports, faults; ``design``: the run's design
        (design.json), which paces its tiers, steps and snapshot and sets its schedule and recoveries;
        ``soak``: the soak mode for ``duration`` (emulator/rank/soak.py)."""
        self.cfg, self.design, self.out, self.duration = cfg, design, OutDir(out), duration
        self.soak = Soak(self, duration) if soak else None
        self.membership = membership
        self.comm = DistComm()
        self.bg_comm = DistComm(dist.new_group(backend="gloo"))
        # where the next write may overlap a drain, the drain stage gets a group of its own
        self.drain_comm = DistComm(dist.new_group(backend="gloo")) \
            if design.async_waits_for == "local_write" else None
        # the peer tier's transport: its own group, so its streams never mix with other collectives
        self.peer_group = dist.new_group(backend="gloo") if cfg.tiers.peer is not None else None
        # checkpoint.engine dcp: DCP's own group (its background writer's collectives)
        self.dcp_group = dist.new_group(backend="gloo") if cfg.checkpoint.engine == "dcp" else None
        self.dp_group = new_dp_group(cfg, self.comm.rank)  # restores' broadcasts (one_per_dp_group)
        self.bare = build_tiers(cfg, self.comm, self.out.root)  # paced once the dilation is known
        self.local, self.global_, self.memory = self.bare.get("local"), self.bare["global"], self.bare.get("memory")
        self.schedule = Schedule.of(design.ladder)
        self.load_tiers, self.load_probe = {}, []  # the loads' own dilation, if any
        self.peer = PeerReplicas.build(cfg, self.schedule.keep.get("peer"), self.comm, self.peer_group,
                                       tier_scope(self.comm, self.out, "peer")) \
            if cfg.tiers.peer is not None else None  # its NIC is paced once the dilation is known
        self.claims = claim_tiers(self.comm, self.out.root, self.local, self.global_,  # before any write
                                  memory=self.memory)
        self.metrics = self._setup_metrics()
        self.attempt = membership.attempt
        self.tally = Tally(self.metrics)
        self.faults = Faults.from_config(cfg.failures, self.comm.rank, self.attempt, self.tally, recurring=soak)
        self.node_loss = NodeLoss(cfg.failures, recurring=soak)
        self._setup_spool()
        self._recover_tiers()
        self.placement = place(cfg.state.device, self.comm.local_rank, self.comm.local_world_size)
        self.state = RankState.of_run(cfg, design, self.comm.rank, self.placement.device)
        self.engine = engine_for(cfg, self.state, self.comm, group=self.dcp_group)  # how its files are written
        self.bytes_weight = design_bytes_weight(self.state, cfg.run.scale, self.engine)  # its file paced as its state
        self._say_staging()
        self._dilate(duration)
        self.global_ = self.faults.wrap_global(self.global_)
        p = cfg.parallelism
        self.meta = {"preset": cfg.model.name, "scale": self.cfg.run.scale, "tp": p.tp, "pp": p.pp, "dp": p.dp,
                     "zero_stage": p.zero_stage}
        self.ckpt = self._checkpointer()
        self.modes = {}
        self.resumed, self.recovery, self.recoveries = [], None, []
        self.last_step = 0

    def _say_staging(self) -> None:
        """Over the pinned budget the snapshot goes through bucket slots: say so once, at start."""
        d = self.state.stager.describe()
        if d["bucketed"] and self.comm.local_rank == 0:
            _warn(f"node {self.comm.node}: a rank's state ({d['host_bytes'] / (1 << 30):.2f} GiB) exceeds "
                  f"state.pinned_budget_gib ({d['budget_bytes'] / (1 << 30):.2f} GiB): staging in {d['buckets']} "
                  f"buckets through {d['pinned_bytes'] / (1 << 30):.3f} GiB of pinned slots")

    def _checkpointer(self):
        cfg, design = self.cfg, self.design
        config = PipelineConfig(
            drain_concurrency=design.drain_concurrency, drain_verify=design.verify,
            on_local_full=cfg.checkpoint.on_local_full, on_failure=cfg.drain.on_failure,
            async_waits_for=design.async_waits_for, read_timeout_s=cfg.checkpoint.read_timeout_s,
            spool_dir=str(self.out.spool(self.comm.node)), policy=RetryPolicy.from_config(cfg.drain),
            snapshot_seconds=self.clock.snapshot_seconds(design.emulation.snapshot, self._staged_bytes()))
        return Checkpointer(self.state, self.local, self.global_, self.bg_comm, memory=self.memory, peer=self.peer,
                            schedule=self.schedule, metrics=self.metrics, faults=self.faults, tally=self.tally,
                            meta=dict(self.meta), on_record=self._keep_record, drain_comm=self.drain_comm,
                            engine=self.engine, config=config)

    def _staged_bytes(self) -> int:
        """The bytes this rank's snapshot stages, at the run's scale: what it writes, or (engine dcp, the
        design's snapshot staging what a rank holds) what its rank of the job holds."""
        snap = self.design.emulation.snapshot
        if snap is None or snap.staged == "written":
            return self.state.nbytes
        held = rank_size(self.cfg.model, self.cfg.parallelism, self.comm.rank).held_bytes
        return round(held * self.cfg.run.scale)

    def _keep_record(self, rec, event: str) -> None:
        """Append a checkpoint's record, as it starts and once it is over, to this attempt's file:
        what an attempt did survives a kill."""
        path = self.out.records(self.comm.rank, self.attempt)
        fd = open_own_file(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, what="results folder")
        try:
            write_all(fd, (json.dumps({"event": event, **rec.to_dict()}) + "\n").encode())
        finally:
            os.close(fd)

    def _earlier_attempts(self) -> list[dict]:
        """This rank's records of the run's earlier torchrun attempts (killed ones included)."""
        out = []
        for attempt in range(self.attempt):
            path = self.out.records(self.comm.rank, attempt)
            lines = [json.loads(x) for x in (path.read_text().splitlines() if path.exists() else []) if x.strip()]
            out.append({"attempt": attempt, "started": sum(x["event"] == "started" for x in lines),
                        "last_step": max((x["step"] for x in lines), default=0),
                        "records": [{k: v for k, v in x.items() if k != "event"}
                                    for x in lines if x["event"] == "finished"]})
        return out

    def _setup_metrics(self):
        """No port: the null object. A port: multiprocess mode, the node leader serves the node."""
        port, self._server = self.cfg.metrics.port, None
        if port is None:
            return metrics.NULL_METRICS
        mp_dir = self.out.metrics(self.comm.node)
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(mp_dir)
        if self.comm.is_node_leader:
            metrics.prepare_multiprocess_dir(mp_dir)
        self.comm.barrier()
        m = metrics.Metrics(multiprocess=True)
        if self.comm.is_node_leader:
            self._server = metrics.serve_node(self.cfg.metrics.addr, port + self.comm.node)
        m.set_tiers(local=self.local.backend if self.local is not None else None, global_=self.global_.backend)
        return m

    def _set_tier_intervals(self) -> None:
        schedule, base, step = self.schedule, self.design.interval_steps, self.design.step_seconds  # the design's
        for name in schedule.every:  # each tier's own interval: its age alerts count in it
            seconds = schedule.interval_steps(name, base) * step
            if seconds > 0:
                self.metrics.set_tier_interval(name, seconds)

    def hold_metrics(self, since: float) -> None:
        """The node leader serves on until a scrape begun at ``since`` or later has been answered, or
        ``metrics.final_scrape_timeout_s``, or Ctrl-C: the process's end would take the final values with it."""
        server, timeout = self._server, self.cfg.metrics.final_scrape_timeout_s
        if server is None or timeout <= 0:
            return
        print(f"ckpt-emu: holding metrics on :{server.port} up to {timeout:g} s for a final scrape",
              file=sys.stderr, flush=True)
        deadline = time.monotonic() + timeout
        while not (self.out / outdir.STOP).exists():  # Ctrl-C ends the hold
            left = deadline - time.monotonic()
            if left <= 0:
                _warn(f"node {self.comm.node}: no scrape of the final metrics on :{server.port} within {timeout:g} "
                      "s (metrics.final_scrape_timeout_s; 0: exit at once)")
                return
            if server.wait_for_scrape(since, min(0.5, left)):
                return

    def _setup_spool(self) -> None:
        """Spool files (S3 uploads, drains through tiers without files) go under the results
        folder, one folder per node, which the node leader empties at start: what a SIGKILL
        left there is swept, never through a link. Tiers and the drainer are told the folder
        (TierScope.spool_dir)."""
        if self.comm.is_node_leader:
            fresh_folder(self.out.spool(self.comm.node), what="results folder")
        self.comm.barrier()

    def _dilate(self, duration: float | None) -> None:
        """Decide the time dilation (a probe of this host on the bare tiers where it is ``auto``), then
        pace every tier at it (docs/time-dilation.md)."""
        loop = LoopThread()
        try:
            self.clock, self.probe, self.scale_fit = dilation.decide(
                self.cfg, self.design, self.comm, self.state, self.bare, loop, duration, self.peer)
        finally:
            loop.close()
        if self.scale_fit is not None and self.scale_fit.changed:
            self._rescale(self.scale_fit)
        p = self.cfg.parallelism
        self.metrics.set_info(preset=self.cfg.model.name, scale=self.cfg.run.scale, ranks=p.active_ranks,
                              nodes=self.comm.nodes, modes=list(self.cfg.checkpoint.modes), version=_version())
        self.load_clock = self.clock
        paced = {name: pace_tier(self.design, self.clock, self.comm, self.out.root, name, bare,
                                 bytes_weight=self.bytes_weight) for name, bare in self.bare.items()}
        self.local, self.global_, self.memory = paced.get("local"), paced["global"], paced.get("memory")
        self.restoring_global = pace_tier(self.design, self.clock, self.comm, self.out.root, "global",
                                          self.bare["global"], bytes_weight=self.bytes_weight, restoring=True)
        self._set_tier_intervals()
        self.metrics.set_clock(DesignClock(self.clock.time_factor, self.clock.scale, self.bytes_weight,
                                           self._step_wall))
        if self.peer is not None:
            self.peer.transport.pacer, self.peer.transport.bytes_weight = self._nic(), self.bytes_weight

    def _rescale(self, fit) -> None:
        """run.wall_target: the run goes at the probe's smaller scale (emulator/rank/dilation.py
        ``fit_scale``): its state made again at it, the design's capacities (in the run's bytes) with it."""
        self.cfg = replace(self.cfg, run=replace(self.cfg.run, scale=fit.scale))
        self.design = rescaled(self.design, fit.scale, fit.asked)
        self.state = None  # the run.scale state's memory back before the new one is made
        self.state = RankState.of_run(self.cfg, self.design, self.comm.rank, self.placement.device)
        self.engine = engine_for(self.cfg, self.state, self.comm, group=self.dcp_group)
        self.bytes_weight = design_bytes_weight(self.state, fit.scale, self.engine)
        if self.comm.rank == 0:
            say(f"ckpt-emu: {fit.line()}")

    def _nic(self):
        """The link the node's ranks' peer sends share, as a rate (the design's, for the run node's part
        of its node, / the dilation; none without one): its compute fabric, else its NIC, whose bucket
        the global tier's writes share too."""
        pacing = self.design.emulation.node(self.comm.node)
        if pacing.peer_bps is None:
            return None
        where = self.out.fabric(self.comm.node) if pacing.peer_fabric else self.out.nic(self.comm.node)
        return FileTokenBucket(pacing.peer_bps / self.clock.dilation, where)

    @property
    def _step_wall(self) -> float:
        """A training step as it lasts here: the design's, on the run's clock."""
        return self.clock.wall(self.design.step_seconds)

    @property
    def node_tiers(self) -> list[tuple[str, object]]:
        """This node's own tiers, nearest first: (name, tier) of memory and local where configured."""
        return [(n, t) for n, t in (("memory", self.memory), ("local", self.local)) if t is not None]

    @property
    def _host_folders(self) -> list[tuple[str, object]]:
        """The node's tiers and the copies it holds for its peers: what its leader cleans up."""
        held = [("peer", self.peer.store)] if self.peer is not None else []
        return self.node_tiers + held

    @property
    def _holders(self):
        """node -> the nodes holding its copies (None without a peer tier): what a loss's class needs."""
        return self.peer.holders if self.peer is not None else None

    def _recover_tiers(self) -> None:
        """Node leaders clean up what a crashed run left on the tiers this run now owns.

        Best effort: a tier that refuses (e.g. no s3:ListBucketMultipartUploads permission
        under a least-privilege policy) gets one warning line, and the run goes on."""
        if not self.comm.is_node_leader:
            return
        for name, tier in self._host_folders + [("global", self.global_ if self.comm.rank == 0 else None)]:
            if tier is None:
                continue
            try:
                asyncio.run(tier.recover_after_crash())
            except Exception as exc:  # noqa: BLE001 - clean-up must never stop a run
                self.tally.count("tier_error")
                _warn(f"tiers.{name}: clean-up of an earlier crash skipped: {describe_error(exc)}")

    def _clean_up_after_run(self) -> list[str]:
        """End of run: empty the tiers in host memory unless run.keep_tiers, abort multipart uploads
        a failed drain could not abort (server was down), free a recycling memory tier's pool (node
        leaders); returns the tiers emptied.

        Safe here: every drain of every node ended inside the last checkpoint's collectives."""
        self.comm.barrier()
        tiers = self._host_folders if self.comm.is_node_leader else []
        emptied = []
        for name, tier in tiers + ([("global", self.global_)] if self.comm.rank == 0 else []):
            try:
                if tier.in_host_memory and not self.cfg.run.keep_tiers:
                    self.ckpt.loop.run(delete_all(tier))
                    emptied.append(name)
                self.ckpt.loop.run(tier.clean_up_after_run())
            except Exception as exc:  # noqa: BLE001 - the next run's start cleans up too
                self.tally.count("tier_error")
                _warn(f"tiers.{name}: end-of-run clean-up skipped: {describe_error(exc)}")
        return emptied

    # ------------------------------------------------------------------ phases

    def _first_step(self) -> int:
        """Continue numbering after the newest checkpoint any tier already holds."""
        newest = 0  # each tier listed by one of the ranks sharing it, not by every rank (a LIST storm)
        for tier, shared in [(t, False) for _, t in self.node_tiers] + [(self.global_, True)]:
            if tier is not None and lists_tier(self.comm, shared=shared):
                seen = self.ckpt.loop.run(list_steps(tier))[1]
                newest = max([newest] + seen)
        return int(self.comm.all_max(newest)) + 1

    @property
    def node_failed(self) -> bool:
        return self.node_loss.happened(len(self.ckpt.records))

    def _stop_requested(self) -> bool:
        """Ctrl-C reached the CLI on any node (a collective, so every rank agrees)."""
        return self.comm.all_max(1.0 if (self.out / outdir.STOP).exists() else 0.0) > 0

    def _train(self, step: int) -> None:
        loop = ModeLoop(self.cfg, self.design, self.clock, self.state, self.ckpt, self.comm, self.metrics, self.out,
                        self.node_loss)
        modes = list(self.cfg.run_modes)  # the no-checkpoint baseline first, if enabled
        budget = self.duration / len(modes) if self.duration else None
        if self.soak is not None:
            step = self.soak.train(loop, step)
        for mode in modes if self.soak is None else ():
            if self.node_failed or self._stop_requested():
                break
            step, self.modes[mode] = loop.run(mode, step, budget)
        loop.trained.close()
        self.last_step = step - 1

    def run(self) -> RankResult:
        step = self._first_step()
        self.ckpt.continue_lineage(first_step=step)
        self.resumed = self.ckpt.resume()
        if self.attempt > 0:
            self.recovery = self._recover()
        self._train(step)
        content_audit = self._audit_content()
        failure = self._lose_nodes() if self.node_failed else None
        stopped_early = self._stop_requested()
        loads, dropped = ([], False) if stopped_early else self.run_loads()
        tier_loads = [] if stopped_early else self._tier_loads()
        self.ckpt.finish()
        emptied = self._clean_up_after_run()
        self.ckpt.close()
        self.comm.barrier()  # every rank is done with the tiers before the claims go
        release(self.claims)
        return RankResult(
            rank=self.comm.rank, node=self.comm.node, state_bytes=self.state.nbytes,
            emulated_bytes=self.state.emulated_bytes, records=[r.to_dict() for r in self.ckpt.records],
            loads=[r.to_dict() for r in loads], page_cache_dropped=dropped, modes=self.modes,
            events=[(e.kind, e.start, e.end) for e in self.ckpt.events],
            local=self.local.describe() if self.local is not None else None, global_=self.global_.describe(),
            stopped_early=stopped_early, failure=failure, attempt=self.attempt,
            soak=self.soak.describe() if self.soak is not None else None,
            resume=[r.to_dict() for r in self.resumed],
            recovery=self.recovery.to_dict() if self.recovery is not None else None,
            fault_counts=dict(self.tally.counts + Counter(s3_limits.counts())), content=self.state.content.describe(),
            content_audit=content_audit, peak_rss_bytes=proc_bytes("/proc/self/status", "VmHWM") or 0,
            earlier_attempts=self._earlier_attempts(), device=self.placement.describe(),
            staging=self.state.stager.describe(), s3_requests=_s3_requests(self.global_),
            device_waits={"local": self._device_waits("local"), "global": self._device_waits("global")},
            tier_loads=tier_loads, recoveries=self.recoveries, memory_tier_peak_bytes=self.ckpt.memory_tier_peak,
            mapped_tier_peak_bytes=mapped_peak_bytes(), tiers_emptied=emptied, bytes_weight=self.bytes_weight,
            scale_fit=self.scale_fit.describe() if self.scale_fit is not None else None,
            dilation={**dilation.describe(self.probe, self.clock.dilation),
                      "loads": dilation.describe(self.load_probe, self.load_clock.dilation)
                      if self.load_tiers else None})

    def _device_waits(self, name: str) -> dict | None:
        """The waits on tier ``name``'s emulated device: the run's tier's, its restores' (global storage
        in a restore storm) and the loads' own paced tier's added."""
        pacers = [self.global_, self.restoring_global] if name == "global" else [self.local]
        found = [w for w in map(device_waits, pacers + [(self.load_tiers or {}).get(name)]) if w is not None]
        if not found:
            return None
        run = found[0]
        for other in found[1:]:
            for phase, by_dir in other["waits"].items():
                mine = run["waits"].setdefault(phase, {})
                for direction, s in by_dir.items():
                    mine[direction] = mine.get(direction, 0.0) + s
        return run

    def _audit_content(self) -> dict | None:
        try:
            with counted_as("audit"):  # the tool's own reads, apart from the job's phases
                return audit_tiers([t for t in (self.local, self.global_) if t is not None], self.comm.rank,
                                   self.ckpt.loop)
        except Exception:  # noqa: BLE001 - an audit must never fail a run
            self.tally.count("tier_error")
            return None



def _s3_requests(tier) -> dict:
    """Every request the global tier made, by kind, if it counts them (S3: tiers/s3_requests.py)."""
    requests = getattr(unwrap(tier), "requests", None)
    return requests.counts() if requests is not None else {}


def _warn(text: str) -> None:
    say(f"ckpt-emu: warning: {text}")


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("ckpt-emu")
    except Exception:
        return "0+unknown"


def _run_emulator(cfg, design, out: Path, duration: float | None, membership: Membership, soak: bool) -> None:
    run = RankRun(cfg, design, out, duration, membership, soak=soak)
    result = run.run()
    gathered = run.comm.all_gather(result.to_dict())
    final = time.monotonic()  # every rank is past its last metric: a scrape from now on sees them all
    if run.comm.rank == 0:
        write_run_outputs(run.cfg, run.design, run.clock, gathered, out)  # at the scale it ran (run.wall_target)
    run.comm.barrier()
    if not result.stopped_early:  # Ctrl-C: the user wants the run over
        run.hold_metrics(final)


def _run_mlperf(cfg, design, out: Path) -> None:
    """MLPerf Storage's protocol instead of training (emulator/mlperf/protocol.py)."""
    comm = DistComm()
    gathered = comm.all_gather(run_rank(cfg, design, out, comm))
    if comm.rank == 0:
        write_mlperf_outputs(cfg, gathered, out)
    comm.barrier()


#: the signals torchrun's agent handles (raising an exception), which a rank forked from it inherits
AGENT_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def forked_main(*argv: str) -> None:
    """``main`` in a rank forked from torchrun's agent's fork server (emulator/rank/agent.py), set up
    as torchrun sets up a rank it executes: the interpreter's own signal handlers (not the agent's), a session
    of its own, unbuffered output (``python -u``), an uncaught exception printed by the
    interpreter's hook (torch's: ``[rankN]:`` before each line, which the launcher's failure
    summary reads), its exit status the process's."""
    for sig in AGENT_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.setsid()
    sys.stdout.reconfigure(write_through=True)
    sys.stderr.reconfigure(write_through=True)
    try:
        status = main(list(argv))
    except Exception:
        sys.excepthook(*sys.exc_info())
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    if status:
        sys.exit(status)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="emulator.rank")
    ap.add_argument("--config", required=True, help="resolved config JSON written by `ckpt-emu run`")
    ap.add_argument("--duration", type=float, default=None, help="seconds of training, split over the modes")
    ap.add_argument("--soak", action="store_true", help="the soak mode: --duration of async checkpoints, "
                    "the failures given recurring, each recovered from (emulator/rank/soak.py)")
    args = ap.parse_args(argv)
    watch_parent()  # the rank dies with its torchrun agent (and so with the CLI)
    name_rank_process(os.environ.get("RANK", ""))
    cap_arenas()
    raw = json.loads(Path(args.config).read_text())
    cfg = from_mapping(raw)
    design = from_json(json.loads((Path(args.config).parent / outdir.DESIGN).read_text()))
    out = Path(cfg.run.out)
    torch.set_num_threads(cfg.run.threads_per_rank)
    import torch.utils.serialization as ser

    # MLPerf's runs use torch.save as it comes: its zip CRC32 on
    ser.config.save.compute_crc32 = cfg.checkpoint.torch_crc32 or cfg.checkpoint.protocol == "mlperf"
    if cfg.state.dedup_ratio > 1:  # duplicate tensor blocks must be duplicate 4 KiB file blocks
        ser.config.save.storage_alignment = 4096
    try:
        membership = join_process_group()
        expected = cfg.parallelism.active_ranks
        if dist.get_world_size() != expected:
            raise UserError(f"launched {dist.get_world_size()} ranks but the config needs {expected}")
        if cfg.checkpoint.protocol == "mlperf":
            _run_mlperf(cfg, design, out)
        else:
            _run_emulator(cfg, design, out, args.duration, membership, args.soak)
    except UserError as exc:  # a claimed folder that went is the cause of what failed after it
        lost = lost_claim()
        say(f"ckpt-emu: error: rank {os.environ.get('RANK', 0)}: {lost or exc}")
        return EXIT_FAILED if lost else exc.exit_code  # 2 bad input, 3 a run that could not finish
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0
