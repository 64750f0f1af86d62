"""Costs from a real emulation run: results.json -> per-byte and per-request costs.

:func:`read_results` is the only code that reads results.json (its docstring
lists every field used); everything else works on :class:`RunFigures`.

:func:`calibrate` turns the run's phase durations into the rates the config
would have needed to produce them, in the config's own units (a tier's
``write_gib_s`` under its ``shared_by``, see sharing.py), so the simulator
applies them exactly as it applies configured rates. Per-request costs are
the configured latencies (``latency_ms`` + half the ``jitter_ms``); what the
run measured beyond bytes and requests per checkpoint (collectives, manifests,
the host) is a fixed cost per checkpoint. Byte-proportional costs scale
linearly to full size; latencies and fixed costs do not. The notes say what
was measured, what it became, and how it was extrapolated.

Scale: a run at ``run.scale`` F moves F of the bytes, and its time follows the
bytes (steps last ``step_seconds`` x F; results.json's ``full_size`` figures
are measured / F). A rate is bytes over seconds *of the same run*, so it is the
full-size design's rate as it stands: the records' durations (at F) go with
the records' bytes (at F), never with the ``full_size`` figures. What a rate
gives for full-size bytes is then the run's ``full_size`` figure, except for
the requests' latency and the fixed cost, which do not shrink with F
(emulator/results/scale_notes.py) and so are counted once, not / F
(tests/test_simulate.py checks this against a real run). Only ``--as-run``
simulates at F, with the run's own step time.
"""
from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field

from emulator.config import from_mapping
from emulator.errors import ConfigError, UserError
from emulator.simulation.inputs import Calibration, retention_requests, tier_latency, tier_sharing
from emulator.simulation.sharing import bytes_sharing, rate_from
from emulator.units import GIB
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
    #: tier -> mean lag (snapshot to complete there, slowest node) at the run's scale (``levels``)
    level_lags_s: dict = field(default_factory=dict)
    #: failure class -> {"seconds_full_size", "served_by"} of its recovery (``recoveries``)
    recoveries: dict = field(default_factory=dict)
    #: tier -> {"seconds_mean": its own stage, "node_bytes"} at the run's scale (``levels``)
    level_stages: dict = field(default_factory=dict)
    #: tier -> {"seconds": a restore from it alone, slowest rank, "node_bytes"} (``restore_by_tier``)
    tier_restores: dict = field(default_factory=dict)


