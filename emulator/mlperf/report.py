"""Our report of an MLPerf-protocol run: results.json, report.txt and the DLIO folder beside them.

The report puts DLIO-exact figures (rank 0's duration) next to corrected ones
(slowest rank; all bytes from the first start to the last end) with a line
saying how far apart they are, and states the two MLPerf rules a run can break
on its own: the page cache before the reads (the 3x rule) and, for a separate
read phase, the 30 s from the end of the write phase. A write phase leaves its
end time in ``mlperf-write.json`` for the read phase that follows.
"""
from __future__ import annotations

import json
from pathlib import Path

from emulator.job import outdir
from emulator.mlperf.dlio import write_folder
from emulator.mlperf.figures import figures
from tiers.safepath import write_file

#: the longest MLPerf allows between the end of a write run and the start of its read run
READ_AFTER_WRITE_S = 30.0


def rule_30s(out: Path, ranks: list[dict], phase: str) -> dict | None:
    """For a read phase: when the write phase ended and whether the reads began within 30 s."""
    if phase != "read":
        return None
    try:
        wrote = json.loads((out / outdir.MLPERF_WRITE).read_text())
        write_end = float(wrote["end"])
    except (OSError, ValueError, KeyError, TypeError):
        return {"gap_s": None, "met": None, "line": "30 s rule: no write phase recorded in this results "
                "folder (run --phase write first, same --out): not checked"}
    gap = min(rec["start"] for r in ranks for rec in r["loads"]) - write_end
    met = 0 <= gap <= READ_AFTER_WRITE_S
    verdict = "met" if met else f"BROKEN (MLPerf allows {READ_AFTER_WRITE_S:.0f} s)"
    return {"gap_s": gap, "met": met, "write_end": write_end,
            "line": f"30 s rule: the reads began {gap:.1f} s after the write phase ended: {verdict}"}


def _mark_write_end(out: Path, ranks: list[dict]) -> None:
    saves = [rec["end"] for r in ranks for rec in r["saves"]]
    if saves:
        write_file(out / outdir.MLPERF_WRITE, json.dumps({"end": max(saves), "processes": len(ranks)}))


def _pm(mean, std, unit: str = "") -> str:
    if mean is None:
        return "-"
    return f"{mean:.4f} ± {std:.4f}{unit}" if std is not None else f"{mean:.4f}{unit}"


def _op_lines(op: str, f: dict) -> list[str]:
    e, c = f["dlio_exact"], f["corrected"]
    word = {"save": "save", "load": "load"}[op]
    rows = [(f"{word} throughput (GiB/s)", _pm(e["gib_s_mean"], e["gib_s_stdev"]),
             _pm(c["gib_s_mean"], c["gib_s_stdev"])),
            (f"{word} duration (s)", _pm(e["duration_mean_s"], e["duration_stdev_s"]),
             _pm(c["duration_mean_s"], c["duration_stdev_s"]))]
    lines = [f"  {a:<26} {b:<24} {c_}" for a, b, c_ in rows]
    ratio = f["exact_over_corrected"]
    if ratio is not None:
        lines.append(f"  DLIO-exact {word} throughput is {ratio:.3f}x the corrected one "
                     f"({(ratio - 1) * 100:+.1f} %)")
    return lines


def format_report(res: dict) -> str:
    figs = res["figures"]
    lines = [f"MLPerf Storage checkpointing: {res['preset']}, {figs['processes']} processes on "
             f"{figs['hosts']} host(s), phase {res['phase']}, scale {res['scale']:g}",
             f"storage under test: {res['storage']}",
             f"checkpoint size (DLIO checkpoint_size_GB, GiB): {figs['checkpoint_size_gib']:.6f}", "",
             f"  {'':<26} {'DLIO-exact (rank 0)':<24} corrected (slowest rank; all bytes, first start to last end)"]
    for op in ("save", "load"):
        if figs.get(op):
            lines += _op_lines(op, figs[op])
    lines.append("")
    for node, c in sorted((r["node"], r["cache"]) for r in res["ranks"] if r.get("cache")):
        lines.append(f"page cache before the reads, node {node}: {c['why']}")
    if res.get("rule_30s"):
        lines.append(res["rule_30s"]["line"])
    drains = [rec["drain_s"] for r in res["ranks"] for rec in r["saves"] if "drain_s" in rec]
    if drains:
        lines.append(f"drain to the global tier after each save (not in the figures): mean {sum(drains) / len(drains):.4f} s per rank")
    if res["scale"] < 1:
        lines.append(f"at run.scale {res['scale']:g} the bytes and so the durations are that share of the full "
                     "size; throughputs are this run's rates")
    lines.append(f"DLIO-compatible results: {res['dlio_folder']} (summary.json, per-rank stats, dlio.log, results.csv)")
    return "\n".join(lines) + "\n"


def _slim(rank: dict) -> dict:
    """A rank's records for results.json, without the host's /proc dumps (they are in summary.json)."""
    host = rank.get("host")
    if host:
        host = {k: v for k, v in host.items() if k not in ("cpuinfo", "meminfo")}
    return {**rank, "host": host}


def write_outputs(cfg, ranks: list[dict], out: Path) -> dict:
    """Rank 0 after the gather: the DLIO folder, results.json, report.txt, the write-end mark."""
    out = Path(out)
    phase = cfg.checkpoint.phase
    folder = out / outdir.dlio_folder(phase)
    write_folder(folder, ranks, phase=phase, run=out.name, model=cfg.model.name)
    res = {"protocol": "mlperf", "phase": phase, "preset": cfg.model.name, "scale": cfg.run.scale,
           "storage": ranks[0]["storage"], "figures": figures(ranks), "rule_30s": rule_30s(out, ranks, phase),
           "dlio_folder": str(folder), "ranks": [_slim(r) for r in ranks]}
    if phase in ("both", "write"):
        _mark_write_end(out, ranks)
    write_file(out / outdir.RESULTS, json.dumps(res, indent=1, allow_nan=False) + "\n")
    write_file(out / outdir.REPORT, format_report(res))
    return res
