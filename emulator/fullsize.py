"""A run's measured seconds and bytes as the full-size design's: the report's conversions, and the
clock the live metrics convert with, so that every served figure is the one the report shows.

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

from dataclasses import dataclass

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


def full_load(load: dict, k: float, *, bytes_factor: float | None = None) -> dict:
    k = load_time_factor(load, k)
    if k == 1:
        return load
    return {**load, "seconds": full(load["seconds"], load.get("paced_s", 0.0), k, bytes_factor=bytes_factor),
            "h2d_s": load.get("h2d_s", 0.0) / k}


def full_fetch(rec: dict, k: float, scale: float) -> float:
    """A rank's fetch from its peer at full size: the part any node's paced sends covered / the time
    factor, the rest (this host's, behind the NIC) once (:func:`full`); a fetch that streamed nothing
    (no surviving copy: a group loss) is its software, once; all of it / the time factor in results
    from before the fetch's paced part was kept."""
    if "fetch_paced_s" not in rec:
        return rec.get("fetch_s", 0.0) / k
    if rec.get("fetch_stream_s", 0.0) <= 0 and rec["fetch_paced_s"] <= 0:
        return rec["fetch_s"]
    return full(rec["fetch_s"], rec["fetch_paced_s"], k, bytes_factor=scale)


@dataclass(frozen=True)
class DesignClock:
    """One rank's measurements as the full-size design's figures, as the report converts them: ``k``
    the time factor (wall seconds here per design second), ``scale`` run.scale, ``weight`` the design's
    bytes per byte of the rank's file (its tiers book each byte at it), ``step_s`` a step's paced wall
    time here. The default clock converts nothing (a run whose figures are its own: tests, no port)."""
    k: float = 1.0
    scale: float = 1.0
    weight: float = 1.0
    step_s: float | None = None

    def phase(self, wall: float, paced: float | None) -> float:
        """A phase of ``wall`` seconds of which ``paced`` were paced (None: nothing paced it)."""
        return full(wall, paced, self.k, bytes_factor=self.scale)

    def span(self, wall: float) -> float:
        """A span that is all the design's time here (a wait for a paced phase, a paced stretch)."""
        return wall / self.k

    def record(self, rec) -> dict:
        """A checkpoint record (a ``CkptRecord`` or its dict) with its durations at full size."""
        return full_record(_fields(rec), self.k, bytes_factor=self.scale)

    def tier_lag(self, rec, name: str) -> float:
        """A record's lag to tier ``name`` at full size."""
        return tier_lag(_fields(rec), name, self.k, bytes_factor=self.scale)

    def load(self, load) -> float:
        """A load's seconds (a ``LoadRecord`` or its dict; at its own time factor where it has one)."""
        return full_load(_fields(load), self.k, bytes_factor=self.scale)["seconds"]

    def fetch(self, rec: dict) -> float:
        """A recovery's peer fetch (fetch_s, fetch_paced_s, fetch_stream_s)."""
        return full_fetch(rec, self.k, self.scale)

    def steps(self, wall: float, steps: int) -> float:
        """``steps`` training steps that took ``wall`` here: their paced time / k and this host's time
        past it once (all of it once for no step: the loop's own); all / k where a step's paced time is
        not known."""
        if self.step_s is None:
            return wall / self.k
        return full(wall, steps * self.step_s, self.k) if steps else wall

    def bytes(self, n: float) -> float:
        """The full-size design's bytes that ``n`` bytes of the rank's files stand for."""
        return n * self.weight / self.scale


def _fields(rec) -> dict:
    """A record's fields as a dict, its own dicts copied at once: no deep copy that the pipeline
    still writing the record (its tiers, an async checkpoint's drain) could change under it."""
    if isinstance(rec, dict):
        return rec
    return {k: dict(v) if isinstance(v, dict) else v for k, v in list(vars(rec).items())}