def read_results(path: str) -> RunFigures:
    """Read an emulation run's results.json (the one place that does).

    Fields used: ``config`` (the resolved run config: model, parallelism,
    run.scale, checkpoint.keep, drain.concurrency, tiers and their
    ``emulate``), ``nodes``, ``ranks``, ``modes.<mode>.training_wall_s``,
    ``.stall_total_s`` and ``.steps``, ``load.recovery_mean_s_by_tier``, and
    every ``per_rank[].records[]``'s ``mode``, ``step``, ``rank``, ``node``,
    ``stall_s``, ``wait_s``, ``snapshot_s``, ``local_write_s``, ``drain_s``,
    ``complete_s``, ``file_bytes``, ``written_to``, ``missed``,
    ``global_complete`` and ``error``; whether it has ``step_seconds`` (its step time followed
    the scale); with a baseline, ``baseline.step_wall_s`` and ``modes.<mode>.interference_ratio``. Durations are at the run's scale (``config.run.scale``), as its bytes are: the
    ``full_size`` figures are not read (see the module docstring). Modes without checkpoints
    (the baseline ``none``) have no records and calibrate nothing.
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
        records = [RunRecord(r["mode"], int(r["step"]), int(r["rank"]), int(r["node"]), float(r["stall_s"]),
                             float(r["wait_s"]), float(r["snapshot_s"]), float(r["local_write_s"]),
                             float(r["drain_s"]), float(r["complete_s"]), int(r["file_bytes"]),
                             str(r["written_to"]), bool(r["missed"]), bool(r["global_complete"]) and not r["error"])
                   for pr in raw["per_rank"] for r in pr["records"]]
        steps = {m: (float(v["training_wall_s"]), float(v["stall_total_s"]), int(v["steps"]))
                 for m, v in raw["modes"].items() if m != "none"}
        recovery = {str(k): float(v) for k, v in (raw["load"].get("recovery_mean_s_by_tier") or {}).items()}
        lags = {str(k): float(v["lag_mean_s"]) for k, v in (raw.get("levels") or {}).items()}
        recoveries = {str(x["class"]): {"seconds_full_size": float(x["seconds_full_size"]),
                                        "served_by": dict(x["served_by"])} for x in raw.get("recoveries") or []}
        stages = {str(k): {"seconds_mean": float(v["seconds_mean"]), "node_bytes": int(v["node_bytes"])}
                  for k, v in (raw.get("levels") or {}).items() if "seconds_mean" in v}
        restores = {str(k): {"seconds": float(v["seconds"]), "node_bytes": int(v["node_bytes"])}
                    for k, v in (raw.get("restore_by_tier") or {}).items() if v.get("ok") and "node_bytes" in v}
        return RunFigures(str(path), cfg, int(raw["nodes"]), int(raw["ranks"]), records, steps, recovery,
                          time_scaled="step_seconds" in raw, interference_s=_interference(raw, records),
                          level_lags_s=lags, recoveries=recoveries, level_stages=stages, tier_restores=restores)
    except ConfigError as exc:
        raise UserError(f"{where}: its config does not load: {exc}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UserError(f"{where}: not the results.json of a ckpt-emu run (missing or bad {exc})") from None


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


def interference_share(fig: RunFigures, mode: str) -> float:
    """Interference per checkpoint over the background work it came with (the pipeline after the
    stall: local write, drain, manifests), both at the run's scale: a share that follows that work's
    length at any size. 0 without a baseline or a complete checkpoint of ``mode``."""
    lost = fig.interference_s.get(mode, 0.0)
    if not lost:
        return 0.0
    st = _Steps(fig, mode)
    if st.mode != mode:
        return 0.0
    background = st.mean(lambda recs: _Steps.node_max(recs, "complete_s") - _Steps.node_max(recs, "wait_s")
                         - _Steps.staging(recs))
    return lost / background if background and background > 0 else 0.0


def check_same_preset(cfg, fig: RunFigures) -> None:
    """A calibration only transfers between runs of the same model (its bytes per rank)."""
    mine, theirs = cfg.model, fig.config.model
    if mine != theirs:
        diff = [k for k in vars(mine) if getattr(mine, k) != getattr(theirs, k)]
        raise UserError(f"--calibrate {fig.source}: made with preset {theirs.name!r}, this config is "
                        f"{mine.name!r} (model.{', model.'.join(diff)} differ); calibrate with a run of the "
                        f"same model")


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
        self.per_node = max(1, fig.ranks // max(1, fig.nodes))

    @staticmethod
    def staging(recs) -> float:
        """The job's stall before the pipeline: async, the stall less any wait; sync, the snapshot."""
        if recs[0].mode == "async":
            return max(r.stall_s - r.wait_s for r in recs)
        return max(r.snapshot_s for r in recs)

    @staticmethod
    def missed(recs) -> bool:
        return any(r.missed for r in recs)

    def mean(self, fn, recs_filter=None) -> float | None:
        vals = [fn(recs) for recs in self.steps if recs_filter is None or recs_filter(recs)]
        return sum(vals) / len(vals) if vals else None

    @staticmethod
    def node_max(recs, attr: str) -> float:
        return max(getattr(r, attr) for r in recs)

    @staticmethod
    def node_bytes(recs) -> int:
        by_node = defaultdict(int)
        for r in recs:
            by_node[r.node] += r.file_bytes
        return max(by_node.values())


def _gib(bps: float | None) -> str:
    return "not paced" if bps is None else f"{bps / GIB:.4g} GiB/s"


def _configured(tier_cfg, direction: str) -> float | None:
    e = tier_cfg.emulate if tier_cfg is not None else None
    v = getattr(e, f"{direction}_gib_s", None) if e is not None else None
    return None if v is None else v * GIB


def _design_rate(tier_cfg, direction: str) -> tuple:
    """What a tier's config says of one direction's rate: (GiB/s or None, shared_by)."""
    e = tier_cfg.emulate if tier_cfg is not None else None
    return (getattr(e, f"{direction}_gib_s", None) if e is not None else None), tier_sharing(tier_cfg)


