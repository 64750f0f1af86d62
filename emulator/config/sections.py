"""The run's sections of a config: checkpoints, the synthetic state, the drain, the run itself, metrics, the
price table and the limits.

Each dataclass checks its own values in ``__post_init__`` (emulator/config/schema.py assembles them).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from emulator.config.mapping import CUSTOM, check as _check
from emulator.errors import ConfigError, UserError
from emulator.units import parse_duration
from tiers.safepath import path_problem


#: how the ranks write a checkpoint (checkpoint.engine)
ENGINES = ("torch_save", "dcp")


@dataclass(frozen=True)
class CheckpointConfig:
    interval_steps: int = 5
    saves: int = 10
    loads: int = 10
    modes: tuple = ("sync", "async")
    #: complete checkpoints kept per tier (retention)
    keep: int = 2
    #: torch.save's own zip CRC32 (the CPU cost of torch.save); our manifest has CRC32C anyway
    torch_crc32: bool = False
    #: drop cached pages before each load, so loads hit the storage (``page_cache_scope`` says which)
    drop_page_cache: bool = True
    #: "files": only the checkpoint files' own pages (posix_fadvise, no root needed; other jobs' cache
    #: stays); "host": the whole host's page cache (root only; evicts every other job's cache too)
    page_cache_scope: str = "files"
    #: a rank whose local write fails with ENOSPC writes its file straight to the global
    #: tier ("global") or the checkpoint is skipped ("skip"); counted as local_full either way
    on_local_full: str = "global"
    #: run the same steps without checkpoints first (mode "none"): the baseline that slowdown,
    #: interference and goodput are measured against
    baseline: bool = True
    #: "emulator" (training with sync/async checkpoints) or "mlperf" (MLPerf Storage's
    #: checkpointing workload: `saves` writes, then `loads` rank-shifted reads; docs/mlperf.md)
    protocol: str = "emulator"
    #: mlperf only: "both", or "write"/"read" as separate runs (reads within 30 s of the writes)
    phase: str = "both"
    #: how the ranks write a checkpoint: "torch_save" (one torch.save file per rank, MLPerf Storage's
    #: and DLIO's pattern) or "dcp" (PyTorch's torch.distributed.checkpoint: .distcp files and
    #: .metadata through its planner, async_save in async mode; docs/checkpoints.md)
    engine: str = "torch_save"
    #: what the next async checkpoint waits for of the previous one: "complete" (its drain and
    #: global commit too) or "local_write" (its file written; its drain may run on, sharing the
    #: local device with the next write)
    async_waits_for: str = "complete"
    #: who reads a restore's files: "all" (every rank reads its file: a restart's read storm) or
    #: "one_per_dp_group" (one rank of each data-parallel group reads, then broadcasts the bytes over
    #: gloo to the group; needs replicated DP ranks: parallelism.zero_stage 0, or a shard_group below
    #: dp; docs/checkpoints.md)
    restore_readers: str = "all"
    #: a read of one checkpoint file (a restore, the drain's read-back) not done after this many seconds
    #: is given up: the restore falls back to the next tier, the drain tries again (docs/security.md)
    read_timeout_s: float = 1800.0

    def __post_init__(self):
        _check(self.interval_steps >= 1, "interval_steps", "must be >= 1")
        _check(0 < self.read_timeout_s <= 7 * 86400, "read_timeout_s",
               f"must be more than 0 and at most a week (604800 s), got {self.read_timeout_s!r}")
        _check(self.saves >= 0, "saves", "must be >= 0")
        _check(self.loads >= 0, "loads", "must be >= 0")
        _check(self.keep >= 1, "keep", "must be >= 1")
        _check(len(self.modes) >= 1, "modes", "must name at least one mode")
        for m in self.modes:
            _check(m in ("sync", "async"), "modes", f"unknown mode {m!r} (use sync, async)")
        _check(len(set(self.modes)) == len(self.modes), "modes", "lists a mode twice")
        _check(self.on_local_full in ("global", "skip"), "on_local_full", "must be 'global' or 'skip'")
        _check(self.protocol in ("emulator", "mlperf"), "protocol", "must be 'emulator' or 'mlperf'")
        _check(self.engine in ENGINES, "engine", f"must be {' or '.join(ENGINES)}, got {self.engine!r}")
        _check(self.engine == "torch_save" or self.protocol != "mlperf", "engine",
               "checkpoint.protocol mlperf writes DLIO's torch.save files: use engine torch_save")
        _check(self.async_waits_for in ("complete", "local_write"), "async_waits_for",
               "must be 'complete' or 'local_write'")
        _check(self.phase in ("both", "write", "read"), "phase", "must be 'both', 'write' or 'read'")
        _check(self.restore_readers in ("all", "one_per_dp_group"), "restore_readers",
               "must be 'all' or 'one_per_dp_group'")
        _check(self.page_cache_scope in ("files", "host"), "page_cache_scope",
               "must be 'files' (the checkpoint files' pages) or 'host' (the whole host's page cache, root only)")
        _check(self.phase == "both" or self.protocol == "mlperf", "phase",
               "write and read phases exist only with checkpoint.protocol: mlperf")
        if self.protocol == "mlperf":
            _check(self.saves >= 1 or self.phase == "read", "saves", "the mlperf write phase needs saves >= 1")
            _check(self.loads >= 1 or self.phase == "write", "loads", "the mlperf read phase needs loads >= 1")
            _check(self.phase != "both" or self.loads <= self.saves, "loads",
                   f"{self.loads} reads but only {self.saves} checkpoints written (each read reads one)")


@dataclass(frozen=True)
class StateConfig:
    """What the synthetic state's bytes look like (emulator/workload/content.py)."""

    #: logical bytes per distinct 4 KiB block; 1: every block unique (a real optimizer state)
    dedup_ratio: float = 1.0
    #: bytes per zlib-compressed byte; 1: incompressible (a real optimizer state)
    compress_ratio: float = 1.0
    #: where a rank's live state lives: "auto" (a GPU when torch has CUDA, else the CPU),
    #: "cpu", or "cuda" (refused at preflight where there is no CUDA device)
    device: str = "auto"
    #: pinned host memory a rank may use for staging, in GiB (None: the state's size);
    #: a smaller budget stages through pinned buckets of that size (emulator/workload/staging.py)
    pinned_budget_gib: Optional[float] = None

    def __post_init__(self):
        _check(1 <= self.dedup_ratio <= 1024, "dedup_ratio", "must be between 1 (unique) and 1024")
        _check(1 <= self.compress_ratio <= 512, "compress_ratio", "must be between 1 (incompressible) and 512")
        _check(self.device in ("auto", "cpu", "cuda"), "device", "must be auto, cpu or cuda")
        if self.pinned_budget_gib is not None:
            _check(2 / 1024 <= self.pinned_budget_gib <= 65536, "pinned_budget_gib",
                   "must be >= 0.002 GiB (two 1 MiB bucket slots), or null for the state's size")


