"""Validated run configuration: the ``Config`` of its sections, and the checks that span sections.

Each section is a frozen dataclass that checks its own values (job.py: model, parallelism, training;
sections.py: checkpoint, state, drain, run, metrics, cost, limits; tiers.py: the tiers); ``Config``
checks what needs several (tier intervals against the checkpoint's, failures against the ranks), so an
invalid Config cannot exist. ``from_mapping`` builds one from YAML's mapping (loading.py reads presets,
files, ``extends`` and ``--set``); unknown keys, wrong types and impossible values raise ``ConfigError``
naming the dotted key.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Optional

from emulator.config.design import DesignSpec, parse_design
from emulator.config.failures import FailuresConfig
from emulator.config.job import ModelConfig, ParallelismConfig, TrainingConfig
from emulator.config.mapping import CUSTOM, apply_override, build, check as _check, to_plain
from emulator.config.sections import (MIN_RANKS_PER_HOST, CheckpointConfig, CostConfig, Dilation, DrainConfig,
                                      LimitsConfig, MetricsConfig, RunConfig, StateConfig)
from emulator.config.tiers import EmulateConfig, PeerConfig, TierConfig, TiersConfig
from emulator.errors import ConfigError, UserError
from emulator.sizing import replicated

__all__ = ["CheckpointConfig", "Config", "CostConfig", "Dilation", "DrainConfig", "EmulateConfig", "FailuresConfig",
           "LimitsConfig", "MIN_RANKS_PER_HOST", "MetricsConfig", "ModelConfig", "ParallelismConfig", "PeerConfig",
           "RunConfig", "StateConfig", "TierConfig", "TiersConfig", "TrainingConfig", "check_explicit_dp",
           "from_mapping"]


def _check_limits(cfg) -> None:
    """The ``limits:`` caps that the config alone decides (ranks per host needs the host: launch)."""
    lim = cfg.limits
    _check(cfg.run.threads_per_rank <= lim.threads_per_rank, "run.threads_per_rank",
           f"{cfg.run.threads_per_rank} is more than limits.threads_per_rank ({lim.threads_per_rank}); "
           "raise the limit to run it anyway")
    for key in ("saves", "loads"):
        value = getattr(cfg.checkpoint, key)
        _check(value <= lim.checkpoints, f"checkpoint.{key}", f"{value:,} is more than limits.checkpoints "
               f"({lim.checkpoints:,}): a run that would go on for days; raise the limit to run it anyway")
    _check(cfg.steps_per_mode <= lim.steps, "training.steps" if cfg.training.steps is not None else "checkpoint.saves",
           f"{cfg.steps_per_mode:,} steps a mode, more than limits.steps ({lim.steps:,}); raise the limit to run "
           "them anyway")
    for name in cfg.tiers.configured():
        emulate = getattr(cfg.tiers.entry(name), "emulate", None)
        for key in ("latency_ms", "jitter_ms"):
            value = getattr(emulate, key, 0.0) or 0.0
            _check(value <= lim.latency_ms, f"tiers.{name}.emulate.{key}",
                   f"{value:g} ms per request is more than limits.latency_ms ({lim.latency_ms:g}); "
                   "raise the limit to run it anyway")


def _check_tiers(cfg) -> None:
    """Tier intervals are multiples of the base interval, a peer copies the memory tier's checkpoints."""
    tiers, base = cfg.tiers, cfg.checkpoint.interval_steps
    for name in tiers.configured():
        interval = tiers.entry(name).interval_steps
        _check(interval is None or interval % base == 0, f"tiers.{name}.interval_steps",
               f"{interval} is not a multiple of checkpoint.interval_steps ({base}): a tier takes every N-th checkpoint")
    if tiers.peer is not None:
        _check(tiers.memory is not None, "tiers.peer", "needs tiers.memory: a peer holds copies of the memory tier")
        _check((tiers.peer.interval_steps or base) % (tiers.memory.interval_steps or base) == 0,
               "tiers.peer.interval_steps", f"must be a multiple of tiers.memory.interval_steps "
               f"({tiers.memory.interval_steps or base}): a peer is sent the memory tier's checkpoints")
        nodes = cfg.design.job_nodes(cfg.parallelism.world_size) if cfg.design is not None else None
        _check(nodes is None or tiers.peer.replicas < nodes, "tiers.peer.replicas",
               f"{tiers.peer.replicas} replicas need more than the design's {nodes} node(s)")
    if tiers.memory is not None:
        _check(tiers.memory.backend == "dir", "tiers.memory.backend",
               "must be dir (a folder in host memory, such as /dev/shm)")
    intervals = [tiers.entry(n).interval_steps or base for n in tiers.configured()]
    _check(min(intervals) == base, "checkpoint.interval_steps",
           f"{base}, but no tier takes every checkpoint (the nearest tier's interval is {min(intervals)}); "
           "set it to the smallest tier interval")


