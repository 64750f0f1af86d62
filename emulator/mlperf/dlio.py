"""A DLIO-compatible results folder for an MLPerf-protocol run (``<run.out>/dlio``).

What DLIO's checkpoint-only run leaves, with its keys and units, so tools that
read DLIO or ``mlpstorage`` output read ours: ``summary.json`` (rank 0's
figures, "GB" meaning GiB), ``{rank}_per_epoch_stats.json`` per rank,
``dlio.log`` with DLIO's ``[METRIC]`` lines, and ``results.csv`` with the
``mlpstorage`` columns. Unlike DLIO, the JSON is strict: a figure a phase did
not produce is absent (load figures of a write-only run, as in DLIO) or
``null`` (save figures of a read-only run, which DLIO writes as bare NaN).
The figures are DLIO-exact (``figures``); the corrected ones are in our
own report.
"""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from emulator.mlperf.figures import checkpoint_size_gib, figures, rank_rates, stamp
from emulator.units import GIB
from tiers.safepath import reach, write_file

#: DLIO's dataset defaults, which a checkpoint-only run reports as they are
NUM_FILES_TRAIN, NUM_FILES_EVAL, NUM_SAMPLES_PER_FILE, RECORD_LENGTH = 8, 0, 1, 64 * 1024
CSV_COLUMNS = ("run", "model", "num_processes", "num_hosts", "checkpoint_size (GiB)", "Write B/W (GiB/s)",
               "Write Duration (secs)", "Read B/W (GiB/s)", "Read Duration (secs)")
METRIC_KEYS = {"save": ("save_checkpoint_io_mean_GB_per_second", "save_checkpoint_io_stdev_GB_per_second",
                        "save_checkpoint_duration_mean_seconds", "save_checkpoint_duration_stdev_seconds"),
               "load": ("load_checkpoint_io_mean_GB_per_second", "load_checkpoint_io_stdev_GB_per_second",
                        "load_checkpoint_duration_mean_seconds", "load_checkpoint_duration_stdev_seconds")}
FIGURE_KEYS = ("gib_s_mean", "gib_s_stdev", "duration_mean_s", "duration_stdev_s")


def per_epoch_stats(rank: dict, size_gib: float) -> dict:
    """One rank's ``{rank}_per_epoch_stats.json``: epoch "1" with each save_ckpt/load_ckpt."""
    epoch = {"start": stamp(rank["start"])}
    for op in ("save", "load"):
        recs = {rec["index"]: rec for rec in rank[f"{op}s"]}
        for index, duration, rate in rank_rates(rank, op, size_gib):
            rec = recs[index]
            epoch[f"{op}_ckpt{index}"] = {"start": stamp(rec["start"]), "end": stamp(rec["end"]),
                                          "duration": duration, "throughput": rate}
    epoch["end"] = stamp(rank["end"])
    return {"1": epoch}


def _hosts(ranks: list[dict]) -> list[dict]:
    leaders = {r["node"]: r["host"] for r in ranks if r.get("host")}
    return [leaders[n] for n in sorted(leaders)]


def _metric(figs: dict, phase: str) -> dict:
    metric = {}
    for op in ("save", "load"):
        f = figs.get(op)
        if f is None and (op == "load" or phase != "read"):
            continue  # DLIO leaves load figures out of a run without reads
        for key, fk in zip(METRIC_KEYS[op], FIGURE_KEYS):
            metric[key] = f["dlio_exact"][fk] if f else None  # DLIO: NaN; strict JSON: null
    metric["checkpoint_size_GB"] = figs["checkpoint_size_gib"]
    return metric


def summary(ranks: list[dict], phase: str) -> dict:
    """``summary.json``: DLIO's top-level keys and its checkpoint metrics."""
    hosts = _hosts(ranks)
    per_node = len(ranks) // max(1, len(hosts))
    data_gb = per_node * NUM_SAMPLES_PER_FILE * NUM_FILES_TRAIN // len(ranks) * RECORD_LENGTH / GIB
    mem_gb = [h["memory_bytes"] / GIB for h in hosts]
    first = hosts[0] if hosts else {}
    return {
        "start": stamp(min(r["start"] for r in ranks)), "num_accelerators": len(ranks),
        "num_hosts": len(hosts), "hostname": first.get("hostname", ""), "metric": _metric(figures(ranks), phase),
        "num_files_train": NUM_FILES_TRAIN, "num_files_eval": NUM_FILES_EVAL,
        "num_samples_per_file": NUM_SAMPLES_PER_FILE, "host_cpu_count": [h["cpu_count"] for h in hosts],
        "host_processor_name": first.get("processor", ""), "potential_caching": [int(m > data_gb) for m in mem_gb],
        "host_cpuinfo": first.get("cpuinfo", {}), "host_meminfo": first.get("meminfo", {}),
        "host_memory_GB": mem_gb, "data_size_per_host_GB": data_gb, "epochs": 0,
        "end": stamp(max(r["end"] for r in ranks)),
    }


