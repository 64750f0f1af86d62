"""A real emulation run as a calibration of the design: results.json -> :class:`emulator.design.Calibration`.

:func:`read_results` is the only code that reads results.json (its docstring lists every field
used); :func:`read_calibration` turns what it read into what the design takes from a run, per node
at full size (emulator/design/model.py applies it):

- the snapshot rate per accelerator (the stall before the pipeline over the largest rank's file);
- each tier's copy rate, a node's bytes over its time less its requests (the ranks' write to the
  first tier less its commit; the drain to global storage less its waves of requests; a peer's
  send and the NVMe's copy from memory as the run's levels timed them), and each tier's read rate
  (a restore from it alone, less its two requests);
- the fixed costs of a checkpoint beyond its transfers and requests (barriers, gathers, the host),
  before the write and after the drain; what each retention request took beyond its latency;
- each failure class's measured recovery; the background interference (with the run's baseline);
- how the run's node was paced on each tier, so a design paced the same way keeps the measured rates.

Scale: a run at ``run.scale`` F moves F of the bytes and its time follows them. A rate is bytes over
seconds *of the same run*, so it holds at full size as it stands; latencies and fixed costs do not
shrink with F and are counted once, never / F (emulator/results/scale_notes.py; tests/unit/simulation/test_simulate.py
checks this against a real run). Only ``--as-run`` simulates at F, with the run's own step time.
"""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from emulator import sizing
from emulator.config import from_mapping
from emulator.design import Calibration, ladder, resolve
from emulator.design.costs import retention_requests
from emulator.design.job import NodeGroup, job_of
from emulator.design.links import paced_part, pacing
from emulator.errors import ConfigError, UserError
from tiers.base import TierError
from tiers.fileops import read_regular


@dataclass(frozen=True)
class RunRecord:
    mode: str
    step: int
    rank: int
    node: int
    stall_s: float
    wait_s: float
    snapshot_s: float
    local_write_s: float
    drain_s: float
    complete_s: float
    file_bytes: int
    written_to: str
    missed: bool
    ok: bool
    due: tuple = ladder.lasting_file_tiers()
    #: tier -> seconds of that tier's own stage (a peer's send, a copy from memory to NVMe)
    stages: dict = field(default_factory=dict)
    #: when the checkpoint stopped training (wall clock); None in a results.json from before it was kept
    start: float | None = None
    #: of the snapshot, the time the design's copy rate paced (0: not paced)
    snapshot_paced_s: float = 0.0


@dataclass
class RunFigures:
    """What a run measured, independent of how results.json spells it."""

    source: str
    config: object                  # the run's validated Config
    nodes: int
    ranks: int
    records: list
    mode_steps: dict                # mode -> (training_wall_s, stall_total_s, steps), at the run's scale
    recovery_s: dict                # tier -> mean over loads of the slowest rank's seconds
    #: the run's step time followed run.scale (results.json has ``step_seconds``; runs before that did not)
    time_scaled: bool = True
    #: mode -> training time its steps lost to background work beyond the stalls (interference), per
    #: checkpoint, at the run's scale; absent without the no-checkpoint baseline
    interference_s: dict = field(default_factory=dict)
    #: failure class -> {"seconds_full_size", "served_by", "fetch_s", "fetch_failed"} of its recovery
    #: (``recoveries``; ``fetch_s``: a lost node's fetch of its copy from its peer, slowest rank)
    recoveries: dict = field(default_factory=dict)
    #: tier -> {"seconds": a restore from it alone, slowest rank, "node_bytes"} (``restore_by_tier``)
    tier_restores: dict = field(default_factory=dict)
    #: the run's run.dilation D: a paced transfer ran at the design's rate / D (1: a run before dilation)
    dilation: float = 1.0
    #: checkpoint.engine dcp: mode -> the library's own seconds (``engine.measured_s``: staging, planning, ...)
    engine_s: dict = field(default_factory=dict)