def _another_design(mine, tier_cfg, direction: str) -> bool:
    """Whether the simulated config names a rate of its own for this tier and direction (its config,
    ``--set`` or ``design:``) that the calibrating run did not have: then the design's rate is simulated,
    and the run's measurement of its own rate is not."""
    wanted = _design_rate(mine, direction)
    return wanted[0] is not None and wanted != _design_rate(tier_cfg, direction)


def _rate(cal: Calibration, name: str, seconds: float | None, requests_s: float, shared: float,
          tier_cfg, direction: str, what: str, mine=None) -> float | None:
    """Invert one measured phase into a config-unit rate, and say so in a note. Where the simulated
    config's tier (``mine``) names another rate than the run's, that design rate stands."""
    if seconds is None:
        return None
    if _another_design(mine, tier_cfg, direction):
        rate, sb = _design_rate(mine, direction)
        cal.notes.append(f"{what}: the design's {rate:g} GiB/s ({sb}-shared) is simulated, not the run's "
                         f"measurement of its {_gib(_configured(tier_cfg, direction))} "
                         f"({tier_sharing(tier_cfg)}-shared): the calibration supplies host costs, the "
                         f"design its rates")
        return None
    rate = rate_from(seconds - requests_s, shared)
    if rate is None:
        cal.notes.append(f"{what}: {seconds * 1000:.1f} ms measured is no more than its requests "
                         f"({requests_s * 1000:.1f} ms): not calibrated, the config's rate is used")
        return None
    cal.notes.append(f"{what}: {seconds * 1000:.1f} ms measured ({requests_s * 1000:.1f} ms of it requests) for "
                     f"{shared / 2 ** 20:.2f} MiB per {tier_sharing(tier_cfg)}-shared bucket -> {_gib(rate)} "
                     f"(configured: {_gib(_configured(tier_cfg, direction))})")
    setattr(cal, name, rate)
    return rate


def _phase_rates(cal: Calibration, run, st: _Steps, sizes: dict, recovery: dict, mine) -> None:
    """The run's phases as rates; ``mine``: the simulated config's tiers (its design rates stand)."""
    t = run.tiers
    files, conc = st.per_node, run.drain.concurrency
    kw = dict(file_bytes=sizes["file"], node_bytes=sizes["node"], job_bytes=sizes["job"], files=files)
    if t.local is not None:
        lw = st.mean(lambda recs: _Steps.node_max(recs, "local_write_s"),
                     lambda recs: all(r.written_to == "local" for r in recs))
        _rate(cal, "local_write_bps", lw, tier_latency(t.local),
              bytes_sharing(tier_sharing(t.local), kind="write", **kw), t.local, "write", "local write", mine.local)
        waves = math.ceil(files / conc)
        dr = st.mean(lambda recs: _Steps.node_max(recs, "drain_s"),
                     lambda recs: all(r.written_to == "local" for r in recs))
        _rate(cal, "drain_bps", dr, 2 * waves * tier_latency(t.global_),
              bytes_sharing(tier_sharing(t.global_), kind="drain", concurrency=conc, **kw), t.global_, "write",
              "drain", mine.global_)
    else:
        gw = st.mean(lambda recs: _Steps.node_max(recs, "local_write_s"))
        _rate(cal, "global_write_bps", gw, tier_latency(t.global_),
              bytes_sharing(tier_sharing(t.global_), kind="write", **kw), t.global_, "write", "global write",
              mine.global_)
    for tier, name in (("local", "local_read_bps"), ("global", "global_read_bps")):
        tier_cfg = t.local if tier == "local" else t.global_
        if tier in recovery and tier_cfg is not None:
            _rate(cal, name, recovery[tier], 2 * tier_latency(tier_cfg),
                  bytes_sharing(tier_sharing(tier_cfg), kind="read", **kw), tier_cfg, "read", f"{tier} restore",
                  mine.local if tier == "local" else mine.global_)


