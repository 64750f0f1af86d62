"""What a rank measures and tells the others, as typed records (JSON-ready with ``to_dict``).

``Receipt``: one rank's file after its local (or direct-to-global) write,
gathered by every rank before the drain. ``CkptRecord``: one rank's view of one
checkpoint, what the report summarises. ``LoadRecord``: one rank's restore.
``Event``: a span for the timeline. ``RankResult``: everything a rank hands to
rank 0 at the end of a run, the input of ``emulator.report``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from emulator.checkpoint.layout import FileEntry
from emulator.design import ladder


class Record:
    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Receipt(Record):
    rank: int
    node: int
    key: str
    size: int = 0
    crc32c: str = ""
    error: str = ""
    where: str = ""  # the tier it was written to: memory or local, or global (none due, or the node tier was full)
    local_full: bool = False
    skipped: bool = False
    write_s: float = 0.0
    #: the write's seconds and the file's bytes as the full-size design's (the live save throughput)
    full_s: float = 0.0
    full_bytes: float = 0.0
    #: further files this rank wrote (checkpoint.engine dcp: more writer threads' files, the
    #: coordinator's .metadata), drained and listed like the first
    extra: list = field(default_factory=list)
    #: files only its node's tier keeps (dcp: a node's copy of .metadata, so the node can load alone)
    node_only: list = field(default_factory=list)

    @property
    def entry(self) -> FileEntry:
        return FileEntry(self.key, self.rank, self.size, self.crc32c)

    @property
    def entries(self) -> list[FileEntry]:
        """The files the global manifest lists and a drain copies."""
        return [self.entry] + list(self.extra)

    @property
    def node_entries(self) -> list[FileEntry]:
        """The files the node's manifest lists."""
        return self.entries + list(self.node_only)

    @property
    def total_bytes(self) -> int:
        return sum(e.size for e in self.entries)


@dataclass
class CkptRecord(Record):
    step: int
    mode: str
    rank: int
    node: int
    start: float
    stall_s: float = 0.0
    wait_s: float = 0.0
    snapshot_s: float = 0.0
    #: of the snapshot, the device-to-host copy (0: the state lives on the CPU) and its bytes
    d2h_s: float = 0.0
    d2h_bytes: int = 0
    local_write_s: float = 0.0
    file_bytes: int = 0
    drain_s: float = 0.0
    complete_s: float = 0.0
    missed: bool = False
    local_complete: bool = False
    global_complete: bool = False
    error: str = ""
    seq: int = 0  # 1-based checkpoint number of this launch attempt, across modes
    written_to: str = ""  # where this rank's file went first: memory, local, or global (none due / full)
    local_full: bool = False  # this rank's local write hit ENOSPC
    skipped: bool = False  # some rank's local tier was full and on_local_full is skip
    drain_retries: int = 0
    abandoned: bool = False
    #: durability lag: from the snapshot until the checkpoint was complete on the global tier
    #: (local write + drain + manifest, plus any wait in between); 0 if it never was
    lag_s: float = 0.0
    #: unix time it became complete on the global tier (0: never)
    durable_at: float = 0.0
    #: S3 requests this rank made for it, by kind (tiers/s3_requests.py), retention included
    requests: dict = field(default_factory=dict)
    #: the tiers that take this checkpoint (emulator/checkpoint/schedule.py), nearest first
    due: list = field(default_factory=lambda: list(ladder.lasting_file_tiers()))
    #: per tier it was due on: {"complete": bool, "lag_s": snapshot to complete there (0: never),
    #: "seconds": that tier's stage (write, copy, send or drain), "paced": of it, the paced seconds,
    #: "stream_s" (peer sends): of it, the streams' seconds; the rest is the software around them}
    tiers: dict = field(default_factory=dict)
    #: of each paced phase (snapshot, local_write, drain), the seconds its paced transfers covered
    #: (tiers/paced.py): the design's part, which a dilated run maps back; the rest is this host's
    paced: dict = field(default_factory=dict)
    #: of the lag, the seconds waiting for the previous checkpoint's pipeline (drains run in order)
    queue_s: float = 0.0
    #: checkpoint.engine dcp: the library's own seconds on this rank (staging, planning, write, metadata)
    engine_s: dict = field(default_factory=dict)

    @property
    def global_due(self) -> bool:
        return "global" in self.due


