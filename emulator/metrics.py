"""Live Prometheus metrics for ckpt-emu: one scrape target per node, covering every rank.

Why it looks like this:

* Every rank is its own OS process, so the node endpoint uses prometheus_client's
  multiprocess mode: each process writes its values to mmap files under
  ``PROMETHEUS_MULTIPROC_DIR`` and local rank 0 serves a ``MultiProcessCollector``
  over them. prometheus_client decides at *import* time whether it is in that mode,
  so this module imports it lazily: a launcher may import ``emulator.metrics`` (to
  call :func:`prepare_multiprocess_dir`) before it has set the variable.
* Histograms, not summaries, so quantiles can be aggregated across ranks and nodes.
* Labels come only from small closed sets (mode, tier, phase, backend, op, kind, failure_class) and
  are validated, so a typo fails at the first checkpoint instead of silently creating
  series; a step number is never a label.
* Every gauge has a deliberate ``multiprocess_mode`` (see ``_GAUGES``). Unlabelled
  gauges are created at 0 in *every* process's file, so "min" is never used.
* Every series whose labels are known and whose zero is true exists from the start
  (``_create_known_series``): counters at 0, histograms with no observation, so panels
  and rules have data during the baseline and ``rate()``/``increase()`` see the first
  increment instead of a series that is born at its final value. A gauge whose 0 would
  be false (the newest checkpoint's time, a throughput, a slowdown) stays absent until
  it is measured; docs/metrics-and-dashboards.md says why, family by family.
* A tier's series exist only once the run announces the tier: ``set_tiers`` (local, global)
  and ``set_tier_interval`` (any tier, called at start for each configured tier) create its
  completion counter at 0, its lag histogram and its newest lag at 0. A run without a peer
  tier shows no peer lines, rather than zeros that would read as a peer tier doing nothing.
* Drain-busy seconds are accrued while a drain is in flight (a ticker thread, started
  at the first drain and asleep while none runs, adds the elapsed time every
  ``tick_s``), not in one lump when the drain ends: a drain of
  several minutes would otherwise make ``rate()`` over a shorter window exceed 1 and
  then read 0. Several drains in flight at once count once: busy time is the time with
  at least one drain in flight, which is what "drain overlap" means.

Order in a rank process (multiprocess, see ``emulator/rank/run.py``): every rank sets
``PROMETHEUS_MULTIPROC_DIR=<out>/.metrics/node<N>`` before anything imports
prometheus_client; the node leader (local rank 0) calls ``prepare_multiprocess_dir``;
all ranks barrier; each builds ``Metrics(multiprocess=True)``; the node leader calls
``serve_node(addr, port + node)``. A rank may call ``mark_process_dead(os.getpid())``
on a clean exit so its live gauges (drains in flight, backlog) leave the node's sums.
After the run the node leader waits for one scrape begun after the final values
(``NodeServer.wait_for_scrape``), so that they are not lost with the process.

Every served figure is the full-size design's, as the report's are: seconds on the design's clock,
bytes of the full-size checkpoint, rates per second of the design (docs/metrics-and-dashboards.md).
A method takes a value already converted (``Metrics.clock``, an ``emulator.fullsize.DesignClock``
set once the run's dilation is known, converts a measurement as the report does: its paced part
over the time factor, the host's own once); the drain-busy seconds, which the metrics accrue
themselves, take the drains' own measurements (bytes of the files, wall seconds) and convert them
with the same clock. Only what the tool counts is
not converted: checkpoints, faults, S3 requests (the full-size requests are the report's), and
Unix times (the ages the rules compute from them are turned into the design's time there).

Without a metrics port, ``Metrics()`` uses a private registry: nothing is global, and
tests inject their own registry.
"""

from __future__ import annotations

import os
import re
import threading
import time

from emulator.fullsize import DesignClock
from tiers import s3_requests
from tiers.safepath import fresh_folder

