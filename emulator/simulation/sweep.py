"""``--sweep interval=...,global_bandwidth=...,<tier>_every=...``: a grid of simulations and its optimum.

Keys: ``interval`` (training time between checkpoints: ``300``, ``5m``, ``2h``), ``global_bandwidth``
(the global storage's aggregate write rate, in the unit grammar of emulator/units.py: ``400GB/s``,
``3.2Tb/s``) and ``peer_every``, ``local_every``, ``global_every`` (whole multiples of the base
interval: the tier takes every N-th checkpoint). Each key takes a list of values (``interval=5m,10m``)
or, for interval and bandwidth, a log-spaced range ``LO..HI:N``; a value without a key continues the
previous key's list. Every cell is the one simulator (emulator/simulation/model.py) with the same
failures (same seed), so cells differ only by the design.

The grid is rows (each combination of bandwidth and ``every``) by columns (intervals). The best
cell is reported, and flagged where it lies on the grid's edge along a key (the optimum may lie
beyond it: widen the grid); along the interval axis the optimum is refined per row by fitting a
polynomial in log(interval) to the best cell and its neighbours (:func:`fit_optimum`). With
``every`` keys, the planner's choice over the same grid (emulator/simulation/planning.py) is put
beside the best cell, and whether they agree within one grid step per tier.
"""
from __future__ import annotations

import itertools
import math

from emulator.design import ladder
from emulator.design.overrides import Overrides
from emulator.errors import UserError, shown
from emulator.simulation.planning import choose_every, with_every
from emulator.units import parse_duration, parse_rate, rate_family

EVERY_KEYS = tuple(f"{n}_every" for n in ladder.names())
KEYS = ("interval", "global_bandwidth") + EVERY_KEYS
#: the unit family the bandwidths were written in (not a key of the grid)
FAMILY = "global_bandwidth_family"
#: the sweep keys before the one unit grammar, and what they are now
RENAMED = {"global_gib_s": "global_bandwidth (a rate with its unit, e.g. global_bandwidth=400GB/s)"}


#: the most points of one grid unless ``limits.sweep_points`` says otherwise
MAX_POINTS = 10_000


def _too_many(count: int, max_points: int) -> UserError:
    return UserError(f"--sweep: {count} points, more than limits.sweep_points ({max_points}); raise it "
                     "(--set limits.sweep_points=N) to run them anyway")


def _values(key: str, text: str, max_points: int = MAX_POINTS) -> list[float]:
    where = f"--sweep {key}"
    if key in EVERY_KEYS:
        return [_every(key, text)]
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


def _every(key: str, text: str) -> int:
    try:
        v = int(text.strip())
    except ValueError:
        v = 0
    if v < 1:
        raise UserError(f"--sweep {key}: {text.strip()!r} is not a whole number >= 1 (a multiple of the base interval)")
    return v


def _value(key: str, text: str, where: str) -> float:
    if key == "interval":
        v = parse_duration(text, where, allow_zero=True)
        if not (math.isfinite(v) and v > 0):
            raise UserError(f"{where}: {text!r} must be > 0")
        return v
    return parse_rate(text.strip(), where)


def parse_spec(specs: list[str], max_points: int = MAX_POINTS) -> dict:
    """``['interval=5m,10m', 'global_bandwidth=100GB/s..400GB/s:3']`` -> {key: sorted values};
    at most ``max_points`` points in all (UserError before any is made past them)."""
    out: dict = {}
    key = family = None
    for spec in specs:
        for token in filter(None, (t.strip() for t in spec.split(","))):
            if "=" in token:
                key, _, token = token.partition("=")
                key = key.strip().replace("-", "_")
                if key in RENAMED:
                    raise UserError(f"--sweep: {key} is now {RENAMED[key]}")
                if key not in KEYS:
                    raise UserError(f"--sweep: unknown key {key!r} (use {', '.join(KEYS)})")
                if key in out:
                    raise UserError(f"--sweep: {key} given twice")
                out[key] = []
            if key is None:
                raise UserError(f"--sweep: {token!r} has no key (write interval=..., global_bandwidth=... "
                                f"or <tier>_every=...)")
            out[key] += _values(key, token.strip(), max_points)
            if math.prod(len(v) for v in out.values()) > max_points:
                raise _too_many(math.prod(len(v) for v in out.values()), max_points)
            if key == "global_bandwidth" and family is None:
                family = rate_family(token.strip().split("..")[0])
    if not out:
        raise UserError("--sweep: give interval=..., global_bandwidth=... or a tier's <tier>_every=...")
    for k, vals in out.items():
        if len(vals) != len(set(vals)):
            raise UserError(f"--sweep {k}: a value is listed twice")
        out[k] = sorted(vals)
    if family is not None:  # rates are said in the units they were written in
        out[FAMILY] = family
    return out


