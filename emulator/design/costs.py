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

from emulator.design import ladder, requests
from emulator.design.links import LinkLimits, fair_finish
from emulator.design.model import Design
from emulator.design.snapshot import staged_bytes


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
    """The job's snapshot: every accelerator stages its own state at once; the rank with the most
    staged bytes decides (emulator/design/snapshot.py: its parts)."""
    return design.snapshot.seconds(staged_bytes(design))


def _latency(design: Design, name: str) -> float:
    t = design.link(name)
    return t.latency_s if t is not None else 0.0


def copy_seconds(design: Design, name: str, *, first: bool | None = None) -> float:
    """Tier ``name``'s own copy of a checkpoint, every node at once (the slowest node's time); ``first``:
    whether the ranks write their files there (default: it is the ladder's nearest file tier)."""
    t = design.link(name)
    if first is None:
        first = name == ladder.nearest_file_tier(design.tiers)
    if name == "peer":
        return _slowest(t.write, [(n, b * design.replicas) for n, b in _loads(design)])
    if first:  # the ranks write their files: each file's commit, then a node tier's manifest (global's
        # manifest comes after every node's files: the lag's)
        seconds = _slowest(t.write, _loads(design)) + (1 if name == "global" else 2) * t.latency_s
        return max(seconds, requests.transfer_floor_seconds(design, verify="none")) if name == "global" else seconds
    if name != "global":
        return _slowest(t.write, _loads(design))
    waves = -(-design.job.heaviest.files // design.drain_concurrency)
    side = 2 * waves * t.latency_s  # uploads start, size checks end, one wave at a time
    verify = _slowest(t.read, read_back_loads(design)) if verifies(design) else 0.0
    return max(side + _slowest(t.drain, _loads(design)) + verify, drain_floor_seconds(design))


def drain_floor_seconds(design: Design) -> float:
    """The least a drain to an object store takes at its request ceilings: every node's uploads and
    their verification (emulator/design/requests.py)."""
    return requests.transfer_floor_seconds(design, verify=design.verify)


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
    copy = {n: copy_seconds(design, n) for n in design.tiers}
    lag = pipeline_seconds(design, design.tiers)
    return CheckpointCosts(snap, copy, lag, snap + max(lag.values()), snap)


def pipeline_seconds(design: Design, taking) -> dict:
    """{tier: seconds from the start of a checkpoint's pipeline until it is durable there} for a checkpoint
    going to the tiers ``taking``: the fixed cost before the write, then each tier's copy one after
    another, nearest first, as the emulator's pipeline runs them (the ranks write the nearest file tier
    among them, the others copy from it); global storage's commit (the fixed cost after, its manifest)
    closes its own. Where nothing waits before it, the pipeline starts at the end of the snapshot."""
    names = ladder.in_order(taking)
    first = ladder.nearest_file_tier(names)
    out, done = {}, design.fixed_pre_s
    for n in names:
        done += copy_seconds(design, n, first=n == first)
        out[n] = done
    if "global" in out:
        out["global"] += design.fixed_post_s + _latency(design, "global")
    return out


def lag_seconds(design: Design, name: str, every: dict | None = None) -> float:
    """From the end of the snapshot until a checkpoint is durable on ``name``, counting only the copies
    of the tiers before it that take the same checkpoint (``every``: tier -> N, default the ladder's):
    a checkpoint that is a multiple of ``name``'s every alone (:func:`pipeline_seconds`)."""
    every = every or {t.name: t.every for t in design.ladder}
    names = design.tiers
    mine = every[name]
    return pipeline_seconds(design, [n for n in names[:names.index(name) + 1] if mine % every[n] == 0])[name]


def retention_requests(design: Design, taking=None) -> dict:
    """Requests of the retention after a checkpoint, per tier: every tier lists and reads the keep + 1
    manifests; a tier the checkpoint went to (``taking``; None: every tier) also deletes the oldest
    one's manifest, lists its folder and deletes each file (the node's on a node tier, the job's on
    global storage)."""
    return {name: sum(counts.values()) for name, counts in _retention_counts(design, taking).items()}


def _retention_counts(design: Design, taking) -> dict:
    job = design.job
    out = {}
    for t in design.ladder:
        if t.name == "peer":
            continue
        files = sum(g.nodes * g.files for g in job.groups) if t.name == "global" else job.heaviest.files
        out[t.name] = requests.retention_requests(t.keep, files, deletes=taking is None or t.name in taking)
    return out


def retention_seconds(design: Design, taking=None) -> float:
    """The retention after a checkpoint that went to ``taking`` (None: every tier), before the next
    one's pipeline may start: rank 0, one request at a time, the node tiers then global storage
    (:func:`retention_requests`), each at its tier's latency plus what a run measured beyond it, and
    an object store's no faster than its request ceilings allow."""
    return sum(max(sum(counts.values()) * (_latency(design, name) + design.retention_request_s),
                   requests.floor_seconds(counts, design.store) if name == "global" else 0.0)
               for name, counts in _retention_counts(design, taking).items())


# --------------------------------------------------------------------------- restores and recoveries

def restore_loads(design: Design) -> list:
    """(nodes, bytes) each node reads on a restore (emulator/design/job.py ``Job.restore_loads``: under
    ZeRO-0 with every rank reading, a storm of DP x the checkpoint)."""
    return design.job.restore_loads(design.restore_readers)


def held_elsewhere(design: Design) -> list:
    """(nodes, bytes) of the state each node holds that its own files do not (a replica's weights, under
    ZeRO-0 a whole replica, written by another node): with every rank reading the state it holds, what
    a restore from a node tier reads from global storage instead, as the emulator's ranks do."""
    if design.restore_readers != "all":
        return []
    return [(g.nodes, g.held_bytes - g.node_bytes) for g in design.job.groups if g.held_bytes > g.node_bytes]


def restore_seconds(design: Design, name: str, *, alone: bool = False, own_files_only: bool = False) -> float:
    """Reading the newest checkpoint back from tier ``name``: every node at once, or one node ``alone``
    (the replaced one, while the others read nearer tiers). A peer's copy is fetched over the NIC
    into memory (at the slower of the NIC and the memory's write, as the emulator paces both), then
    read from there. One manifest read, then the file, at the tier's latency. A node tier holds only
    the node's own files: what else its ranks hold comes from global storage at the same time
    (``own_files_only``: a node whose ranks hold only what they wrote, as the first replica's do)."""
    t = design.link(name)
    one = (lambda loads: [(1, max(b for _, b in loads))] if loads else []) if alone else (lambda loads: loads)
    if name == "peer":  # the copy lands in the lost node's memory as it arrives: the slower of the two binds
        memory, own = design.link("memory"), one(_loads(design))
        fetch = max(_slowest(t.read, own), _slowest(memory.write, own) if memory else 0.0)
        return fetch + restore_seconds(design, "memory", alone=alone) if memory else fetch
    if t is None or t.read is None:
        return 0.0
    node_tier = name in ladder.node_file_tiers()
    loads = one(_loads(design) if node_tier else restore_loads(design))
    read = _slowest(t.read, loads) + 2 * t.latency_s
    if name == "global":  # an object store's requests at its ceilings
        read = max(read, requests.restore_floor_seconds(design, alone=alone))
    away, g = one(held_elsewhere(design)) if node_tier and not own_files_only else [], design.link("global")
    if away and g is not None and g.read is not None:
        read = max(read, _slowest(g.read, away) + 2 * g.latency_s)
    if design.restore_readers == "one_per_dp_group" and design.job.layout.dp > 1:
        read += max(b for _, b in loads) / design.links.peer_bps  # the readers broadcast to their groups
    return read


def restore_choice(design: Design, cls: str, held: dict) -> tuple:
    """(tier, others) of the restore after a failure of ``cls`` when each tier holds the checkpoints
    ``held[tier]`` (numbers that grow with the checkpoints: progress, or a count; the newest ``keep``
    of them, retention having deleted the rest): the newest checkpoint a tier that survives ``cls``
    holds, from the nearest such tier among equals, and the nearest tier of all (surviving or not)
    still holding that same checkpoint, where the job's other nodes read it. (None, None) where no
    surviving tier holds any."""
    kept = [(max(h), -i, n) for i, n in enumerate(design.tiers)
            if design.survives(cls, n) and (h := held.get(n))]
    if not kept:
        return None, None
    newest, _, tier = max(kept)
    return tier, next(n for n in design.tiers if newest in (held.get(n) or ()))


def class_restore_seconds(design: Design, cls: str, tier: str | None = None, others: str | None = None) -> float:
    """The restore a failure of ``cls`` needs: from ``tier`` (default the nearest tier that survives
    it), the job's other nodes reading the same checkpoint from ``others`` (:func:`restore_choice`;
    default: their nearest node tier, which holds every step global storage does where every tier
    takes every checkpoint). A lost node reads global storage alone where the others restore the
    step from a node tier of theirs; every node reads it at once where they hold it nowhere nearer,
    so a node loss is never restored faster than a process crash from the same copy."""
    if cls in design.measured_recovery_s:
        return design.measured_recovery_s[cls]
    tier = tier or design.recovery_tier(cls)
    if others is None:
        others = next((t for t in design.tiers if t in ladder.node_file_tiers()), None)
    if cls == "node" and tier == "global" and others in ladder.node_file_tiers() and design.job.nodes > 1:
        return max(restore_seconds(design, "global", alone=True), restore_seconds(design, others))
    return restore_seconds(design, tier)


def recovery_seconds(design: Design, cls: str, tier: str | None = None, others: str | None = None) -> float:
    """A failure of ``cls`` until training resumes: detection, restart or replacement, restore
    (:func:`class_restore_seconds`)."""
    return design.failures.of(cls).before_restore_s + class_restore_seconds(design, cls, tier, others)


def restore_within(design: Design, cls: str, recovery_s: float) -> float:
    """The restore inside a recovery of ``cls`` that took ``recovery_s``: what its detection and
    restart or replacement leave (at least 0)."""
    return max(0.0, recovery_s - design.failures.of(cls).before_restore_s)