PREFIX = "ckpt_emu_"
MODES = ("none", "sync", "async")  # "none": the no-checkpoint baseline
#: memory: the node's host memory; peer: a replica in other nodes' memory; local: node NVMe. The
#: ladder's rung kinds (emulator/design/ladder.py, above the kernel), a closed set of label values:
#: tests/unit/metrics/test_metrics_tiers.py holds the two equal
TIERS = ("memory", "peer", "local", "global")
#: "d2h": of the snapshot, the device-to-host copy (ranks whose state lives on a GPU);
#: "replicate": the send to the peers; "persist": the copy from memory to NVMe; "fetch": a
#: replacement node fetching its copy back from a peer
PHASES = ("snapshot", "d2h", "local_write", "drain", "load", "replicate", "persist", "fetch")
#: process: a crash (host memory survives); node: a node lost (its peers hold a copy);
#: group: a whole replica group lost (restore from the global tier)
FAILURE_CLASSES = ("process", "node", "group")
#: a backend label is the backend class's own short name (tiers registry): no list to keep in step
BACKEND_LABEL = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
OPS = ("save", "load")
DIRECTIONS = ("write", "read")
#: every kind ``emulator.tally.Tally.count`` is called with, plus "drain_failed"
#: (counted here by ``drain_finished(ok=False)``: any drain that ended incomplete;
#: "drain_abandoned" is the subset whose retries ran out).
FAULT_KINDS = ("injected", "checksum_mismatch", "drain_abandoned", "drain_failed", "drain_retry",
               "local_full", "tier_error")
#: S3 request kinds (tiers/s3_requests.py) and the phases they are charged to
S3_KINDS = s3_requests.KINDS
S3_PHASES = ("checkpoint", "restore")

#: 1 ms .. 1 h, roughly 1-2.5-5 per decade: staging copies are milliseconds, drains and lags of
#: full-size checkpoints minutes (a large model's on a slow global tier, most of an hour).
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
           1.0, 2.5, 5.0, 10.0, 25.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)

_ENV = "PROMETHEUS_MULTIPROC_DIR"

