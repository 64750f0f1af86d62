"""A run's measured seconds as the full-size design's: the paced part over the time factor, the rest once.

A run moves ``run.scale`` of the bytes at the design's rates / ``run.dilation`` (D), so everything
the design paces (transfers, request latencies, the snapshot, steps) takes the time factor
k = scale x D times the design's time here. The rest of a phase is this host's own time: the
software's collectives, manifests and Python, which do not shrink with the bytes. So a phase of
wall W whose paced transfers covered P (tiers/paced.py) is, at full size, P / k + (W - P): the
design's time plus the software's, counted once. A stall or a lag is the sum of its phases plus
the waits between them: a wait for the previous checkpoint is paced time (P = W), the rest is
coordination, counted once. A phase that nothing paces (a tier without emulation), or whose paced
time the host overran, measures this host's throughput at this run's size: all of it scales with the
bytes (/ run.scale, never / k: the dilation slows what is paced, not the host; docs/time-dilation.md).
"""
from __future__ import annotations

#: a phase whose own (unpaced) time is above this share of it is said to be this host's in part
HOST_SHARE = 0.10
#: a phase's software (F) at most this share of its full-size design time, counted once, gets no room
#: in the paced window (emulator/rank/dilation.py): half the share above which a phase is flagged
SOFTWARE_SHARE = HOST_SHARE / 2
#: the paced phases a checkpoint record holds: (record field, its paced key)
PHASES = (("snapshot_s", "snapshot"), ("local_write_s", "local_write"), ("drain_s", "drain"))


def full(wall: float, paced: float | None, k: float, *, bytes_factor: float | None = None) -> float:
    """One phase: its paced part at full size plus this host's part as measured. A phase nothing
    paces (None), or whose paced time the host overran entirely (0), is this host's throughput,
    extrapolated to the full bytes: all of it / ``bytes_factor`` (run.scale; default k, no dilation)."""
    if not paced or paced <= 0:
        return wall / (bytes_factor or k)
    paced = min(paced, wall)
    return paced / k + (wall - paced)


def _stages(rec: dict) -> list[tuple[float, float]]:
    """(wall, paced) of the record's phases on the way to durable, first tier's write to the drain."""
    out = [(rec["snapshot_s"], rec.get("paced", {}).get("snapshot", 0.0))]
    first = rec["due"][0] if rec.get("due") else "local"
    for name in rec.get("due") or ():
        t = rec.get("tiers", {}).get(name)
        if name == first or t is None:
            continue
        out.append((t.get("seconds", 0.0), t.get("paced", 0.0)))
    out.append((rec["local_write_s"], rec.get("paced", {}).get("local_write", 0.0)))
    return out


def full_record(rec: dict, k: float, *, bytes_factor: float | None = None) -> dict:
    """A checkpoint record with every duration as the full-size design's (``bytes_factor``: :func:`full`)."""
    if k == 1:
        return rec
    f = bytes_factor
    out = dict(rec)
    paced = rec.get("paced") or {}
    for field, key in PHASES:
        out[field] = full(rec[field], paced.get(key, 0.0), k, bytes_factor=f)
    out["d2h_s"] = rec.get("d2h_s", 0.0) / k
    saved = sum(w - full(w, p, k, bytes_factor=f) for w, p in _stages(rec))  # what the paced phases shrink by
    queue = rec.get("queue_s", 0.0)
    # a wait for a previous checkpoint still in flight is paced time (a deadline miss); one for a
    # pipeline already done is this host's bookkeeping
    wait = rec["wait_s"] if rec.get("missed") else 0.0
    out["wait_s"] = rec["wait_s"] - wait + wait / k
    in_stall = saved if rec["mode"] == "sync" else rec["snapshot_s"] - out["snapshot_s"]
    out["stall_s"] = max(0.0, rec["stall_s"] - (wait - wait / k) - in_stall)
    if rec["lag_s"]:
        out["lag_s"] = max(0.0, rec["lag_s"] - saved - (queue - queue / k))
    if rec["complete_s"]:
        out["complete_s"] = max(0.0, rec["complete_s"] - (wait - wait / k) - saved - (queue - queue / k))
    out["queue_s"] = queue / k
    return out