@dataclass(frozen=True)
class DrainConfig:
    #: files copied at once by a node's drainer
    concurrency: int = 4
    #: how the global copy is verified before the manifest is written: "checksum" reads its bytes
    #: back and compares their CRC32C with the local write's; "size" (cheaper) compares only the size
    verify: str = "checksum"
    #: extra attempts per file (and per global manifest) after a transient global-tier error
    retries: int = 3
    #: first backoff; doubles per attempt, with jitter (0.5-1x)
    retry_backoff_s: float = 1.0
    #: a checkpoint that could not reach the global tier: "continue" training, "fail" the run
    #: (one-line error, exit 2), or "auto" (fail in sync mode, continue in async mode)
    on_failure: str = "auto"

    def __post_init__(self):
        _check(1 <= self.concurrency <= 256, "concurrency", "must be between 1 and 256")
        _check(self.verify in ("size", "checksum"), "verify", "must be 'size' or 'checksum'")
        _check(0 <= self.retries <= 100, "retries", "must be between 0 and 100")
        _check(0 <= self.retry_backoff_s <= 600, "retry_backoff_s", "must be between 0 and 600 seconds")
        _check(self.on_failure in ("auto", "continue", "fail"), "on_failure", "must be auto, continue or fail")


@dataclass(frozen=True)
class Dilation:
    """Time dilation (docs/time-dilation.md): ``factor`` D >= 1, or None for ``auto`` (a probe at the
    start of a run picks the smallest D at which this host keeps every phase at its design rate)."""

    factor: Optional[float] = None

    @property
    def auto(self) -> bool:
        return self.factor is None