# name -> (labels, multiprocess_mode, help). Why each mode:
#   livesum: per-process amounts that add up on the node and vanish with a dead process
#   max:     facts every process agrees on, or "newest" timestamps (monotonic per node)
#   mostrecent: a value published by one process that replaces the previous one
_GAUGES = {
    "drains_in_flight": ((), "livesum", "Drains of this node to the global tier now in progress."),
    "drain_backlog_bytes": ((), "livesum", "Bytes (of the full-size checkpoint) started draining to the global tier and not yet copied."),
    "drain_overlap_ratio": (("mode",), "max", "Drain time (the drain in flight included) over the mode's time so far, on the design's clock, as computed by the emulator; worst rank on the node. Above 1: drains are falling behind."),
    "baseline_step_seconds": ((), "max", "Time of one training step without checkpoints (the baseline mode 'none'), at full size; 0 until it ran."),
    "slowdown_ratio": (("mode",), "max", "The mode's time per step over the baseline's, minus 1, on the design's clock: what checkpointing costs the job end to end (stall and interference); worst rank on the node."),
    "checkpoints_at_risk": (("mode",), "max", "Checkpoints of the mode not yet durable on the global tier when its training stopped."),
    "last_durability_lag_seconds": ((), "mostrecent", "Durability lag (snapshot to complete on the global tier, the slowest rank's) of the newest durable checkpoint; 0 before the first."),
    "last_complete_checkpoint_timestamp_seconds": (("tier",), "max", "Unix time when the newest checkpoint became complete (manifest written) on the tier."),
    "last_complete_checkpoint_step": (("tier",), "mostrecent", "Training step of the most recently completed checkpoint on the tier."),
    "checkpoint_interval_seconds": (("mode",), "max", "Configured time between checkpoints (the design's: interval steps x step time); alert thresholds are multiples of it."),
    "tier_interval_seconds": (("tier",), "max", "Configured time between checkpoints reaching the tier (the design's); the tier's age alert threshold is a multiple of it."),
    "last_tier_durability_lag_seconds": (("tier",), "mostrecent", "Snapshot until complete on the tier (the node's slowest rank's), of the newest checkpoint complete there; 0 before the first."),
    "last_lost_work_seconds": (("failure_class",), "mostrecent", "Training time lost by the newest recovery from a failure of the class: from the restored checkpoint's step to the failure."),
    "throughput_bytes_per_second": (("op", "mode"), "mostrecent", "MLPerf-style throughput at full size: the full-size checkpoint's bytes over the slowest rank's time at full size, published by rank 0 (the report's save throughput in brackets)."),
    "start_time_seconds": ((), "max", "Unix time when this run's metrics started (latest rank on the node)."),
    "mode_start_time_seconds": (("mode",), "max", "Unix time when the mode's training started (latest rank on the node); the checkpoint-age rule counts from the first checkpointing mode's start."),
    "info": (("preset", "scale", "ranks", "nodes", "modes", "version"), "max", "Run description; the value is always 1."),
    "resident_bytes": (("mode",), "livesum", "Resident memory of the node's rank processes (their VmRSS), sampled after each checkpoint of a soak: it stays flat in a healthy one."),
    "tier_files": (("tier",), "max", "Files at rest in the node's folder of the tier (a directory tier; a checkpoint in flight left out), sampled by the node leader after each checkpoint of a soak: retention keeps it flat."),
    "time_factor": ((), "max", "Wall seconds here per second of the full-size design (run.scale x run.dilation): the rules divide wall-clock ages by it, and multiply a rate() of a served counter by it for a rate per second of the design (docs/time-dilation.md)."),
}
_COUNTERS = {
    "written_bytes": (("tier", "backend"), "Bytes written to a tier, of the full-size checkpoint."),
    "read_bytes": (("tier", "backend"), "Bytes read from a tier, of the full-size checkpoint."),
    "drain_busy_seconds": ((), "Seconds (the design's) with at least one drain in flight, accrued while draining; rate() of it x ckpt_emu_time_factor is the drain overlap."),
    "drain_deadline_misses": (("mode",), "Checkpoints that started before the previous drain had finished."),
    "training_seconds": (("mode",), "Time of the training loop on the design's clock, stalls included (summed over the node's ranks)."),
    "stall_seconds": (("mode",), "Time the training loop was blocked by checkpointing, on the design's clock (summed over the node's ranks)."),
    "faults": (("kind",), "Injected faults, checksum mismatches, drain retries, abandoned and failed drains, full local tier, tier errors."),
    "checkpoints_completed": (("tier",), "Checkpoints that became complete (manifest written) on the tier."),
    "s3_requests": (("kind", "phase"), "S3 requests sent (every attempt, retries included) by kind, charged to checkpoints (retention included) or restores."),
}
_HISTOGRAMS = {
    "checkpoint_stall_seconds": (("mode",), "Time one rank's training loop was blocked by one checkpoint, waits for a late drain included."),
    "phase_duration_seconds": (("phase", "tier", "backend"), "Duration of one checkpoint phase on one rank (or one drain on the node)."),
    "step_duration_seconds": (("mode",), "Time of one training step's compute, at full size."),
    "durability_lag_seconds": (("mode",), "From a checkpoint's snapshot until it is complete on the global tier (local write + drain + manifest), the slowest rank's: one observation per checkpoint."),
    "tier_durability_lag_seconds": (("tier",), "From a checkpoint's snapshot until it is complete on the tier, the node's slowest rank's: one observation per node and checkpoint."),
    "recovery_seconds": (("failure_class",), "Recovery from one failure of the class, slowest rank: restart of the pipeline, fetch and restore."),
}


