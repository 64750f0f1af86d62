"""What each phase of one checkpoint, and each recovery, costs in a design: the closed forms.

One checkpoint alone (no earlier one in the way), every node at once, the job waiting for its
slowest node: the snapshot (each accelerator's bytes at its copy rate, plus a fixed cost), the
write into the nearest tier, then each further tier's copy in ladder order (peer sends over the
NIC, the NVMe, the drain to global storage), each over its links (emulator/design/links.py: a
node's own device, or a shared aggregate divided max-min fair). A recovery is its class's
detection and restart (emulator/design/failures.py) plus the restore from the nearest surviving
tier: every node at once (a storm), or the replaced node alone while the others read nearer tiers.

``plan`` uses these directly; ``simulate`` reproduces them event by event (and adds the queueing
of checkpoints on each other); an emulated run measures them. The agreement tests hold the three
to each other.
"""
from __future__ import annotations

from dataclasses import dataclass

from emulator.design.links import LinkLimits, fair_finish
from emulator.design.model import Design


@dataclass(frozen=True)
class CheckpointCosts:
    """Seconds at full size. ``copy_s``: each tier's own copy (the nearest: the ranks' write);
    ``lag_s``: from the end of the snapshot until durable there (copies one after another);
    ``sync_stall_s``: a synchronous checkpoint going to every tier; ``async_stall_s``: the snapshot."""

    snapshot_s: float
    copy_s: dict
    lag_s: dict
    sync_stall_s: float
    async_stall_s: float


def _loads(design: Design, attr: str = "node_bytes") -> list:
    return [(g.nodes, getattr(g, attr)) for g in design.job.groups]


def _slowest(limits: LinkLimits, loads: list) -> float:
    """The job's time to move ``loads`` at once over ``limits``: its slowest node's."""
    return max(fair_finish(limits, loads), default=0.0)


def snapshot_seconds(design: Design) -> float:
    """The job's snapshot: every accelerator copies its own state at once; the largest file decides."""
    return design.snapshot.seconds(max(g.file_bytes for g in design.job.groups))


def _latency(design: Design, name: str) -> float:
    t = design.link(name)
    return t.latency_s if t is not None else 0.0


#: the tiers a rank's file is written to; a peer only holds copies of the memory tier's
FILE_TIERS = ("memory", "local", "global")


def first_tier(names) -> str:
    """The tier a checkpoint going to ``names`` is written to: the nearest file tier among them."""
    return next(n for n in names if n in FILE_TIERS)


