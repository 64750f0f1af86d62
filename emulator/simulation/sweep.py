"""``--sweep interval=...,global_gib_s=...``: a grid of simulations and its optimum.

Spec: keys ``interval`` (times: ``300``, ``5m``, ``2h``) and ``global_gib_s``
(the global tier's aggregate write bandwidth, GiB/s), each with a list of
values (``interval=5m,10m,20m``) or a log-spaced range ``LO..HI:N``
(``interval=2m..2h:12``). A value without a key continues the previous key's
list. Every cell uses the same failures (same seed), so cells differ only by
the design, not by luck.

The optimum is the best cell; along the interval axis it is refined per
bandwidth row by fitting a parabola in log(interval) to the best cell and its
neighbours (up to two each side), which averages out the simulation's noise.
"""
from __future__ import annotations

import math

from ..errors import UserError
from .failures import parse_time
from .study import Study, with_global

KEYS = ("interval", "global_gib_s")


def _values(key: str, text: str) -> list[float]:
    where = f"--sweep {key}"
    if ".." in text:
        lo_hi, _, n = text.partition(":")
        lo, _, hi = lo_hi.partition("..")
        try:
            count = int(n) if n else 8
        except ValueError:
            raise UserError(f"{where}: {text!r}: the point count after ':' must be a whole number") from None
        a, b = _value(key, lo, where), _value(key, hi, where)
        if count < 2 or not 0 < a < b:
            raise UserError(f"{where}: {text!r}: need 0 < LO < HI and at least 2 points")
        return [a * (b / a) ** (i / (count - 1)) for i in range(count)]
    return [_value(key, text, where)]


def _value(key: str, text: str, where: str) -> float:
    if key == "interval":
        v = parse_time(text, where)
    else:
        try:
            v = float(text)
        except ValueError:
            raise UserError(f"{where}: {text!r} is not a number of GiB/s") from None
    if not (math.isfinite(v) and v > 0):
        raise UserError(f"{where}: {text!r} must be > 0")
    return v


def parse_spec(specs: list[str]) -> dict:
    """``['interval=5m,10m', 'global_gib_s=100..800:4']`` -> {"interval": [...], "global_gib_s": [...]}."""
    out: dict = {}
    key = None
    for spec in specs:
        for token in filter(None, (t.strip() for t in spec.split(","))):
            if "=" in token:
                key, _, token = token.partition("=")
                key = key.strip().replace("-", "_")
                if key not in KEYS:
                    raise UserError(f"--sweep: unknown key {key!r} (use {', '.join(KEYS)})")
                if key in out:
                    raise UserError(f"--sweep: {key} given twice")
                out[key] = []
            if key is None:
                raise UserError(f"--sweep: {token!r} has no key (write interval=... or global_gib_s=...)")
            out[key] += _values(key, token.strip())
    if not out:
        raise UserError("--sweep: give interval=... and/or global_gib_s=...")
    for k, vals in out.items():
        if len(vals) != len(set(vals)):
            raise UserError(f"--sweep {k}: a value is listed twice")
        out[k] = sorted(vals)
    return out


def fit_optimum(xs: list[float], ys: list[float]) -> float | None:
    """Vertex of a least-squares parabola in log(x) through the best point and up to two neighbours
    each side; None when the best point is at an edge or the fit does not curve down."""
    if len(xs) < 3:
        return None
    k = max(range(len(ys)), key=ys.__getitem__)
    if k == 0 or k == len(xs) - 1:
        return None
    lo, hi = max(0, k - 2), min(len(xs), k + 3)
    pts = [(math.log(xs[i]), ys[i]) for i in range(lo, hi)]
    n = len(pts)
    sx = [sum(x ** p for x, _ in pts) for p in range(5)]
    sxy = [sum(y * x ** p for x, y in pts) for p in range(3)]
    m = [[sx[4], sx[3], sx[2]], [sx[3], sx[2], sx[1]], [sx[2], sx[1], n]]
    a, b, _ = _solve3(m, [sxy[2], sxy[1], sxy[0]])
    if a is None or a >= 0:
        return None
    x = -b / (2 * a)
    return math.exp(min(max(x, pts[0][0]), pts[-1][0]))


def _solve3(m, v):
    def det(a):
        return (a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1]) - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
                + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0]))
    d = det(m)
    if abs(d) < 1e-300:
        return None, None, None
    out = []
    for col in range(3):
        mc = [row[:] for row in m]
        for r in range(3):
            mc[r][col] = v[r]
        out.append(det(mc) / d)
    return tuple(out)


def run_sweep(study: Study, spec: dict, progress=None) -> dict:
    """Every cell of the grid, per mode: goodput, the best cell and the fitted optimum per row."""
    rows = spec.get("global_gib_s") or [None]
    result = {"global_gib_s": rows, "modes": {}}
    for mode in study.modes:
        cols = spec.get("interval") or [study.intervals[mode]]
        grid, fitted = [], []
        for bw in rows:
            design = with_global(study.designs[mode], bw)
            gp = []
            for t in cols:
                gp.append(study.run(mode, interval_s=t, design=design).goodput)
                if progress:
                    progress()
            grid.append(gp)
            fitted.append({"global_gib_s": bw, "interval_s": fit_optimum(cols, gp)})
        i, j = max(((i, j) for i in range(len(rows)) for j in range(len(cols))), key=lambda ij: grid[ij[0]][ij[1]])
        result["modes"][mode] = {"intervals_s": cols, "goodput": grid, "fitted": fitted,
                                 "best": {"interval_s": cols[j], "global_gib_s": rows[i], "goodput": grid[i][j]}}
    return result