def tier_lag(rec: dict, name: str, k: float, *, bytes_factor: float | None = None) -> float:
    """A record's lag to tier ``name`` (snapshot to complete there) as the full-size design's: the
    phases up to and including that tier's own stage rescaled, the waits between them once."""
    view = (rec.get("tiers") or {}).get(name) or {}
    lag = view.get("lag_s", 0.0)
    if not lag or k == 1:
        return lag
    due = list(rec.get("due") or ())
    upto = due[: due.index(name) + 1] if name in due else due
    paced = rec.get("paced") or {}
    stages = [(rec["snapshot_s"], paced.get("snapshot")), (rec["local_write_s"], paced.get("local_write"))]
    stages += [((rec["tiers"].get(n) or {}).get("seconds", 0.0), (rec["tiers"].get(n) or {}).get("paced"))
               for n in upto[1:]]
    queue = rec.get("queue_s", 0.0) if name == "global" else 0.0
    return max(0.0, lag - sum(w - full(w, p, k, bytes_factor=bytes_factor) for w, p in stages) - (queue - queue / k))


def load_time_factor(load: dict, k: float) -> float:
    """The time factor a load was paced at: its own (loads at a dilation of their own), else the run's."""
    return load.get("time_factor") or k


def at_run_factor(load: dict, k: float) -> float:
    """A load's seconds had its reads been paced at the run's time factor ``k``: its paced part x k /
    its own factor, the host's part as measured (``simulate --as-run`` calibrates the run's time)."""
    paced = min(load.get("paced_s", 0.0), load["seconds"])
    return load["seconds"] - paced + paced * k / load_time_factor(load, k)


def stream_lag(load: dict) -> float:
    """How far a load's stream ran past its paced time here, over the paced time (0 where nothing
    paced it): a copy's host lag (:func:`host_lags`), for a restore."""
    paced = load.get("paced_s", 0.0)
    return load.get("lag_s", 0.0) / paced if paced > 0 else 0.0


def full_load(load: dict, k: float, *, bytes_factor: float | None = None) -> dict:
    k = load_time_factor(load, k)
    if k == 1:
        return load
    return {**load, "seconds": full(load["seconds"], load.get("paced_s", 0.0), k, bytes_factor=bytes_factor),
            "h2d_s": load.get("h2d_s", 0.0) / k}


#: the tier stages between the nearest tier's write and the drain, by their phase's name
STAGES = {"peer": "replicate", "local": "persist"}


def swapped(rec: dict) -> bool:
    """Whether the record's snapshot was paced but moved no bytes here: a CPU state's buffers swap
    (emulator/workload/state.py), so its time past the pace is a cost per checkpoint (the swap, the
    paced wait's wake-up), not this host behind the copy's bytes."""
    return (rec.get("paced") or {}).get("snapshot") is not None and not rec.get("d2h_bytes")


def _stage_walls(records: list[dict], *, streams_only: bool = False) -> dict:
    """Per paced phase, the (wall, paced, stream) of every record that ran it; ``stream``: of the
    wall, the bytes' stream (peer sends), None where the phase is all stream. ``streams_only``: a
    swapped snapshot left out (no bytes of it streamed here)."""
    walls = {}
    for r in records:
        for field, key in PHASES:
            if streams_only and key == "snapshot" and swapped(r):
                continue
            if r[field] > 0 and (r.get("paced") or {}).get(key) is not None:
                walls.setdefault(key, []).append((r[field], r["paced"][key], None))
        first = (r.get("due") or ["local"])[0]
        for tier, phase in STAGES.items():
            t = (r.get("tiers") or {}).get(tier)
            if tier != first and t and t.get("seconds", 0) > 0 and t.get("paced") is not None:
                walls.setdefault(phase, []).append((t["seconds"], t["paced"], t.get("stream_s")))
    return walls


