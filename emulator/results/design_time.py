"""Of a run's time, what was this host's own and not the design's: per paced phase its share at full
size, how far it ran past its pace, the software around a stream (the conversions themselves:
emulator/fullsize.py)."""
from __future__ import annotations

from emulator.design import ladder
from emulator.fullsize import PHASES, full, load_time_factor

#: a phase whose own (unpaced) time is above this share of it is said to be this host's in part
HOST_SHARE = 0.10
#: a phase's software (F) at most this share of its full-size design time, counted once, gets no room
#: in the paced window (emulator/rank/dilation.py): half the share above which a phase is flagged
SOFTWARE_SHARE = HOST_SHARE / 2



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


#: the tier stages between the nearest tier's write and the drain, by their phase's name
STAGES = ladder.stages()


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