def _fmt(v) -> str:
    return "nan" if v is None else f"{v:.4f}"


def log_lines(ranks: list[dict], summ: dict) -> list[str]:
    """``dlio.log``: rank 0's per-checkpoint lines and DLIO's [METRIC] block."""
    rank0 = next(r for r in ranks if r["rank"] == 0)
    size = summ["metric"]["checkpoint_size_GB"]
    lines = [f"[OUTPUT] {summ['start']} Total checkpoint size: {size:.6f} GB"]
    words = {"save": "saving", "load": "loading"}
    for op in ("save", "load"):
        recs = {rec["index"]: rec for rec in rank0[f"{op}s"]}
        for index, duration, rate in rank_rates(rank0, op, size):
            lines.append(f"[OUTPUT] {stamp(recs[index]['start'])} Starting {words[op]} checkpoint {index} "
                         f"after total step {index} for epoch 1")
            lines.append(f"[OUTPUT] {stamp(recs[index]['end'])} Finished {words[op]} checkpoint {index} for "
                         f"epoch 1 in {duration:.4f} s; Throughput: {_fmt(rate)} GB/s")
    m = summ["metric"]
    lines += ["[OUTPUT] Averaged metric over all steps/epochs",
              "[METRIC] ==========================================================",
              f"[METRIC] Number of Simulated Accelerators: {summ['num_accelerators']} "]
    for op, word in (("save", "save"), ("load", "load")):
        keys = METRIC_KEYS[op]
        if keys[0] in m and m[keys[0]] is not None:
            lines.append(f"[METRIC] Checkpoint {word} duration (seconds): {_fmt(m[keys[2]])} ({_fmt(m[keys[3]])})")
            lines.append(f"[METRIC] Checkpoint {word} I/O Throughput (GB/second): {_fmt(m[keys[0]])} "
                         f"({_fmt(m[keys[1]])})")
    lines.append("[METRIC] ==========================================================")
    return lines


def csv_row(summ: dict, run: str, model: str) -> dict:
    m = summ["metric"]
    row = {"run": run, "model": model, "num_processes": summ["num_accelerators"], "num_hosts": summ["num_hosts"],
           "checkpoint_size (GiB)": m["checkpoint_size_GB"]}
    for op, word in (("save", "Write"), ("load", "Read")):
        keys = METRIC_KEYS[op]
        row[f"{word} B/W (GiB/s)"] = m.get(keys[0])
        row[f"{word} Duration (secs)"] = m.get(keys[2])
    return {k: ("" if v is None else v) for k, v in row.items()}


def _dump(path: Path, obj) -> None:
    write_file(path, json.dumps(obj, indent=4, allow_nan=False) + "\n")  # strict: NaN raises


def write_folder(folder: Path, ranks: list[dict], *, phase: str, run: str, model: str) -> dict:
    """Write the DLIO folder (made in the results folder, never through a link); returns the summary."""
    with reach(folder, create=True, mode=0o755, what="DLIO folder") as held:
        for stale in held.listdir():
            if stale.endswith("_per_epoch_stats.json"):
                held.remove_own_file(stale, what="DLIO folder")
    summ = summary(ranks, phase)
    size = checkpoint_size_gib(ranks)
    for r in ranks:
        _dump(folder / f"{r['rank']}_per_epoch_stats.json", per_epoch_stats(r, size))
    _dump(folder / "summary.json", summ)
    write_file(folder / "dlio.log", "\n".join(log_lines(ranks, summ)) + "\n")
    rows = io.StringIO()
    w = csv.DictWriter(rows, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerow(csv_row(summ, run, model))
    write_file(folder / "results.csv", rows.getvalue())
    return summ