def host_shares(records: list[dict], k: float = 1.0, *, bytes_factor: float | None = None) -> dict:
    """Per paced phase (the snapshot, the write into the nearest tier, peer sends, the copy to the
    NVMe, the drain), the share of its full-size time, summed over the records that ran it, that is
    this host's own (software, or the host slower than the paced rate), counted once; all of it
    where the host overran the paced time entirely. Of a phase with a stream (peer sends), only the
    stream's uncovered part: the software around it is :func:`software_seconds`."""
    def whole(rows) -> float:
        return sum(full(w, p, k, bytes_factor=bytes_factor) for w, p, _ in rows)
    return {key: sum(host_seconds(w, p, k, bytes_factor=bytes_factor, stream=st) for w, p, st in rows)
            / whole(rows) or 0.0 for key, rows in _stage_walls(records).items() if whole(rows) > 0}


#: the probe's phases by the record phase they time (emulator/rank/dilation.py)
PROBED = {"snapshot": "snapshot", "write": "local_write", "drain": "drain"}


def probed_software(dilation: dict | None) -> dict:
    """Per record phase, the software seconds the run's probe measured for it (the node's slowest
    rank's, on files of one element per tensor); none for a run without a probe (a fixed factor)."""
    return {PROBED[p["phase"]]: p.get("fixed_s", 0.0) for p in (dilation or {}).get("phases", ())
            if p["phase"] in PROBED}


#: a paced wait's late wake-up on a host whose cores are all busy (the kernel's wake-up granularity:
#: up to 4.4 ms measured with 8 ranks on 2 cores): the scheduler's, not the host behind the pace
WAKE_UP_S = 0.005


def host_lags(records: list[dict], software: dict) -> dict:
    """Per paced phase of the records (the snapshot, the nearest tier's write, the drain, peer
    sends), how far this host ran past the phase's paced time here, over the paced time: beyond the
    software its probe measured (``software``: :func:`probed_software`), or for a phase with a
    stream (peer sends) the stream's own time past its pace (the software around it is
    :func:`software_seconds`). Counted once, that time may be a small share at full size while the
    run's own timing (overlaps, waits) was this host's. A tier's stage without a stream (the copy
    to the NVMe) is left out: its software and its bytes are not told apart, and so is a swapped
    snapshot (:func:`swapped`): none of its bytes moved here, so its time past the pace is a cost
    per checkpoint, judged by its share at full size (:func:`host_shares`). Each record's phase ends
    with a paced wait, whose late wake-up (up to ``WAKE_UP_S``) is not counted: a snapshot paced at
    1.1 ms woke up to 4.4 ms late while the node's other ranks saved."""
    out = {}
    for key, rows in _stage_walls(records, streams_only=True).items():
        paced = sum(p for _, p, _ in rows)
        if paced <= 0:
            continue
        if key in dict(PHASES).values():
            out[key] = sum(max(0.0, w - p - software.get(key, 0.0) - WAKE_UP_S) for w, p, _ in rows) / paced
        elif all(st is not None for _, _, st in rows):
            out[key] = sum(stream_past_pace(w, p, st) for w, p, st in rows) / paced
    return out


def stream_past_pace(wall: float, paced: float, stream: float) -> float:
    """Seconds a phase's stream of bytes (of its ``wall``) ran past its ``paced`` time here, less
    the paced wait's late wake-up: this host behind the pace (:func:`host_lags`)."""
    return max(0.0, min(stream, wall) - paced - WAKE_UP_S)


def software_seconds(records: list[dict]) -> dict:
    """Per phase with a stream (peer sends), the mean seconds a record spent around its stream: the
    exchange's set-up, every rank's receipts, the holders' manifest. Per checkpoint, not per byte:
    counted once at full size, and shown apart from the paced bytes."""
    out = {}
    for key, rows in _stage_walls(records).items():
        around = [max(0.0, w - st) for w, p, st in rows if st is not None and p]
        if around:
            out[key] = sum(around) / len(around)
    return out


def host_seconds(wall: float, paced: float | None, k: float, *, bytes_factor: float | None = None,
                 stream: float | None = None) -> float:
    """Of one phase's full-size time (:func:`full`), the part that is this host's own: what the
    paced spans did not cover, once (of ``stream``, where the phase has one: the host behind the
    paced rate); all of it where nothing was paced."""
    if not paced or paced <= 0:
        return full(wall, paced, k, bytes_factor=bytes_factor)
    span = wall if stream is None else min(stream, wall)
    return max(0.0, span - min(paced, span))