def _check_failures(cfg) -> None:
    """The ``failures:`` checks that need the rest of the config (ranks, tiers)."""
    ranks, failures = cfg.parallelism.active_ranks, cfg.failures
    for i, k in enumerate(failures.kill):
        _check(k.rank < ranks, f"failures.kill[{i}].rank", f"rank {k.rank} does not exist (the run has {ranks} ranks)")
        _check(k.phase != "drain" or cfg.tiers.local is not None, f"failures.kill[{i}].phase",
               "'drain' needs tiers.local (a run without a local tier has no drain)")
    if failures.corrupt is not None:
        c = failures.corrupt
        _check(c.rank < ranks, "failures.corrupt.rank", f"rank {c.rank} does not exist (the run has {ranks} ranks)")
        _check(c.tier != "local" or cfg.tiers.local is not None, "failures.corrupt.tier",
               "'local' but tiers.local is not configured")


@dataclass(frozen=True)
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    parallelism: ParallelismConfig = field(default_factory=ParallelismConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    state: StateConfig = field(default_factory=StateConfig)
    drain: DrainConfig = field(default_factory=DrainConfig)
    tiers: TiersConfig = field(default_factory=TiersConfig)
    run: RunConfig = field(default_factory=RunConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    failures: FailuresConfig = field(default_factory=FailuresConfig)
    #: the global tier's price table (requests, storage, transfer out)
    cost: CostConfig = field(default_factory=CostConfig)
    #: the storage design in an architect's terms (emulator/config/design.py); sets the tiers' emulation
    design: Optional[DesignSpec] = None
    #: caps checked before any work, each raised explicitly to go past it
    limits: LimitsConfig = field(default_factory=LimitsConfig)

    def __post_init__(self):
        _check_limits(self)
        _check_tiers(self)
        _check_failures(self)
        _check(self.checkpoint.protocol != "mlperf" or self.run.dilation.factor in (None, 1.0), "run.dilation",
               "MLPerf's protocol measures the storage as it is: no time dilation (use 1 or auto)")
        par = self.parallelism
        _check(self.checkpoint.restore_readers == "all" or replicated(par),
               "checkpoint.restore_readers", f"one_per_dp_group needs data-parallel replicas that hold the same "
               f"state (parallelism.zero_stage 0, or a shard_group below dp, with writers one_replica); "
               f"ZeRO-{par.zero_stage} shards it across DP ranks")
        _check(self.checkpoint.protocol != "mlperf" or (par.writers == "one_replica" and par.shard_group is None),
               "parallelism", "checkpoint.protocol mlperf writes DLIO's files: one replica writes, no shard_group")
        if self.checkpoint.engine == "dcp":
            _check_dcp(self)

    @property
    def time_factor(self) -> float:
        """Wall seconds here per second of the full-size design: run.scale x the dilation (1 while
        ``auto`` is not yet resolved by a run's probe)."""
        return self.run.scale * (self.run.dilation.factor or 1.0)

    @property
    def wall_step_seconds(self) -> float:
        """What a run really waits per step: the full-size step time x the time factor."""
        return self.training.step_seconds * self.time_factor

    @property
    def run_modes(self) -> tuple:
        """The modes a run goes through, in order: the no-checkpoint baseline first if enabled."""
        return (("none",) if self.checkpoint.baseline else ()) + tuple(self.checkpoint.modes)

    @property
    def tier_every(self) -> dict:
        """{tier: N}: each configured tier takes every N-th checkpoint (its interval over the base)."""
        base = self.checkpoint.interval_steps
        return {n: (self.tiers.entry(n).interval_steps or base) // base for n in self.tiers.configured()}

    def wall_seconds(self, scale: float, factor: float, stall_s: float = 0.0) -> float:
        """How long a run's training takes here at ``scale`` and dilation ``factor``: its modes' steps and
        ``stall_s`` (its sync checkpoints' stalls, where known), at full size, x scale x factor (what
        run.wall_limit refuses and run.wall_target fits)."""
        return (self.steps_per_mode * self.training.step_seconds * len(self.run_modes) + stall_s) * scale * factor

    def check_wall(self, factor: float, why: str = "", duration: float | None = None,
                   advice: str | None = None, stall_s: float = 0.0) -> None:
        """Refuse a dilation ``factor`` that makes the run longer here than ``run.wall_limit``
        (:meth:`wall_seconds`; a soak's ``duration`` is its own limit); ``advice``: what helps (the
        probe's, where it knows which scale would fit; else the scale that fits at this factor)."""
        if duration is not None:
            return
        wall = self.wall_seconds(self.run.scale, factor, stall_s)
        if wall > self.run.wall_limit_s:
            fits = self.run.scale * self.run.wall_limit_s / wall
            advice = advice or (f"lower run.scale (--scale) to {float(f'{fits:.2g}'):g}, set run.wall_target (the "
                                "run then picks the scale that fits it) or raise run.wall_limit")
            raise UserError(f"run.dilation: x{factor:g}{why} makes this run take about {wall / 60:,.1f} min here, "
                            f"over run.wall_limit ({self.run.wall_limit}): {advice}")

    @property
    def steps_per_mode(self) -> int:
        if self.training.steps is not None:
            return self.training.steps
        return self.checkpoint.interval_steps * self.checkpoint.saves

    def to_dict(self) -> dict:
        return to_plain(self)

    def with_overrides(self, *assignments: str) -> "Config":
        """A new, validated config: this one with ``a.b=c`` overrides applied (this one is frozen)."""
        data = self.to_dict()
        for assignment in assignments:
            data = apply_override(data, assignment)
        return from_mapping(data)


# --------------------------------------------------------------------------- loading

def from_mapping(data: dict) -> Config:
    if not isinstance(data, dict):
        raise ConfigError("config: the top level must be a mapping of sections")
    cfg = build(Config, _job_dp_filled(data), "")
    if cfg.design is not None:
        _check_described_once(cfg)
        _check_job_filled(cfg)
    return _engine_layout(cfg)


def _engine_layout(cfg: Config) -> Config:
    """Balanced writers write what the engine writes: DCP's planner keeps each tensor whole."""
    whole = cfg.checkpoint.engine == "dcp"
    if cfg.parallelism.whole_tensors == whole:
        return cfg
    return replace(cfg, parallelism=replace(cfg.parallelism, whole_tensors=whole))


CUSTOM[DesignSpec] = (parse_design, lambda d: d.text)


def _check_described_once(cfg: Config) -> None:
    """A tier is described by the design or by its emulate: knobs, not both; a design's part needs its tier."""
    d = cfg.design
    for name, part in (("memory", d.memory), ("local", d.local), ("global", d.global_)):
        if part is None:
            continue
        section = "design.global" if name == "global" else f"design.node.{name}"
        tier = cfg.tiers.entry(name)
        if tier is None:
            raise ConfigError(f"{section}: the config has no tiers.{name} to emulate it on")
        if tier.emulate is not None and (tier.emulate.write_gib_s or tier.emulate.read_gib_s):
            raise ConfigError(f"tiers.{name}.emulate: its rates are set by {section}; keep one of the two")


def _check_dcp(cfg) -> None:
    """What ``checkpoint.engine: dcp`` does not do (docs/checkpoints.md#engines-how-the-ranks-write)."""
    _check(cfg.parallelism.writers != "every_replica", "parallelism.writers",
           "every_replica with checkpoint.engine dcp: DCP deduplicates what replicas hold; use balanced")
    _check(cfg.checkpoint.restore_readers == "all", "checkpoint.restore_readers",
           "one_per_dp_group with checkpoint.engine dcp: DCP loads what each rank holds; use all")
    _check(cfg.tiers.peer is None, "tiers.peer", "peer copies with checkpoint.engine dcp are not modelled: "
           "drop tiers.peer or use engine torch_save")


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _job_dp_filled(data: dict) -> dict:
    """With ``design.job.nodes`` the job's data parallelism is what its GPUs give, world / (tp x pp): set
    in the mapping before any section checks it, so a layout valid for the job's DP (an HSDP shard group)
    is checked against that DP, not the preset's. A mapping whose job does not fill a layout is left as
    it is: :func:`_check_job_filled` says why."""
    design, par = data.get("design"), data.get("parallelism") or {}
    job = design.get("job") if isinstance(design, dict) else None
    if not isinstance(job, dict) or not isinstance(par, dict):
        return data
    nodes, per_node, tp, pp = (job.get("nodes"), job.get("accelerators_per_node", 8), par.get("tp", 1),
                               par.get("pp", 1))
    if not all(_whole(v) for v in (nodes, per_node, tp, pp)) or (nodes * per_node) % (tp * pp):
        return data
    data = copy.deepcopy(data)
    data["parallelism"] = {**par, "dp": nodes * per_node // (tp * pp)}
    return data


def _check_job_filled(cfg: Config) -> None:
    d, p = cfg.design, cfg.parallelism
    if d.nodes is not None and (d.nodes * d.accelerators_per_node) % (p.tp * p.pp):
        raise ConfigError(f"design.job.nodes: {d.nodes:,} nodes x {d.accelerators_per_node} accelerators = "
                          f"{d.nodes * d.accelerators_per_node:,} ranks is not a multiple of tp x pp = "
                          f"{p.tp * p.pp} (parallelism.tp, parallelism.pp): no layout fills the job")


def check_explicit_dp(cfg: Config, given_dp) -> None:
    """A ``parallelism.dp`` the user wrote (their file or --set) must be the one the design's job gives."""
    if given_dp is None or cfg.design is None or cfg.design.nodes is None or given_dp == cfg.parallelism.dp:
        return
    d, p = cfg.design, cfg.parallelism
    raise ConfigError(f"parallelism.dp: {given_dp} does not fill the design's job: {d.nodes:,} nodes x "
                      f"{d.accelerators_per_node} accelerators = {d.nodes * d.accelerators_per_node:,} ranks "
                      f"= tp {p.tp} x pp {p.pp} x dp {p.dp}; drop parallelism.dp (it follows from the job) "
                      "or change design.job.nodes")