def _build_dilation(value, key: str) -> Dilation:
    if value == {} or value == "auto":
        return Dilation()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 1 <= value < float("inf"):
        raise ConfigError(f"{key}: must be auto or a factor >= 1 (1: no dilation), got {value!r}")
    return Dilation(float(value))


CUSTOM[Dilation] = (_build_dilation, lambda d: "auto" if d.factor is None else d.factor)


@dataclass(frozen=True)
class RunConfig:
    #: shrink every tensor by this factor so a preset fits the machine (0 < scale <= 1)
    scale: float = 1.0
    #: results folder (results.json, report, timeline)
    out: str = "./ckpt-emu-data/results"
    #: seed of the synthetic state's random content
    seed: int = 0
    #: CPU threads per rank for torch (1 keeps 8 ranks on 2 cores from thrashing)
    threads_per_rank: int = 1
    #: time dilation: every device the design describes runs at its rate / D and the run waits D x
    #: longer for everything paced, so a host with 1/D of the design's speed keeps up; "auto": a
    #: probe at start picks D; every figure is reported in the design's time (docs/time-dilation.md)
    dilation: Dilation = field(default_factory=Dilation)
    #: the longest a run may take here (its full-size time x scale x dilation): a longer one is refused
    wall_limit: str = "1h"
    #: the time a run's training should take here (90s, 3m): where the dilation this host needs at
    #: run.scale would make it longer, the run goes at the largest smaller scale that fits (its probe
    #: decides, emulator/rank/dilation.py ``fit_scale``); null: run.scale as given
    wall_target: Optional[str] = None
    #: a run (or tune) whose design missed its goals exits 1 instead of 0 (--fail-on-miss): deadline
    #: misses, incomplete checkpoints, a failed load or recovery, tune's confirmation run
    fail_on_miss: bool = False
    #: keep the checkpoints in tiers that live in host memory (tmpfs, ramfs: the default's /dev/shm
    #: tiers, a memory tier) after a run that finished; false: emptied, their memory given back
    keep_tiers: bool = False
    #: draw timeline.png when the run ends (about a second of one core); false: results.json and
    #: report.txt alone, for sweeps and scripts that read results.json
    timeline: bool = True

    def __post_init__(self):
        _check(0 < self.scale <= 1, "scale", f"must be in (0, 1], got {self.scale}")
        _check(self.threads_per_rank >= 1, "threads_per_rank", "must be >= 1")
        problem = path_problem(self.out)
        _check(problem is None, "out", f"{problem}")
        try:
            parse_duration(self.wall_limit, "wall_limit")
            if self.wall_target is not None:
                parse_duration(self.wall_target, "wall_target")
        except UserError as exc:
            raise ConfigError(str(exc)) from None

    @property
    def wall_limit_s(self) -> float:
        return parse_duration(self.wall_limit, "run.wall_limit")

    @property
    def wall_target_s(self) -> float | None:
        return None if self.wall_target is None else parse_duration(self.wall_target, "run.wall_target")


