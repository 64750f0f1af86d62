"""``ckpt-emu compare PATH...``: runs side by side, ours and DLIO's, with ratios against the first.

A PATH is one of our results folders (``results.json``: an MLPerf-protocol run
or an emulator run), a DLIO results folder (``summary.json``), one of those two
files, or a folder holding DLIO runs further down (an MLPerf Storage submission:
every ``summary.json`` below it is a run). The table shows the rows every run
has: save and load GiB/s and duration, checkpoint size, processes, hosts.
DLIO's "GB" are GiB; our MLPerf runs are shown with their DLIO-exact figures,
so both sides are computed alike. Bad input is one line and exit status 2.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from emulator.errors import UserError
from emulator.units import GIB

#: (key, label) of every row a run may have, in table order
ROWS = (("save_gib_s", "save GiB/s"), ("save_s", "save duration s"), ("load_gib_s", "load GiB/s"),
        ("load_s", "load duration s"), ("size_gib", "checkpoint GiB"), ("processes", "processes"),
        ("hosts", "hosts"))


@dataclass
class Run:
    label: str
    kind: str  # "ours (mlperf)", "ours (emulator)", "dlio"
    rows: dict


def _read_json(path: Path) -> dict:
    def refuse(token):
        raise ValueError(f"{token} is not JSON")
    try:
        data = json.loads(path.read_text(), parse_constant=lambda t: float("nan") if t == "NaN" else refuse(t))
    except OSError as exc:
        raise UserError(f"compare: {path}: cannot read ({exc.strerror})") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"compare: {path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UserError(f"compare: {path}: not a JSON object")
    return data


def _num(v):
    """A figure or None (DLIO's NaN and absent figures alike)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
        return None
    return v


def dlio_rows(summ: dict, path: Path) -> dict:
    m = summ.get("metric")
    if not isinstance(m, dict) or "checkpoint_size_GB" not in m:
        raise UserError(f"compare: {path}: a DLIO summary.json without checkpoint figures (metric.checkpoint_size_GB)")
    return {"save_gib_s": _num(m.get("save_checkpoint_io_mean_GB_per_second")),
            "save_s": _num(m.get("save_checkpoint_duration_mean_seconds")),
            "load_gib_s": _num(m.get("load_checkpoint_io_mean_GB_per_second")),
            "load_s": _num(m.get("load_checkpoint_duration_mean_seconds")),
            "size_gib": _num(m.get("checkpoint_size_GB")),
            "processes": _num(summ.get("num_accelerators")), "hosts": _num(summ.get("num_hosts"))}


def _mlperf_rows(res: dict) -> dict:
    f = res["figures"]
    rows = {"size_gib": f["checkpoint_size_gib"], "processes": f["processes"], "hosts": f["hosts"]}
    for op in ("save", "load"):
        exact = (f.get(op) or {}).get("dlio_exact") or {}
        rows[f"{op}_gib_s"], rows[f"{op}_s"] = exact.get("gib_s_mean"), exact.get("duration_mean_s")
    return rows


def _emulator_rows(res: dict) -> dict:
    modes = res["modes"]
    mode = modes.get("sync") or next(iter(modes.values()))
    load = res.get("load") or {}
    has_loads = bool(load.get("loads"))
    return {"save_gib_s": mode.get("save_gib_s"), "save_s": mode.get("local_write_mean_s"),
            "load_gib_s": load.get("load_gib_s") if has_loads else None,
            "load_s": load.get("load_worst_s") if has_loads else None,
            "size_gib": res["bytes"]["run_actual_state"] / GIB, "processes": res["ranks"], "hosts": res["nodes"]}


def ours_rows(res: dict, path: Path) -> tuple[str, dict]:
    try:
        if res.get("protocol") == "mlperf":
            return "ours (mlperf)", _mlperf_rows(res)
        return "ours (emulator)", _emulator_rows(res)
    except (KeyError, TypeError, AttributeError, StopIteration):
        raise UserError(f"compare: {path}: a results.json without the figures compare needs "
                        "(from another version?)") from None


def _from_file(path: Path, label: str) -> Run:
    data = _read_json(path)
    if path.name == "summary.json" or ("metric" in data and "num_accelerators" in data):
        return Run(label, "dlio", dlio_rows(data, path))
    if "figures" in data or "modes" in data:
        kind, rows = ours_rows(data, path)
        return Run(label, kind, rows)
    raise UserError(f"compare: {path}: neither our results.json nor DLIO's summary.json")


def load_runs(arg: str) -> list[Run]:
    """The runs one PATH argument names (a submission folder may hold several)."""
    path = Path(arg)
    if not path.exists():
        raise UserError(f"compare: {arg}: no such file or folder")
    if path.is_file():
        return [_from_file(path, arg)]
    for name in ("results.json", "summary.json"):
        if (path / name).is_file():
            return [_from_file(path / name, arg)]
    found = sorted(path.rglob("summary.json"))
    if not found:
        raise UserError(f"compare: {arg}: no results.json (ours) or summary.json (DLIO) in or below it")
    return [_from_file(p, str(p.parent)) for p in found]


def _cell(v, first) -> str:
    if v is None:
        return "-"
    text = f"{v:.4g}" if isinstance(v, float) else str(v)
    if first and v is not None and first is not None and first != 0:
        text += f" (x{v / first:.3f})"
    return text


def shared_rows(runs: list[Run]) -> list[tuple]:
    return [(k, label) for k, label in ROWS if all(r.rows.get(k) is not None for r in runs)]


def format_compare(runs: list[Run]) -> str:
    rows = shared_rows(runs)
    header = ["", *[f"[{i + 1}] {r.kind}" for i, r in enumerate(runs)]]
    table = [header]
    for key, label in rows:
        first = runs[0].rows[key]
        table.append([label, *[_cell(r.rows[key], first if i else None) for i, r in enumerate(runs)]])
    widths = [max(len(row[c]) for row in table) for c in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table]
    lines.append("ratios (xN) are against [1]; DLIO's GB are GiB; our MLPerf runs show DLIO-exact figures")
    lines += [f"[{i + 1}] {r.label}" for i, r in enumerate(runs)]
    missing = [label for k, label in ROWS if (k, label) not in rows]
    if missing:
        lines.append(f"not shared by every run, left out: {', '.join(missing)}")
    return "\n".join(lines) + "\n"


def compare(paths: list[str]) -> tuple[list[Run], str]:
    runs = [run for p in paths for run in load_runs(p)]
    return runs, format_compare(runs)
