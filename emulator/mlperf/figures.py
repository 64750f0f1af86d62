"""The figures of an MLPerf-protocol run: DLIO's own, and corrected ones beside them.

DLIO-exact, as DLIO computes them: "GB" are GiB; ``checkpoint_size`` is the
tensor bytes of every rank; each checkpoint's throughput is that size over
rank 0's duration; the summary is the mean and population stdev of those
per-checkpoint rates and durations. Rank 0's duration flatters a run where
rank 0 finishes early, so the corrected figures take, per checkpoint, the
slowest rank's duration and all bytes written (or read) over the time from the
first rank's start to the last rank's end. Pure functions of the gathered
per-rank records; timestamps are rounded to microseconds as DLIO's are.
"""
from __future__ import annotations

import statistics
from datetime import datetime

from emulator.units import GIB

OPS = ("save", "load")


def stamp(t: float) -> str:
    """DLIO's timestamp: local time, ``%Y-%m-%dT%H:%M:%S.%f``, no zone."""
    return datetime.fromtimestamp(t).strftime("%Y-%m-%dT%H:%M:%S.%f")


def stamp_seconds(start: float, end: float) -> float:
    """A duration as DLIO gets it: the difference of the two timestamps it printed."""
    fmt = "%Y-%m-%dT%H:%M:%S.%f"
    return (datetime.strptime(stamp(end), fmt) - datetime.strptime(stamp(start), fmt)).total_seconds()


def checkpoint_size_gib(ranks: list[dict]) -> float:
    """DLIO's ``checkpoint_size``: every rank's tensor bytes, in GiB."""
    return sum(r["tensor_bytes"] for r in ranks) / GIB


def _mean_std(values: list[float]) -> tuple:
    if not values:
        return None, None
    return statistics.fmean(values), statistics.pstdev(values)


def _summary(durations: list[float], rates: list[float]) -> dict:
    gib_s, gib_s_std = _mean_std(rates)
    dur, dur_std = _mean_std(durations)
    return {"count": len(durations), "gib_s_mean": gib_s, "gib_s_stdev": gib_s_std,
            "duration_mean_s": dur, "duration_stdev_s": dur_std}


def rank_rates(rank: dict, op: str, size_gib: float) -> list[tuple]:
    """(index, duration, throughput) of one rank's checkpoints, as that rank's DLIO records them."""
    out = []
    for rec in rank[f"{op}s"]:
        d = stamp_seconds(rec["start"], rec["end"])
        out.append((rec["index"], d, size_gib / d if d > 0 else None))
    return out


def dlio_exact(ranks: list[dict], op: str) -> dict:
    """DLIO's summary figures: rank 0's durations, checkpoint size over each."""
    rank0 = next(r for r in ranks if r["rank"] == 0)
    rows = rank_rates(rank0, op, checkpoint_size_gib(ranks))
    return _summary([d for _, d, _ in rows], [t for _, _, t in rows if t is not None])


def per_checkpoint(ranks: list[dict], op: str) -> list[dict]:
    """Per checkpoint: the slowest rank's duration, and all bytes over first start to last end."""
    out = []
    indexes = sorted({rec["index"] for r in ranks for rec in r[f"{op}s"]})
    for i in indexes:
        recs = [rec for r in ranks for rec in r[f"{op}s"] if rec["index"] == i]
        span = max(x["end"] for x in recs) - min(x["start"] for x in recs)
        nbytes = sum(x["bytes"] for x in recs)
        out.append({"index": i, "slowest_s": max(x["end"] - x["start"] for x in recs), "span_s": span,
                    "bytes": nbytes, "gib_s": nbytes / GIB / span if span > 0 else None})
    return out


def corrected(ranks: list[dict], op: str) -> dict:
    rows = per_checkpoint(ranks, op)
    s = _summary([r["slowest_s"] for r in rows], [r["gib_s"] for r in rows if r["gib_s"] is not None])
    s["span_mean_s"] = _mean_std([r["span_s"] for r in rows])[0]
    return s


def apart(exact: dict, fixed: dict) -> float | None:
    """How far DLIO's throughput is from the corrected one: exact / corrected (1.0: the same)."""
    if not exact.get("gib_s_mean") or not fixed.get("gib_s_mean"):
        return None
    return exact["gib_s_mean"] / fixed["gib_s_mean"]


def figures(ranks: list[dict]) -> dict:
    """Both sets of figures for saves and loads, and how far apart they are."""
    out = {"checkpoint_size_gib": checkpoint_size_gib(ranks), "processes": len(ranks),
           "hosts": len({r["node"] for r in ranks})}
    for op in OPS:
        if not any(r[f"{op}s"] for r in ranks):
            out[op] = None
            continue
        exact, fixed = dlio_exact(ranks, op), corrected(ranks, op)
        out[op] = {"dlio_exact": exact, "corrected": fixed, "exact_over_corrected": apart(exact, fixed),
                   "per_checkpoint": per_checkpoint(ranks, op)}
    return out
