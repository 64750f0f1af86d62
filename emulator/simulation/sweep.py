"""``--sweep interval=...,global_gib_s=...``: a grid of simulations and its optimum.

Spec: keys ``interval`` (times: ``300``, ``5m``, ``2h``) and ``global_gib_s``
(the global tier's aggregate write bandwidth, GiB/s), each with a list of
values (``interval=5m,10m,20m``) or a log-spaced range ``LO..HI:N``
(``interval=2m..2h:12``). A value without a key continues the previous key's
list. On a config with levels, ``peer_every``, ``local_every`` and ``global_every``
list whole multiples of the base interval (``global_every=4,8,16``): the SimPy level
model runs over them (emulator/simulation/level_design.py) instead of this grid. Every cell uses the same failures (same seed), so cells differ only by
the design, not by luck.

The optimum is the best cell; along the interval axis it is refined per
bandwidth row by fitting a polynomial in log(interval) to the best cell and
its neighbours (up to two each side), which averages out the simulation's
noise (:func:`fit_optimum`).
"""
from __future__ import annotations

import math

from emulator.errors import UserError, shown
from emulator.simulation.level_design import SWEEP_KEYS as LEVEL_KEYS, parse_every
from emulator.simulation.study import Study, with_global
from emulator.units import parse_duration

KEYS = ("interval", "global_gib_s") + LEVEL_KEYS


#: the most points of one grid unless ``limits.sweep_points`` says otherwise
MAX_POINTS = 10_000


def _too_many(count: int, max_points: int) -> UserError:
    return UserError(f"--sweep: {count} points, more than limits.sweep_points ({max_points}); raise it "
                     "(--set limits.sweep_points=N) to run them anyway")


def _values(key: str, text: str, max_points: int = MAX_POINTS) -> list[float]:
    where = f"--sweep {key}"
    if key in LEVEL_KEYS:
        return [parse_every(key, text)]
    if ".." in text:
        lo_hi, _, n = text.partition(":")
        lo, _, hi = lo_hi.partition("..")
        try:
            count = int(n) if n else 8
        except ValueError:
            raise UserError(f"{where}: {shown(text)}: the point count after ':' must be a whole number") from None
        if count > max_points:  # before a list of that many is made
            raise _too_many(count, max_points)
        a, b = _value(key, lo, where), _value(key, hi, where)
        if count < 2 or not 0 < a < b:
            raise UserError(f"{where}: {text!r}: need 0 < LO < HI and at least 2 points")
        return [a * (b / a) ** (i / (count - 1)) for i in range(count)]
    return [_value(key, text, where)]


def _value(key: str, text: str, where: str) -> float:
    if key == "interval":
        v = parse_duration(text, where, allow_zero=True)
    else:
        try:
            v = float(text)
        except ValueError:
            raise UserError(f"{where}: {text!r} is not a number of GiB/s") from None
    if not (math.isfinite(v) and v > 0):
        raise UserError(f"{where}: {text!r} must be > 0")
    return v


def parse_spec(specs: list[str], max_points: int = MAX_POINTS) -> dict:
    """``['interval=5m,10m', 'global_gib_s=100..800:4']`` -> {"interval": [...], "global_gib_s": [...]};
    at most ``max_points`` points in all (UserError before any is made past them)."""
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
            out[key] += _values(key, token.strip(), max_points)
            if math.prod(len(v) for v in out.values()) > max_points:
                raise _too_many(math.prod(len(v) for v in out.values()), max_points)
    if not out:
        raise UserError("--sweep: give interval=..., global_gib_s=... or a tier's <tier>_every=...")
    for k, vals in out.items():
        if len(vals) != len(set(vals)):
            raise UserError(f"--sweep {k}: a value is listed twice")
        out[k] = sorted(vals)
    return out


def fit_optimum(xs: list[float], ys: list[float]) -> float | None:
    """The maximum of a polynomial in log(x) through the best point and up to two neighbours each
    side. Goodput is not symmetric about its optimum, so over five points spanning more than a
    factor e^1.2 = 3.3 a parabola's vertex falls about 1 % short (x1.45 steps): a cubic is fitted
    there; over narrower spans, where a cubic mostly fits noise, a parabola. None when the best
    point is at an edge or the fit has no maximum inside."""
    import numpy as np
    if len(xs) < 3:
        return None
    k = max(range(len(ys)), key=ys.__getitem__)
    if k == 0 or k == len(xs) - 1:
        return None
    lo, hi = max(0, k - 2), min(len(xs), k + 3)
    x, y = np.log(np.asarray(xs[lo:hi], float)), np.asarray(ys[lo:hi], float)
    for degree in ((3, 2) if len(x) >= 5 and x[-1] - x[0] >= 1.2 else (2,)):
        p = np.polyfit(x - x.mean(), y, degree)
        d, dd = np.polyder(p), np.polyder(p, 2)
        roots = [r.real for r in np.atleast_1d(np.roots(d)) if abs(r.imag) < 1e-9 and np.polyval(dd, r.real) < 0]
        roots = [r + x.mean() for r in roots if x[0] <= r + x.mean() <= x[-1]]
        if roots:
            return float(np.exp(min(roots, key=lambda r: abs(r - np.log(xs[k])))))
    return None


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