@dataclass
class LoadRecord(Record):
    rank: int
    node: int
    ok: bool = False
    step: int = -1
    tier: str = ""
    seconds: float = 0.0
    bytes: int = 0
    fallbacks: list = field(default_factory=list)  # "tier@step: reason"
    h2d_s: float = 0.0  # the verified bytes' host-to-device copy (0: the state lives on the CPU)
    error: str = ""  # why nothing was loaded
    requests: dict = field(default_factory=dict)  # S3 requests of this restore on this rank, by kind
    # who read (checkpoint.restore_readers): whose file this rank restored (its own, or in a replicated
    # layout its DP group leader's), the bytes it read from a tier and the bytes it got by broadcast
    readers: str = "all"
    source_rank: int = -1
    read_bytes: int = 0
    broadcast_bytes: int = 0
    #: of ``seconds``, the paced reads' (tiers/paced.py): the design's part
    paced_s: float = 0.0
    #: the time factor the reads were paced at, where not the run's (0): loads at their own dilation
    time_factor: float = 0.0
    #: of ``seconds``, this rank's streaming of its file that no paced read covered: the host behind the
    #: paced rate (the rest of the unpaced time is the software's: listing, manifest, structure, collectives)
    lag_s: float = 0.0


@dataclass
class Event:
    rank: int
    kind: str
    start: float
    end: float


@dataclass
class RankResult(Record):
    """A rank's whole run, gathered by rank 0 for the report (``to_dict`` is what it reads)."""

    rank: int
    node: int
    state_bytes: int
    emulated_bytes: int
    records: list  # CkptRecord dicts
    loads: list  # LoadRecord dicts
    page_cache_dropped: bool
    modes: dict  # mode -> {start, train_end, end, steps, flush_s, compute, at_risk, update_cpu_s}
    events: list  # (kind, start, end)
    local: str | None
    global_: str
    stopped_early: bool
    failure: dict | None
    attempt: int
    resume: list  # CkptRecord dicts of resumed drains
    recovery: dict | None  # LoadRecord dict of the restore after a torchrun restart
    fault_counts: dict
    content: dict
    content_audit: dict | None
    peak_rss_bytes: int
    earlier_attempts: list = field(default_factory=list)  # [{attempt, records}] of killed attempts
    device: dict = field(default_factory=lambda: {"kind": "cpu"})  # emulator.device.Placement.describe()
    staging: dict = field(default_factory=dict)  # emulator.staging.Stager.describe()
    #: with a memory tier: one restore from each file tier alone (memory, local, global), LoadRecord dicts
    tier_loads: list = field(default_factory=list)
    #: the failure-class recoveries of this rank: {class, lost_steps, load: LoadRecord dict}
    recoveries: list = field(default_factory=list)
    #: node leaders: the most bytes the node's memory and peer tiers held at once (host memory)
    memory_tier_peak_bytes: int = 0
    #: the most bytes of tier files this rank had mapped at once (tiers/mapped.py): in its peak RSS
    #: too, though they are the memory tier's copies
    mapped_tier_peak_bytes: int = 0
    #: per tier, tiers.emulated.device_waits(): seconds waited on the emulated device per phase
    device_waits: dict = field(default_factory=dict)
    #: every S3 request this rank's global tier made, by kind (lease and clean-up included); {} off S3
    s3_requests: dict = field(default_factory=dict)
    #: the run's time dilation (emulator/rank/dilation.py ``describe``): its factor and the probe
    dilation: dict = field(default_factory=dict)
    #: run.wall_target's fit (emulator/rank/dilation.py ``ScaleFit.describe``); None without one
    scale_fit: dict | None = None
    #: the tiers in host memory this rank emptied when the run ended (run.keep_tiers: false)
    tiers_emptied: list = field(default_factory=list)
    #: the design's bytes per byte of this rank's file: how its tiers booked each byte it moved
    #: (emulator/checkpoint/rank_file.py ``design_bytes_weight``)
    bytes_weight: float = 1.0
    #: a soak (emulator/rank/soak.py): its duration and, after its checkpoints, this rank's resident
    #: memory and its node's tier files
    soak: dict | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["global"] = d.pop("global_")
        return d