@dataclass(frozen=True)
class MetricsConfig:
    #: Prometheus scrape port for this node (None: no endpoint); node N serves port + N
    port: Optional[int] = None
    addr: str = "127.0.0.1"
    #: after the run, the node leader serves on until a scrape begun after the run's final values
    #: has been answered, or this many seconds (0: exit at once): Prometheus scrapes every 15 s
    final_scrape_timeout_s: float = 30.0

    def __post_init__(self):
        if self.port is not None:
            _check(0 < self.port < 65536, "port", "must be a TCP port (1-65535)")
        _check(0 <= self.final_scrape_timeout_s < float("inf"), "final_scrape_timeout_s",
               f"must be 0 or more seconds, got {self.final_scrape_timeout_s!r}")


@dataclass(frozen=True)
class CostConfig:
    """What the global tier charges: the price table behind the cost figures of the report,
    ``tune`` and ``simulate`` (emulator/simulation/s3cost.py; docs/s3-requests.md works an example).

    The defaults are AWS S3 Standard in us-east-1 from its public price list as of 2025;
    override any of them for another store or region (``--set cost.get_per_1000=0``)."""

    #: where the prices come from, printed with every cost figure
    price_list: str = "AWS S3 Standard, us-east-1, public price list as of 2025"
    #: USD per 1,000 PUT-class requests (PUT, COPY, POST, LIST; each multipart request is one)
    put_per_1000: float = 0.005
    #: USD per 1,000 GET-class requests (GET, SELECT, HEAD and all other requests but DELETE)
    get_per_1000: float = 0.0004
    #: USD per GB-month stored (AWS's first 50 TB; a GB is 2^30 bytes, a month 730 hours)
    gb_month: float = 0.023
    #: USD per GB a restore reads out (AWS to the internet, first 10 TB; 0 within the region)
    transfer_out_per_gb: float = 0.09
    #: days of the training run the per-run figure covers (Llama 3 405B trained for 54 days)
    run_days: float = 54.0

    def __post_init__(self):
        for f in ("put_per_1000", "get_per_1000", "gb_month", "transfer_out_per_gb"):
            value = getattr(self, f)
            _check(0 <= value < 1e6, f, f"must be a price in USD between 0 and 1e6, got {value!r}")
        _check(0 < self.run_days <= 36500, "run_days", f"must be between 0 and 36500 days, got {self.run_days!r}")


@dataclass(frozen=True)
class LimitsConfig:
    """Caps that stop a typo from taking the machine (docs/security.md#limits): each is checked
    before any work, and each can be raised explicitly (``--set limits.ranks_per_cpu=16``)."""

    #: ranks a run may start on one host, per CPU of the host (never fewer than 8 in all: the
    #: embedded default runs 8 ranks on 2 cores)
    ranks_per_cpu: float = 4.0
    #: torch threads per rank (run.threads_per_rank)
    threads_per_rank: int = 64
    #: an emulated tier's latency and jitter per request, in ms (tiers.*.emulate, design latencies)
    latency_ms: float = 60_000.0
    #: the points of one ``simulate --sweep`` grid, every axis together
    sweep_points: int = 10_000
    #: checkpoints a run writes or loads per mode (checkpoint.saves, checkpoint.loads)
    checkpoints: int = 100_000
    #: training steps a run takes per mode (checkpoint.saves x interval_steps, or training.steps)
    steps: int = 10_000_000

    def __post_init__(self):
        _check(self.ranks_per_cpu > 0, "ranks_per_cpu", "must be > 0")
        for name in ("threads_per_rank", "latency_ms", "sweep_points", "checkpoints", "steps"):
            _check(getattr(self, name) >= 1, name, "must be >= 1")

    def ranks_per_host(self, cpus: int) -> int:
        """The most ranks one host of ``cpus`` CPUs may run."""
        return max(MIN_RANKS_PER_HOST, int(self.ranks_per_cpu * cpus))


#: ranks any host may run whatever its CPUs (MLPerf's one node: 8)
MIN_RANKS_PER_HOST = 8