def _check(kind: str, value: str, allowed) -> str:
    if value not in allowed:
        raise ValueError(f"metrics: {kind} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _check_interval(value: float) -> float:
    if not (isinstance(value, (int, float)) and 0 < value < float("inf")):
        raise ValueError(f"metrics: a tier's interval must be a positive number of seconds, got {value!r}")
    return float(value)


def _check_backend(value: str) -> str:
    if not isinstance(value, str) or not BACKEND_LABEL.match(value):
        raise ValueError(f"metrics: backend must be a short lowercase name (a Tier's ``backend``), got {value!r}")
    return value


def _multiprocess_active() -> bool:
    """True when prometheus_client was imported with PROMETHEUS_MULTIPROC_DIR set."""
    from prometheus_client import values
    return values.ValueClass is not values.MutexValue


class Metrics:
    """All ckpt-emu metrics of one process; thread-safe (the drainer runs in a thread)."""

    live = True  # served (NullMetrics: not; a figure that needs a collective is not worked out then)

    def __init__(self, registry=None, *, multiprocess: bool = False, tick_s: float = 1.0):
        """``registry``: where to register (default: a private ``CollectorRegistry``; ignored
        with ``multiprocess=True``, where collection reads the files, see :func:`serve_node`).
        ``tick_s``: how often drain-busy seconds are accrued while a drain is in flight."""
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        if multiprocess:
            if not os.path.isdir(os.environ.get(_ENV, "")) or not _multiprocess_active():
                raise RuntimeError(f"{_ENV} must name an existing directory before prometheus_client is imported")
            self.registry = None  # collection reads the files; see serve_node()
        else:
            self.registry = registry if registry is not None else CollectorRegistry()
        reg = self.registry
        self._g = {n: Gauge(PREFIX + n, h, labels, registry=reg, multiprocess_mode=mode)
                   for n, (labels, mode, h) in _GAUGES.items()}
        self._c = {n: Counter(PREFIX + n, h, labels, registry=reg) for n, (labels, h) in _COUNTERS.items()}
        self._h = {n: Histogram(PREFIX + n, h, labels, registry=reg, buckets=BUCKETS)
                   for n, (labels, h) in _HISTOGRAMS.items()}
        self._create_known_series()
        self._g["start_time_seconds"].set(time.time())
        self.clock = DesignClock()  # until the run's is known (set_clock)
        self._lock = threading.Lock()
        self._in_flight = 0
        self._backlog = 0
        self._busy_mark = 0.0  # monotonic time up to which drain-busy seconds were accrued
        self._tick_s = tick_s
        self._wake = threading.Condition(self._lock)
        self._closed = False
        self._ticker = None

    def _create_known_series(self):
        """Create at once every series a panel or rule reads whose labels come from a closed
        set and whose zero is true before the first checkpoint: a counter at 0, a histogram
        with no observation. The newest durability lag starts at 0, as the alert rule
        already reads it while there is none ("mostrecent": a real lag, set after the
        collectives that follow every rank's start, is always newer than these zeros)."""
        for mode in MODES:
            for counter in ("drain_deadline_misses", "stall_seconds", "training_seconds"):
                self._c[counter].labels(mode=mode)
            for histogram in ("checkpoint_stall_seconds", "step_duration_seconds", "durability_lag_seconds"):
                self._h[histogram].labels(mode=mode)
        for kind in FAULT_KINDS:
            self._c["faults"].labels(kind=kind)
        for cls in FAILURE_CLASSES:
            self._h["recovery_seconds"].labels(failure_class=cls)
        for kind in S3_KINDS:
            for phase in S3_PHASES:
                self._c["s3_requests"].labels(kind=kind, phase=phase)
        self._g["last_durability_lag_seconds"].set(0)

    def set_info(self, *, preset: str, scale: float, ranks: int, nodes: int, modes: list[str], version: str):
        self._g["info"].labels(preset=preset, scale=f"{scale:g}", ranks=str(ranks), nodes=str(nodes),
                               modes=",".join(modes), version=version).set(1)

    def set_soak_sample(self, mode: str, rss_bytes: int, files: dict):
        """A soak's sample after a checkpoint of ``mode``: this process's resident memory, and (a node
        leader's) the files each of its node's directory tiers holds."""
        self._g["resident_bytes"].labels(mode=_check("mode", mode, MODES)).set(rss_bytes)
        for tier, n in files.items():
            self._g["tier_files"].labels(tier=_check("tier", tier, TIERS)).set(n)

    def set_clock(self, clock: DesignClock):
        """The run's clock (its time factor: scale x dilation), once its dilation is decided: what
        converts every measurement given to these metrics to the full-size design's."""
        self.clock = clock
        self._g["time_factor"].set(clock.k)

    def set_tiers(self, *, local: str | None, global_: str):
        """Announce the run's tiers by their backends (``local=None``: none, ranks write to the
        global tier): their byte counters start at 0 and the phases such a run has start with
        no observation, so the throughput and phase panels have series before the first
        checkpoint. (``d2h`` appears with the first GPU snapshot: CPU runs have none.)"""
        local, global_ = None if local is None else _check_backend(local), _check_backend(global_)
        first = ("local", local) if local is not None else ("global", global_)
        tiers = [first] + ([("global", global_)] if local is not None else [])
        phases = [("snapshot", *first), ("local_write", *first)] + [("load", *tier) for tier in tiers]
        if local is not None:
            phases.append(("drain", "global", global_))
        for tier, backend in tiers:
            for counter in ("written_bytes", "read_bytes"):
                self._c[counter].labels(tier=tier, backend=backend)
            self._c["checkpoints_completed"].labels(tier=tier)
        for phase, tier, backend in phases:
            self._h["phase_duration_seconds"].labels(phase=phase, tier=tier, backend=backend)

    def set_interval(self, mode: str, seconds: float):
        """Announce that ``mode`` starts, checkpointing every ``seconds`` (configured). Its drain
        overlap so far is 0 (no drain yet), which is true from now on and not before."""
        mode = _check("mode", mode, MODES)
        self._g["checkpoint_interval_seconds"].labels(mode=mode).set(seconds)
        self._g["drain_overlap_ratio"].labels(mode=mode).set(0)
        self._g["mode_start_time_seconds"].labels(mode=mode).set(time.time())

    def set_tier_interval(self, tier: str, seconds: float):
        """Announce a configured tier (at start, for each one), reached by a checkpoint every
        ``seconds`` of wall time. Its completion count, lag histogram and newest lag start here,
        at true zeros; a tier never announced has none of them (see the module docstring)."""
        tier = _check("tier", tier, TIERS)
        self._g["tier_interval_seconds"].labels(tier=tier).set(_check_interval(seconds))
        self._g["last_tier_durability_lag_seconds"].labels(tier=tier).set(0)
        self._h["tier_durability_lag_seconds"].labels(tier=tier)
        self._c["checkpoints_completed"].labels(tier=tier)

    def observe_tier_lag(self, tier: str, seconds: float):
        """A checkpoint is complete on ``tier``, ``seconds`` after its snapshot. (The global
        tier's lag by mode stays ``observe_durability_lag``'s.)"""
        tier = _check("tier", tier, TIERS)
        self._h["tier_durability_lag_seconds"].labels(tier=tier).observe(max(0.0, seconds))
        self._g["last_tier_durability_lag_seconds"].labels(tier=tier).set(max(0.0, seconds))

    def observe_recovery(self, failure_class: str, seconds: float, lost_work_seconds: float):
        """One recovery from a failure of ``failure_class``: ``seconds`` is the slowest rank's
        (restart of the pipeline, fetch, restore), ``lost_work_seconds`` the training time since
        the restored checkpoint. Call it once per recovery, from one rank (rank 0): the
        histogram counts recoveries, not ranks."""
        cls = _check("failure_class", failure_class, FAILURE_CLASSES)
        self._h["recovery_seconds"].labels(failure_class=cls).observe(max(0.0, seconds))
        self._g["last_lost_work_seconds"].labels(failure_class=cls).set(max(0.0, lost_work_seconds))

    def observe_stall(self, mode: str, seconds: float):
        self._h["checkpoint_stall_seconds"].labels(mode=_check("mode", mode, MODES)).observe(seconds)

    def observe_phase(self, phase: str, tier: str, seconds: float, *, backend: str):
        self._h["phase_duration_seconds"].labels(
            phase=_check("phase", phase, PHASES), tier=_check("tier", tier, TIERS),
            backend=_check_backend(backend)).observe(seconds)

    def add_bytes(self, direction: str, tier: str, n: int, *, backend: str):
        name = "written_bytes" if _check("direction", direction, DIRECTIONS) == "write" else "read_bytes"
        self._c[name].labels(tier=_check("tier", tier, TIERS), backend=_check_backend(backend)).inc(n)

    # The drain gauges are set from per-process tallies (not inc/dec) so that when the
    # last drain ends, whatever was not reported as progress (an abandoned drain) is
    # cleared instead of staying in the backlog forever. The drain methods take the drain's
    # bytes (of its files) and wall seconds, and serve them through the clock.
    def drain_started(self, nbytes: int):
        with self._lock:
            if self._in_flight == 0:
                self._busy_mark = time.monotonic()
            self._in_flight += 1
            self._backlog += nbytes
            self._publish_drain()
            if self._ticker is None and self._tick_s > 0 and not self._closed:
                self._ticker = threading.Thread(target=self._tick, name="ckpt-emu-metrics-ticker", daemon=True)
                self._ticker.start()
            self._wake.notify_all()

    def drain_progress(self, nbytes_done: int):
        with self._lock:
            self._backlog = max(0, self._backlog - nbytes_done)
            self._accrue_busy()
            self._publish_drain()

    def drain_finished(self, seconds: float, *, ok: bool = True):
        """End of one drain. Busy time is measured from ``drain_started``; ``seconds`` (its wall
        time) is used only when no drain was in flight (a caller that reports finished drains only)."""
        with self._lock:
            if self._in_flight == 0:
                self._c["drain_busy_seconds"].inc(self.clock.span(max(0.0, seconds)))
            else:
                self._accrue_busy()
                self._in_flight -= 1
            if self._in_flight == 0:
                self._backlog = 0
            self._publish_drain()
        if not ok:
            self.count_fault("drain_failed")

    def _accrue_busy(self):  # with self._lock held
        if self._in_flight > 0:
            now = time.monotonic()
            self._c["drain_busy_seconds"].inc(self.clock.span(max(0.0, now - self._busy_mark)))
            self._busy_mark = now

    def _tick(self):
        """Accrue drain-busy seconds every ``tick_s`` while a drain is in flight; sleep otherwise."""
        with self._wake:
            while not self._closed:
                self._wake.wait(self._tick_s if self._in_flight > 0 else None)
                self._accrue_busy()

    def close(self):
        """Stop the drain-busy ticker (idempotent). Values already written stay."""
        with self._wake:
            self._closed = True
            self._wake.notify_all()
        t = self._ticker
        if t is not None and t is not threading.current_thread():
            t.join(timeout=5)

    def _publish_drain(self):
        self._g["drains_in_flight"].set(self._in_flight)
        self._g["drain_backlog_bytes"].set(self.clock.bytes(self._backlog))

    def set_drain_overlap(self, mode: str, ratio: float):
        """Not capped at 1: a ratio above 1 says drains are falling behind."""
        self._g["drain_overlap_ratio"].labels(mode=_check("mode", mode, MODES)).set(max(0.0, ratio))

    def set_baseline_step(self, seconds: float):
        self._g["baseline_step_seconds"].set(max(0.0, seconds))

    def set_slowdown(self, mode: str, ratio: float):
        self._g["slowdown_ratio"].labels(mode=_check("mode", mode, MODES)).set(ratio)

    def set_at_risk(self, mode: str, count: int):
        self._g["checkpoints_at_risk"].labels(mode=_check("mode", mode, MODES)).set(count)

    def observe_durability_lag(self, mode: str, seconds: float):
        self._h["durability_lag_seconds"].labels(mode=_check("mode", mode, MODES)).observe(seconds)
        self._g["last_durability_lag_seconds"].set(seconds)

    def deadline_missed(self, mode: str):
        self._c["drain_deadline_misses"].labels(mode=_check("mode", mode, MODES)).inc()

    def checkpoint_complete(self, tier: str, step: int, unix_time: float):
        tier = _check("tier", tier, TIERS)
        self._g["last_complete_checkpoint_timestamp_seconds"].labels(tier=tier).set(unix_time)
        self._g["last_complete_checkpoint_step"].labels(tier=tier).set(step)
        self._c["checkpoints_completed"].labels(tier=tier).inc()

    def observe_step(self, mode: str, seconds: float):
        self._h["step_duration_seconds"].labels(mode=_check("mode", mode, MODES)).observe(seconds)

    def add_training_seconds(self, mode: str, seconds: float):
        """Add training-loop wall time. Call it per step (or at least every few seconds),
        not once at the end of a mode, so that rate() and the overhead ratio work live."""
        self._c["training_seconds"].labels(mode=_check("mode", mode, MODES)).inc(seconds)

    def add_stall_seconds(self, mode: str, seconds: float):
        self._c["stall_seconds"].labels(mode=_check("mode", mode, MODES)).inc(seconds)

    def set_throughput(self, op: str, mode: str, bytes_per_second: float):
        self._g["throughput_bytes_per_second"].labels(
            op=_check("op", op, OPS), mode=_check("mode", mode, MODES)).set(max(0.0, bytes_per_second))

    def count_s3_request(self, kind: str, phase: str):
        """One S3 request (any thread: the hook of tiers/s3_requests.py calls it as it is sent)."""
        self._c["s3_requests"].labels(kind=_check("kind", kind, S3_KINDS),
                                      phase=_check("phase", phase, S3_PHASES)).inc()

    def count_fault(self, kind: str):
        self._c["faults"].labels(kind=_check("kind", kind, FAULT_KINDS)).inc()


def prepare_multiprocess_dir(path) -> None:
    """Empty (or create) the node's multiprocess directory.

    Must run before any rank on the node creates ``Metrics``: stale files from an earlier
    run would otherwise be summed into this run's counters.
    """
    fresh_folder(path, what="metrics folder")  # never through a link (docs/security.md)


class NodeServer:
    """Handle returned by :func:`serve_node`; ``port`` is the bound port (useful with port 0).

    It notes when each answered scrape began (monotonic clock), so that the node leader can
    keep serving after the run until its final values have been scraped (:meth:`wait_for_scrape`)."""

    def __init__(self, httpd, thread):
        self._httpd, self._thread = httpd, thread
        self.addr, self.port = httpd.server_address[:2]
        self.scrapes = 0  # answered scrapes
        self._newest = float("-inf")  # when the latest-begun answered scrape began
        self._answered = threading.Condition()
        httpd.set_app(self._counted(httpd.get_app()))

    def _counted(self, app):
        def counted(environ, start_response):
            began = time.monotonic()  # before the collector reads the files
            yield from app(environ, start_response)
            if environ.get("PATH_INFO") != "/favicon.ico":  # reached only once the body was sent
                with self._answered:
                    self.scrapes += 1
                    self._newest = max(self._newest, began)
                    self._answered.notify_all()
        return counted

    def wait_for_scrape(self, since: float, timeout: float) -> bool:
        """Wait until a scrape that began at or after ``since`` (``time.monotonic()``) has been
        answered, or ``timeout`` seconds; True if one was."""
        with self._answered:
            return self._answered.wait_for(lambda: self._newest >= since, timeout)

    def close(self):
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def serve_node(addr: str, port: int, *, path=None) -> NodeServer:
    """Serve /metrics for every process writing to the multiprocess directory (default: env)."""
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=None if path is None else str(path))
    httpd, thread = start_http_server(port, addr=addr, registry=registry)
    return NodeServer(httpd, thread)


def mark_process_dead(pid, *, path=None) -> None:
    """Drop a finished process's live gauges (in flight, backlog) from the node's sums."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid, None if path is None else str(path))


class NullMetrics:
    """What code records into when no metrics are wanted: every public ``Metrics`` method,
    doing nothing (generated from ``Metrics``, so a new metric needs no second definition,
    and a misspelt method still raises AttributeError), and a clock that converts nothing."""

    clock = DesignClock()
    live = False


def _nothing(self, *args, **kwargs):
    return None


for _name, _member in vars(Metrics).items():
    if callable(_member) and not _name.startswith("_"):
        setattr(NullMetrics, _name, _nothing)

NULL_METRICS = NullMetrics()