def copy_seconds(design: Design, name: str, *, first: bool | None = None) -> float:
    """Tier ``name``'s own copy of a checkpoint, every node at once (the slowest node's time); ``first``:
    whether the ranks write their files there (default: it is the ladder's nearest file tier)."""
    t = design.link(name)
    if first is None:
        first = name == first_tier(design.tiers)
    if name == "peer":
        return _slowest(t.write, [(n, b * design.replicas) for n, b in _loads(design)])
    if first:  # the ranks write their files: each file's commit, then a node tier's manifest (global's
        # manifest comes after every node's files: the lag's)
        return _slowest(t.write, _loads(design)) + (1 if name == "global" else 2) * t.latency_s
    if name != "global":
        return _slowest(t.write, _loads(design))
    waves = -(-design.job.heaviest.files // design.drain_concurrency)
    side = 2 * waves * t.latency_s  # uploads start, size checks end, one wave at a time
    verify = _slowest(t.read, read_back_loads(design)) if verifies(design) else 0.0
    return side + _slowest(t.drain, _loads(design)) + verify


def read_back_loads(design: Design) -> list:
    """(nodes, bytes) a drain reads back for their checksums after its copies: where global storage's
    reads and writes share one device (not duplex, as the emulator books it), every file's read-back
    takes its turn on it; otherwise the earlier ones overlap later copies and the last file's is left."""
    return _loads(design, "file_bytes" if design.link("global").duplex else "node_bytes")


def verifies(design: Design) -> bool:
    """Whether a drain reads its files back at the global read rate (``drain.verify: checksum``;
    which bytes: :func:`read_back_loads`):
    not where the drain's rate is a run's measurement, which holds its read-back already."""
    t = design.link("global")
    return (design.verify == "checksum" and t is not None and t.read is not None
            and design.sources.get("global_write") != "measured")


def checkpoint_costs(design: Design) -> CheckpointCosts:
    """One checkpoint that goes to every tier of the ladder, alone (see the module docstring)."""
    snap = snapshot_seconds(design)
    names = design.tiers
    copy = {n: copy_seconds(design, n) for n in names}
    lag, done = {}, design.fixed_pre_s
    for n in names:  # one after another, nearest first, as the emulator's pipeline runs them
        done += copy[n]
        lag[n] = done
    lag["global"] = lag.get("global", done) + design.fixed_post_s + _latency(design, "global")
    if "global" not in names:
        lag.pop("global")
    return CheckpointCosts(snap, copy, lag, snap + max(lag.values()), snap)


def lag_seconds(design: Design, name: str, every: dict | None = None) -> float:
    """From the end of the snapshot until a checkpoint is durable on ``name``, counting only the copies
    of the tiers before it that take the same checkpoint (``every``: tier -> N, default the ladder's)."""
    every = every or {t.name: t.every for t in design.ladder}
    names = design.tiers
    mine = every[name]
    taking = [n for n in names[:names.index(name) + 1] if mine % every[n] == 0]
    first = first_tier(taking)
    total = design.fixed_pre_s + sum(copy_seconds(design, n, first=n == first) for n in taking)
    if name == "global":
        total += design.fixed_post_s + _latency(design, "global")
    return total


def retention_requests(design: Design, taking=None) -> dict:
    """Requests of the retention after a checkpoint, per tier: every tier lists and reads the keep + 1
    manifests; a tier the checkpoint went to (``taking``; None: every tier) also deletes the oldest
    one's manifest, lists its folder and deletes each file (the node's on a node tier, the job's on
    global storage)."""
    job = design.job
    out = {}
    for t in design.ladder:
        if t.name == "peer":
            continue
        files = sum(g.nodes * g.files for g in job.groups) if t.name == "global" else job.heaviest.files
        out[t.name] = t.keep + 2 + (2 + files if taking is None or t.name in taking else 0)
    return out


def retention_seconds(design: Design, taking=None) -> float:
    """The retention after a checkpoint that went to ``taking`` (None: every tier), before the next
    one's pipeline may start: rank 0, one request at a time, the node tiers then global storage
    (:func:`retention_requests`), each at its tier's latency plus what a run measured beyond it."""
    return sum(n * (_latency(design, name) + design.retention_request_s)
               for name, n in retention_requests(design, taking).items())


# --------------------------------------------------------------------------- restores and recoveries

def restore_loads(design: Design) -> list:
    """(nodes, bytes) each node reads on a restore: with every rank reading, the state each node holds
    (a replica's weights included: under ZeRO-0 every data-parallel replica reads its leader's files, a
    storm of DP x the checkpoint); with one reader per data-parallel group, the files its ranks wrote."""
    if design.restore_readers != "all":
        return _loads(design)
    return [(g.nodes, max(g.held_bytes, g.node_bytes)) for g in design.job.groups]


def restore_seconds(design: Design, name: str, *, alone: bool = False) -> float:
    """Reading the newest checkpoint back from tier ``name``: every node at once, or one node ``alone``
    (the replaced one, while the others read nearer tiers). A peer's copy is fetched over the NIC
    into memory (at the slower of the NIC and the memory's write, as the emulator paces both), then
    read from there. One manifest read, then the file, at the tier's latency."""
    t = design.link(name)
    loads = restore_loads(design)
    if alone:
        loads = [(1, max(b for _, b in loads))]
    if name == "peer":  # the copy lands in the lost node's memory as it arrives: the slower of the two binds
        memory = design.link("memory")
        fetch = max(_slowest(t.read, loads), _slowest(memory.write, loads) if memory else 0.0)
        return fetch + restore_seconds(design, "memory", alone=alone) if memory else fetch
    if t is None or t.read is None:
        return 0.0
    read = _slowest(t.read, loads) + 2 * t.latency_s
    if design.restore_readers == "one_per_dp_group" and design.job.layout.dp > 1:
        read += max(b for _, b in loads) / design.links.nic_bps  # the readers broadcast to their groups
    return read


def class_restore_seconds(design: Design, cls: str, tier: str | None = None) -> float:
    """The restore a failure of ``cls`` needs: from ``tier`` (default the nearest tier that survives
    it). A lost node reads global storage alone where the others restore from a nearer tier of theirs
    (it holds the step they restore: each drained it from there), else with them, as every node
    reads at once."""
    if cls in design.measured_recovery_s:
        return design.measured_recovery_s[cls]
    tier = tier or design.recovery_tier(cls)
    if cls == "node" and tier == "global":
        survivors = [t for t in design.tiers if t in ("memory", "local")]
        if survivors and design.job.nodes > 1:
            return max(restore_seconds(design, "global", alone=True), restore_seconds(design, survivors[0]))
    return restore_seconds(design, tier)


def recovery_seconds(design: Design, cls: str) -> float:
    """A failure of ``cls`` until training resumes: detection, restart or replacement, restore."""
    return design.failures.of(cls).before_restore_s + class_restore_seconds(design, cls)