def check_spec(design, spec: dict) -> dict:
    """The ``every`` keys as {tier: values}, refusing tiers the design lacks and the nearest one."""
    names = design.tiers
    out = {}
    for key in EVERY_KEYS:
        if key not in spec:
            continue
        name = key[: -len("_every")]
        if name not in names:
            raise UserError(f"--sweep {key}: the config has no {name} tier")
        if name == names[0]:
            raise UserError(f"--sweep {key}: the {name} tier takes every checkpoint (it is the nearest)")
        out[name] = tuple(spec[key])
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


def _rows(spec: dict, every: dict) -> list:
    """Each row: {"global_bandwidth_bps": bps or None, "every": {tier: N}} (bandwidth outermost)."""
    names = list(every)
    combos = list(itertools.product(*(every[n] for n in names))) or [()]
    return [{"global_bandwidth_bps": bw, "every": dict(zip(names, combo))}
            for bw in spec.get("global_bandwidth") or [None] for combo in combos]


def _design(study, mode: str, row: dict):
    d = study.designs[mode]
    if row["global_bandwidth_bps"] is not None:
        d = study.redesign(mode, Overrides(global_write=row["global_bandwidth_bps"]))
    if row["every"]:
        d = with_every(d, row["every"])
    return d


def _on_edge(spec: dict, every: dict, row: dict, interval_s: float) -> list:
    """The keys along which the best cell is the smallest or largest value tried (of two or more);
    a tier taking every checkpoint (``every`` 1) is no edge: nothing lies below it."""
    axes = {"interval": (spec.get("interval") or [], interval_s),
            "global_bandwidth": (spec.get("global_bandwidth") or [], row["global_bandwidth_bps"])}
    axes.update({f"{n}_every": (list(v), row["every"][n]) for n, v in every.items()})
    return [k for k, (values, v) in axes.items()
            if len(values) >= 2 and (v == values[-1] or (v == values[0] and not (k.endswith("_every") and v == 1)))]


def grid_cells(study, spec: dict) -> int:
    """How many cells ``run_sweep`` simulates: rows x intervals x modes."""
    rows = _rows(spec, check_spec(study.design, spec))
    return len(study.modes) * len(rows) * len(spec.get("interval") or [None])


def run_sweep(study, spec: dict, progress=None) -> dict:
    """Every cell of the grid, per mode: goodput, the best cell (with its edges), the fitted optimum
    per row, and with ``every`` keys the planner's choice beside the best cell."""
    every = check_spec(study.design, spec)
    rows = _rows(spec, every)
    result = {"keys": {k: v for k, v in spec.items() if k in KEYS}, "rows": rows, "modes": {},
              "units": spec.get(FAMILY, "decimal")}
    for mode in study.modes:
        cols = spec.get("interval") or [study.intervals[mode]]
        grid, fitted = [], []
        for row in rows:
            design = _design(study, mode, row)
            gp = []
            for t in cols:
                gp.append(study.run(mode, interval_s=t, design=design).goodput)
                if progress:
                    progress()
            grid.append(gp)
            fitted.append({**row, "interval_s": fit_optimum(cols, gp)})
        i, j = max(((i, j) for i in range(len(rows)) for j in range(len(cols))), key=lambda ij: grid[ij[0]][ij[1]])
        best = {"interval_s": cols[j], **rows[i], "goodput": grid[i][j],
                "on_edge": _on_edge(spec, every, rows[i], cols[j])}
        out = {"intervals_s": cols, "goodput": grid, "fitted": fitted, "best": best}
        if every:
            out["planner"] = _planner(study, mode, every, rows, cols, grid, best)
        result["modes"][mode] = out
    return result


def _planner(study, mode: str, every: dict, rows: list, cols: list, grid: list, best: dict) -> dict:
    """The planner's ``every`` over the same grid (at the best cell's bandwidth), its cell's simulated
    goodput, and whether it is within one grid step of the best cell per tier."""
    base = _design(study, mode, {**best, "every": {}})
    chosen, analytic = choose_every(base, mode, study.rates(), every, best["interval_s"])
    chosen = {n: chosen[n] for n in every}
    row = next(k for k, r in enumerate(rows)
               if r["global_bandwidth_bps"] == best["global_bandwidth_bps"] and r["every"] == chosen)
    agree = all(abs(v.index(best["every"][n]) - v.index(chosen[n])) <= 1 for n, v in every.items())
    return {"every": chosen, "goodput_analytic": analytic,
            "goodput_simulated": grid[row][cols.index(best["interval_s"])], "agree_within_one_step": agree}