def _coordination(cal: Calibration, run, st: _Steps, fig: RunFigures) -> None:
    """What a checkpoint took beyond its staging, transfers and manifests (collectives, the host), and
    how long the retention that a late checkpoint's pipeline waits for really took."""
    lat = (tier_latency(run.tiers.local) if run.tiers.local is not None else 0.0) + tier_latency(run.tiers.global_)

    def residual(recs) -> float:
        m = lambda a: _Steps.node_max(recs, a)  # noqa: E731
        return m("complete_s") - m("wait_s") - _Steps.staging(recs) - m("local_write_s") - m("drain_s") - lat
    res = max(0.0, st.mean(residual, lambda recs: not _Steps.missed(recs)) or 0.0)
    cal.coord_pre_s = cal.coord_post_s = res / 2
    cal.notes.append(f"coordination: {res * 1000:.1f} ms per checkpoint beyond transfers and requests "
                     f"(barrier, gathers, manifests' bytes); a fixed cost, not scaled")
    late = st.mean(residual, _Steps.missed)
    if late is None:
        return
    g_req, l_req = retention_requests(run, st.per_node, fig.ranks, run.tiers.local is not None)
    modeled = g_req * tier_latency(run.tiers.global_) + l_req * (tier_latency(run.tiers.local) if l_req else 0.0)
    extra = max(0.0, late - res - modeled)
    cal.retention_request_s = extra / max(1, g_req + l_req)
    cal.retention_measured = True
    cal.notes.append(f"retention: late checkpoints waited {(late - res) * 1000:.1f} ms for the previous one's "
                     f"({g_req + l_req} requests, {modeled * 1000:.1f} ms of configured latency): "
                     f"{cal.retention_request_s * 1000:.2f} ms more per request, applied per request")


def calibrate(cfg, fig: RunFigures, mode: str | None = None) -> Calibration:
    """Costs for simulating ``cfg`` from the run ``fig`` (same model, any tiers); with ``mode``, from
    that mode's checkpoints only when the run has some (each mode's own host behaviour)."""
    check_same_preset(cfg, fig)
    run = fig.config
    st = _Steps(fig, mode)
    cal = Calibration(scale=run.run.scale, nodes=fig.nodes)
    first = {}
    for recs in st.steps:
        for r in recs:
            first.setdefault(r.rank, r.file_bytes)
    cal.rank_file_bytes = [first[r] for r in sorted(first)] if len(first) == fig.ranks else None
    files = list(first.values())
    sizes = {"file": max(files), "node": st.node_bytes(st.steps[0]), "job": sum(files)}
    cal.notes.append(f"calibrated by {fig.source} ({st.mode or 'all'} checkpoints: {len(st.steps)}): "
                     f"{fig.ranks} ranks on {fig.nodes} node(s) at run.scale {run.run.scale:g}, "
                     f"{sizes['node'] / 2 ** 20:.2f} MiB per node per checkpoint; rates are its bytes over its "
                     f"seconds, so byte-proportional costs scale linearly with the bytes simulated (at full size "
                     f"the run's durations / {run.run.scale:g}), requests and per-checkpoint costs do not")
    if not fig.time_scaled:
        cal.notes.append("the run predates time following run.scale (no step_seconds in its results.json): "
                         "its rates hold, its step time is its own (only --as-run uses it)")
    stage = st.mean(_Steps.staging)
    if stage and stage > 0:
        cal.snapshot_bps = sizes["file"] / stage
        cal.notes.append(f"staging (the stall before the pipeline): {stage * 1000:.2f} ms for the largest rank's "
                         f"{sizes['file'] / 2 ** 20:.2f} MiB -> {_gib(cal.snapshot_bps)} per rank")
    _phase_rates(cal, run, st, sizes, fig.recovery_s, cfg.tiers)
    _coordination(cal, run, st, fig)
    for m, (wall, stall, steps) in fig.mode_steps.items():
        if steps:
            cal.step_s[m] = max(0.0, (wall - stall) / steps)
    return cal


def load_calibration(cfg, path: str, modes=("sync", "async")) -> dict:
    """{mode: Calibration} for each of ``modes`` from one results.json.

    Retention is the same requests in every mode, but only a late checkpoint shows what it
    costs: a mode without one takes the other mode's measurement."""
    fig = read_results(path)
    cals = {m: calibrate(cfg, fig, m) for m in modes}
    measured = [c for c in cals.values() if c.retention_measured]
    for c in cals.values():
        if measured and not c.retention_measured:
            c.retention_request_s = measured[0].retention_request_s
            c.notes.append(f"retention: {c.retention_request_s * 1000:.2f} ms per request beyond the latency, "
                           f"measured in the other mode")
    return cals