def read_results(path: str) -> RunFigures:
    """Read an emulation run's results.json (the one place that does).

    Fields used: ``config`` (the resolved run config), ``nodes``, ``ranks``,
    ``modes.<mode>.training_wall_s``, ``.stall_total_s`` and ``.steps``,
    ``load.recovery_mean_s_by_tier`` (``_at_run_factor`` where the loads had a dilation of their own), every ``per_rank[].records[]``'s ``mode``, ``step``,
    ``rank``, ``node``, ``stall_s``, ``wait_s``, ``snapshot_s``, ``local_write_s``, ``drain_s``,
    ``complete_s``, ``file_bytes``, ``written_to``, ``missed``, ``global_complete``, ``error``,
    ``due`` and ``tiers.<tier>.seconds``; ``recoveries[]`` (``class``, ``seconds_full_size``,
    ``served_by``, ``fetch_s``, ``fetch_errors``); ``restore_by_tier.<tier>`` (``ok``, ``seconds`` or ``seconds_at_run_factor``, ``node_bytes``); ``dilation.factor``;
    whether it has
    ``step_seconds`` (its step time followed the scale); with a baseline, ``baseline.step_wall_s``
    and ``modes.<mode>.interference_ratio``. Durations are at the run's scale, as its bytes are: the
    ``full_size`` figures are not read (see the module docstring). Modes without checkpoints (the
    baseline ``none``) have no records and calibrate nothing.
    """
    where = f"--calibrate {path}"
    try:
        raw = json.loads(read_regular(path))
    except OSError as exc:
        raise UserError(f"{where}: cannot read: {exc.strerror}") from None
    except TierError:  # a FIFO, a device
        raise UserError(f"{where}: cannot read: not a regular file") from None
    except (ValueError, UnicodeDecodeError):
        raise UserError(f"{where}: not a JSON file (give the results.json of a ckpt-emu run)") from None
    try:
        cfg = from_mapping(raw["config"])
        records = [_record(r) for pr in raw["per_rank"] for r in pr["records"]]
        steps = {m: (float(v["training_wall_s"]), float(v["stall_total_s"]), int(v["steps"]))
                 for m, v in raw["modes"].items() if m != "none"}
        load = raw["load"]  # the loads at the run's factor where they ran at one of their own
        recovery = {str(k): float(v) for k, v in (load.get("recovery_mean_s_by_tier_at_run_factor")
                                                  or load.get("recovery_mean_s_by_tier") or {}).items()}
        recoveries = {str(x["class"]): {"seconds_full_size": float(x["seconds_full_size"]),
                                        "served_by": dict(x["served_by"]), "fetch_s": float(x.get("fetch_s", 0.0)),
                                        "fetch_failed": bool(x.get("fetch_errors"))}
                      for x in raw.get("recoveries") or []}
        restores = {str(k): {"seconds": float(v.get("seconds_at_run_factor", v["seconds"])),
                             "node_bytes": int(v["node_bytes"])}
                    for k, v in (raw.get("restore_by_tier") or {}).items() if v.get("ok") and "node_bytes" in v}
        dilation = float((raw.get("dilation") or {}).get("factor") or 1.0)
        return RunFigures(str(path), cfg, int(raw["nodes"]), int(raw["ranks"]), records, steps, recovery,
                          time_scaled="step_seconds" in raw, interference_s=_interference(raw, records),
                          recoveries=recoveries, tier_restores=restores, dilation=dilation,
                          engine_s=dict((raw.get("engine") or {}).get("measured_s") or {}))
    except ConfigError as exc:
        raise UserError(f"{where}: its config does not load: {exc}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UserError(f"{where}: not the results.json of a ckpt-emu run (missing or bad {exc})") from None


def _record(r: dict) -> RunRecord:
    due = tuple(r.get("due") or ladder.lasting_file_tiers())
    ok = not r["error"] and (bool(r["global_complete"]) or "global" not in due)
    stages = {str(k): float(v["seconds"]) for k, v in (r.get("tiers") or {}).items()
              if isinstance(v, dict) and v.get("complete")}
    return RunRecord(r["mode"], int(r["step"]), int(r["rank"]), int(r["node"]), float(r["stall_s"]),
                     float(r["wait_s"]), float(r["snapshot_s"]), float(r["local_write_s"]), float(r["drain_s"]),
                     float(r["complete_s"]), int(r["file_bytes"]), str(r["written_to"]), bool(r["missed"]), ok,
                     due, stages, float(r["start"]) if "start" in r else None,
                     float((r.get("paced") or {}).get("snapshot", 0.0)))


def _interference(raw: dict, records: list) -> dict:
    """Per mode, the step time lost beyond the stalls (``interference_ratio`` x the baseline's step, over
    the mode's steps) per checkpoint, at the run's scale; never below 0 (noise)."""
    base = (raw.get("baseline") or {}).get("step_wall_s")
    out = {}
    for m, v in raw["modes"].items():
        checkpoints = len({r.step for r in records if r.mode == m})
        if base and "interference_ratio" in v and checkpoints:
            out[m] = max(0.0, float(v["interference_ratio"]) * float(base) * int(v["steps"]) / checkpoints)
    return out


def check_same_preset(cfg, fig: RunFigures) -> None:
    """A calibration only transfers between runs of the same model (its bytes per rank)."""
    mine, theirs = cfg.model, fig.config.model
    if mine != theirs:
        diff = [k for k in vars(mine) if getattr(mine, k) != getattr(theirs, k)]
        raise UserError(f"--calibrate {fig.source}: made with preset {theirs.name!r}, this config is "
                        f"{mine.name!r} (model.{', model.'.join(diff)} differ); calibrate with a run of the "
                        f"same model")


def run_groups(fig: RunFigures) -> tuple | None:
    """The run's own nodes as node groups, their files as the run wrote them (``--as-run``: the bytes
    the run moved, headers included, not the sizing's); None when a rank wrote nothing complete."""
    first = {}
    for r in fig.records:
        if r.ok:
            first.setdefault(r.rank, (r.node, r.file_bytes))
    if len(first) != fig.ranks:
        return None
    by_node = defaultdict(list)
    for node, size in first.values():
        by_node[node].append(size)
    counts = Counter((sum(s), max(s), len(s)) for s in by_node.values())
    return tuple(NodeGroup(k, b, f, n) for (b, f, n), k in sorted(counts.items()))


def step_seconds(fig: RunFigures, mode: str) -> float | None:
    """The run's measured training time per step of ``mode``, at its scale: between its checkpoints
    (what sets an async checkpoint's wait for the one before), less the interference counted apart;
    without two checkpoints in a row, its wall less its stalls over its steps."""
    between = _steps_between_checkpoints(fig, mode)
    if between is not None:
        return between
    wall, stall, steps = fig.mode_steps.get(mode, (0.0, 0.0, 0))
    return max(0.0, (wall - stall) / steps) if steps else None


def _steps_between_checkpoints(fig: RunFigures, mode: str) -> float | None:
    """Training seconds per step from each checkpoint's end of stall to the next one's start, every
    rank's consecutive checkpoints pooled; None without such a pair."""
    every = fig.config.checkpoint.interval_steps
    by_rank = defaultdict(list)
    for r in fig.records:
        if r.mode == mode and r.start is not None:
            by_rank[r.rank].append(r)
    seconds, steps = 0.0, 0
    for recs in by_rank.values():
        recs.sort(key=lambda r: r.step)
        for a, b in zip(recs, recs[1:]):
            if b.step - a.step == every and b.start > a.start:
                seconds += b.start - a.start - a.stall_s - fig.interference_s.get(mode, 0.0)
                steps += every
    return max(0.0, seconds / steps) if steps else None


class _Steps:
    """The run's complete checkpoints, each as job-level figures (the slowest rank or node decides)."""

    def __init__(self, fig: RunFigures, mode: str | None = None):
        by_step = defaultdict(list)
        for r in fig.records:
            by_step[(r.mode, r.step)].append(r)
        steps = [recs for recs in by_step.values() if all(r.ok for r in recs)]
        if not steps:
            raise UserError(f"--calibrate {fig.source}: the run has no complete checkpoint to calibrate from")
        mine = [recs for recs in steps if recs[0].mode == mode]
        self.steps, self.mode = (mine, mode) if mine else (steps, None)

    @staticmethod
    def staging(recs) -> float:
        """The job's stall before the pipeline: async, the stall less any wait; sync, the snapshot."""
        if recs[0].mode == "async":
            return max(r.stall_s - r.wait_s for r in recs)
        return max(r.snapshot_s for r in recs)

    def mean(self, fn, keep=None) -> float | None:
        vals = [fn(recs) for recs in self.steps if keep is None or keep(recs)]
        return sum(vals) / len(vals) if vals else None

    @staticmethod
    def most(recs, attr: str) -> float:
        return max(getattr(r, attr) for r in recs)

    @staticmethod
    def most_stage(recs, tier: str) -> float:
        return max(r.stages.get(tier, 0.0) for r in recs)

    @staticmethod
    def node_bytes(recs) -> int:
        by_node = defaultdict(int)
        for r in recs:
            by_node[r.node] += r.file_bytes
        return max(by_node.values())


def _mib(b: float) -> str:
    return f"{b / 2 ** 20:.2f} MiB"


class _Calibrating:
    """One mode's calibration from a run, step by step; notes say what each figure became."""

    def __init__(self, fig: RunFigures, mode: str | None):
        self.fig, self.run = fig, fig.config
        self.st = _Steps(fig, mode)
        # the run, as it ran: its bytes, its latencies (x the time factor)
        self.design = resolve(self.run, emulated_nodes=fig.nodes, as_run=True, dilation=fig.dilation)
        self.cal = Calibration(source=fig.source, dilation=fig.dilation)
        job = job_of(self.run, emulated_nodes=fig.nodes)
        self.paced = {name: pacing(self.run, name, job) for name in self.run.tiers.configured()}
        # a run node that is part of a job node was paced at that part of a described tier's rates: its
        # bytes over its seconds there are that part of the whole node's rate
        node = max(range(len(job.emulated)), key=lambda i: job.emulated[i].node_bytes)
        self.part = {name: paced_part(self.run, name, job, node) for name in self.run.tiers.configured()}
        self.node_bytes = self.st.node_bytes(self.st.steps[0])
        self.file_bytes = max(r.file_bytes for recs in self.st.steps for r in recs)

    def lat(self, tier: str) -> float:
        t = self.design.link(tier)
        return t.latency_s if t is not None else 0.0

    def rate(self, tier: str, what: str, seconds: float | None, requests_s: float, nbytes: float,
             into: dict) -> None:
        """``nbytes`` over ``seconds`` less its requests, into ``into[tier]``, and a note."""
        if seconds is None:
            return
        moving = seconds - requests_s
        if moving <= 0 or nbytes <= 0:
            self.cal.notes.append(f"{tier} {what}: {seconds * 1000:.1f} ms measured is no more than its requests "
                                  f"({requests_s * 1000:.1f} ms): not calibrated, the design's rate stands")
            return
        # a paced transfer ran at the design's rate / D: at full size it is D times what it reached here
        dilated = self.fig.dilation if (self.paced.get(tier) or (None,))[0] is not None else 1.0
        part = self.part.get(tier, 1.0)
        into[tier] = nbytes / moving * dilated / part
        self.cal.notes.append(f"{tier} {what}: {seconds * 1000:.1f} ms measured ({requests_s * 1000:.1f} ms of it "
                              f"requests) for {_mib(nbytes)} per node -> {into[tier] / 1e9:.4g} GB/s per node"
                              + (f" (x {dilated:g}, the run's dilation)" if dilated != 1 else "")
                              + (f" (/ {part:.3g}: the run's node was that part of a node)" if part != 1 else ""))

    def copies(self) -> None:
        st, d = self.st, self.design
        for first in sorted({recs[0].written_to for recs in st.steps}):
            lat = self.lat(first)
            seconds = st.mean(lambda recs: st.most(recs, "local_write_s"),
                              lambda recs, f=first: all(r.written_to == f for r in recs))
            self.rate(first, "write", seconds, lat, self.node_bytes, self.cal.copy_bps)
        waves = -(-d.job.heaviest.files // d.drain_concurrency)
        drain = st.mean(lambda recs: st.most(recs, "drain_s"),
                        lambda recs: all(r.written_to != "global" and "global" in r.due for r in recs))
        if "global" not in self.cal.copy_bps or drain is not None:
            self.rate("global", "drain", drain, 2 * waves * self.lat("global"), self.node_bytes, self.cal.copy_bps)
        for tier in ladder.stages():  # a peer's send, the NVMe's copy from memory
            if tier in self.cal.copy_bps:
                continue
            seconds = st.mean(lambda recs, t=tier: st.most_stage(recs, t),
                              lambda recs, t=tier: all(t in r.stages and r.written_to != t for r in recs))
            copies = d.replicas if tier == "peer" else 1
            self.rate(tier, "copy", seconds, 0.0, self.node_bytes * copies, self.cal.copy_bps)

    def reads(self) -> None:
        for tier, r in self.fig.tier_restores.items():
            self.rate(tier, "restore", r["seconds"], 2 * self.lat(tier), r["node_bytes"], self.cal.read_bps)
        for tier, seconds in self.fig.recovery_s.items():  # the run's loads; with failures injected they
            # mix a lone reader with the others' reads: restore_by_tier alone times a tier then
            if tier in self.design.tiers and tier not in self.cal.read_bps and not self.fig.recoveries:
                self.rate(tier, "restore", seconds, 2 * self.lat(tier), self.node_bytes, self.cal.read_bps)
        node = self.fig.recoveries.get("node", {})
        if node.get("fetch_s") and not node["fetch_failed"]:  # a lost node's fetch from its peer, timed alone
            self.rate("peer", "fetch", node["fetch_s"], 0.0, self.node_bytes, self.cal.read_bps)
        if "peer" in self.cal.copy_bps and "peer" not in self.cal.read_bps:  # a fetch travels the sends' path
            self.cal.read_bps["peer"] = self.cal.copy_bps["peer"]
            self.cal.notes.append(f"peer fetch: not timed alone; at the rate the run's peer copies reached, "
                                  f"{self.cal.read_bps['peer'] / 1e9:.4g} GB/s per node")

    def fixed(self) -> None:
        """What a checkpoint took beyond its staging, transfers and requests (collectives, the host), and
        how much longer than its requests' latency the retention a late checkpoint waited for took."""
        st = self.st

        def residual(recs) -> float:
            m = lambda a: st.most(recs, a)  # noqa: E731
            first, due = recs[0].written_to, recs[0].due
            stages = sum(st.most_stage(recs, t) for t in due if t not in (first, "global"))
            lat = (self.lat(first) if first != "global" else 0.0) + (self.lat("global") if "global" in due else 0.0)
            return m("complete_s") - m("wait_s") - st.staging(recs) - m("local_write_s") - m("drain_s") - stages - lat
        res = max(0.0, st.mean(residual, lambda recs: not any(r.missed for r in recs)) or 0.0)
        self.cal.fixed_pre_s = self.cal.fixed_post_s = res / 2
        self.cal.notes.append(f"coordination: {res * 1000:.1f} ms per checkpoint beyond transfers and requests "
                              f"(barrier, gathers, manifests' bytes); a fixed cost, not scaled")
        late = st.mean(residual, lambda recs: any(r.missed for r in recs))
        if late is None:
            return
        requests = retention_requests(self.design)
        modeled = sum(n * self.lat(t) for t, n in requests.items())
        count = sum(requests.values())
        self.cal.retention_request_s = max(0.0, late - res - modeled) / max(1, count)
        self.cal.notes.append(f"retention: late checkpoints waited {(late - res) * 1000:.1f} ms for the previous "
                              f"one's ({count} requests, {modeled * 1000:.1f} ms of latency): "
                              f"{self.cal.retention_request_s * 1000:.2f} ms more per request")

    def planning(self) -> None:
        """With engine dcp: DCP's planning per plan item, from the run's own (its slowest rank's mean),
        over the items the coordinator went through: each rank's tensors, every rank's plan."""
        measured = [m["planning_s"] for m in self.fig.engine_s.values() if m.get("planning_s")]
        if not measured:
            return
        par = self.run.parallelism
        tensors = max(len(sizing.model_tensors(self.run.model, par, c)) + len(sizing.optimizer_tensors(self.run.model, par, c))
                      for c in (sizing.rank_coords(r, par.tp, par.pp, par.dp) for r in range(self.fig.ranks)))
        planning = sum(measured) / len(measured)
        self.cal.plan_item_s = planning / max(1, tensors * (self.fig.ranks + 1))
        self.cal.notes.append(f"DCP's planning: {planning * 1000:.1f} ms for {self.fig.ranks} ranks' plans of "
                              f"{tensors} tensors -> {self.cal.plan_item_s * 1e6:.1f} us an item")

    def build(self) -> Calibration:
        fig, cal, st = self.fig, self.cal, self.st
        cal.notes.append(f"calibrated by {fig.source} ({st.mode or 'all'} checkpoints: {len(st.steps)}): "
                         f"{fig.ranks} ranks on {fig.nodes} node(s) at run.scale {self.run.run.scale:g}, "
                         f"{_mib(self.node_bytes)} per node per checkpoint; rates are its bytes over its seconds, "
                         f"so they hold at any size; requests and per-checkpoint costs are counted once, not / scale")
        if not fig.time_scaled:
            cal.notes.append("the run predates time following run.scale (no step_seconds in its results.json): "
                             "its rates hold, its step time is its own (only --as-run uses it)")
        # a paced snapshot: its rate from its paced time (the host's own part, a swap and a wake-up, is
        # counted once at full size, not / scale); unpaced, this host's copy; with engine dcp the stall
        # DCP's staging held the loop for (its own copy and walk, at least the paced time)
        paced_stage = st.mean(lambda recs: max(r.snapshot_paced_s for r in recs))
        dcp = self.run.checkpoint.engine == "dcp"
        stage = paced_stage if paced_stage and not dcp else st.mean(st.staging)
        if stage and stage > 0:
            paced = self.run.design is not None  # at the design's rate, stated or assumed: / D
            cal.snapshot_bps = self.file_bytes / stage * (fig.dilation if paced else 1.0)
            cal.notes.append(f"staging (the stall before the pipeline): {stage * 1000:.2f} ms for the largest rank's "
                             f"{_mib(self.file_bytes)} -> {cal.snapshot_bps / 1e9:.4g} GB/s per accelerator")
        self.planning()
        self.copies()
        self.reads()
        self.fixed()
        cal.recovery_s = {c: v["seconds_full_size"] for c, v in fig.recoveries.items() if v["seconds_full_size"] > 0}
        cal.interference_share = interference_share(fig, st.mode or "async")
        cal.paced = self.paced
        return cal


def calibration(fig: RunFigures, mode: str | None = None) -> Calibration:
    """What the run ``fig`` measured, as the design's calibration; with ``mode``, from that mode's
    checkpoints only when the run has some (each mode's own host behaviour)."""
    return _Calibrating(fig, mode).build()


def read_calibration(path: str, mode: str | None = None) -> Calibration:
    """The calibration a run's results.json gives (:func:`calibration` of :func:`read_results`)."""
    return calibration(read_results(path), mode)


def mode_calibrations(fig: RunFigures, modes) -> dict:
    """{mode: Calibration} for each of ``modes``. Retention is the same requests in every mode, but
    only a late checkpoint shows what it costs: a mode without one takes another mode's measurement."""
    cals = {m: calibration(fig, m) for m in modes}
    measured = [c for c in cals.values() if any(n.startswith("retention:") for n in c.notes)]
    for c in cals.values():
        if measured and c not in measured:
            c.retention_request_s = measured[0].retention_request_s
            c.notes.append(f"retention: {c.retention_request_s * 1000:.2f} ms per request beyond the latency, "
                           f"measured in the other mode")
    return cals


def interference_share(fig: RunFigures, mode: str) -> float:
    """Interference per checkpoint over the background work it came with (the pipeline after the
    stall: the write, the copies, the manifests), both at the run's scale: a share that follows that
    work's length at any size. 0 without a baseline or a complete checkpoint of ``mode``."""
    lost = fig.interference_s.get(mode, 0.0)
    if not lost:
        return 0.0
    st = _Steps(fig, mode)
    if st.mode != mode:
        return 0.0
    background = st.mean(lambda recs: st.most(recs, "complete_s") - st.most(recs, "wait_s") - st.staging(recs))
    return lost / background if background and background > 0 else 0.0
