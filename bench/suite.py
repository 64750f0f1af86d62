"""``python -m bench``: the project's paths against same-run baselines (issue 7).

Usage::

    python -m bench                      # everything, table (about 6-8 minutes here)
    python -m bench --json               # one JSON object, one key per benchmark
    python -m bench --only load async_stall --pairs 7 --rank-gib 0.5

Each benchmark runs in its own worker process (``bench.worker``); inside it
our path and the baseline alternate on the same files and byte counts, one
warm-up pair first, then ``--pairs`` kept pairs. The ratio is the median of
the per-pair ratios, oriented per benchmark (``better`` says which way):

============================  ==========================================  ======  ==========
key                           ratio                                       better  target
============================  ==========================================  ======  ==========
local_write                   throughput ours / dd conv=fsync             higher  >= 0.9
mlperf_write                  throughput MLPerf-mode save / dd conv=fsync higher  >= 0.9
mlperf_read                   throughput MLPerf-mode load / DLIO's call  higher  >= 0.9
drain_dir                     throughput ours (Drainer) / cp + sync -f    higher  >= 0.95
drain_verify_cost             drain verify checksum / verify size         lower   (none)
drain_s3                      throughput S3Tier.put_file / upload_file    higher  >= 0.9
restore_s3                    throughput Restorer.load from S3 (moto) /   higher  >= 0.9
                              download_fileobj into memory
drain_s3_rgw                  the same on a Ceph RGW (when Ceph is here)  higher  >= 0.9
restore_s3_rgw                throughput Restorer.load from S3 (RGW) /    higher  >= 0.9
                              download_fileobj into memory
load                          throughput Restorer.load / dd read          higher  >= 0.9
dcp_save                      throughput engine dcp's save / bare         higher  >= 0.9
                              dcp.save, same state and folder
memory_save                   time save_rank_file to /dev/shm / memcpy    lower   <= 1.2
                              (glibc's)
peer_send                     throughput peer transport (gloo) / TCP      higher  >= 0.9
memory_rss                    (rank peak RSS + memory tier's peak) /      lower   <= 1.1
                              (state + staging + tier copies), real run
async_stall_vs_dcp_best       stall ours async / DCP reused stager staged lower   <= 1.0
async_stall_vs_floor          stall ours async / bare copy, warm buffers  lower   <= 1.5
async_stall_vs_dcp_default    stall ours async / dcp.async_save default   lower   <= 1.0
async_stall_vs_sync           stall ours async / ours sync                lower   <= 0.05
peak_rss                      rank peak RSS / (state + staging)           lower   <= 1.1
emulator_cpu                  rank CPU less state update / wall, idle     lower   <= 0.02
scaling                       aggregate save ours / N parallel dd         higher  (none)
============================  ==========================================  ======  ==========

``ours`` and ``baseline`` are the medians of the two sides in ``unit``
(GiB/s for throughputs, seconds for stalls, GiB for memory).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

from emulator.launch.progress import Counted, Display
from tiers.safepath import write_file

from .common import Params, remove, work_folder

#: benchmark (worker) name -> the result keys it produces, in run order
BENCHMARKS = {
    "local_write": ["local_write"],
    "mlperf_write": ["mlperf_write"],
    "mlperf_read": ["mlperf_read"],
    "drain_dir": ["drain_dir", "drain_verify_cost"],
    "drain_s3": ["drain_s3", "restore_s3"],
    "s3_rgw": ["drain_s3_rgw", "restore_s3_rgw"],  # only where Ceph is installed (bench/rgw.py)
    "load": ["load"],
    "dcp_save": ["dcp_save"],
    "memory_tiers": ["memory_save", "peer_send", "memory_rss"],
    "async_stall": ["async_stall_vs_dcp_best", "async_stall_vs_floor", "async_stall_vs_dcp_default",
                    "async_stall_vs_sync"],
    "footprint": ["peak_rss", "emulator_cpu"],
    "scaling": ["scaling"],
}
KEY_TO_BENCH = {k: b for b, keys in BENCHMARKS.items() for k in keys}


def select(only: list[str] | None) -> list[str]:
    if not only:
        from .rgw import available
        return [b for b in BENCHMARKS if b != "s3_rgw" or available()]
    chosen = set()
    for name in only:
        if name in BENCHMARKS:
            chosen.add(name)
        elif name in KEY_TO_BENCH:
            chosen.add(KEY_TO_BENCH[name])
        else:
            known = ", ".join(list(BENCHMARKS) + [k for k in KEY_TO_BENCH if k not in BENCHMARKS])
            raise SystemExit(f"bench: unknown benchmark {name!r} (known: {known})")
    return [b for b in BENCHMARKS if b in chosen]


def run_worker(name: str, params: Params, timeout: float) -> dict:
    """Run one benchmark in a fresh process; {key: result}, or error entries for its keys. The
    worker's answer is a file in the (private) working folder, never a name in the temporary one."""
    out = os.path.join(params.workdir, f".result-{name}.json")
    remove(out)
    t = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "bench.worker", name, params.to_json(), out],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
        if proc.returncode == 0 and os.path.exists(out):
            res = json.loads(Path(out).read_text())
            for v in res.values():
                v["seconds"] = time.perf_counter() - t
            return res
        tail = proc.stdout.decode(errors="replace").strip().splitlines()[-15:]
        error = f"worker exited with status {proc.returncode}: " + " | ".join(tail)
    except subprocess.TimeoutExpired:
        error = f"timed out after {timeout:.0f} s"
    finally:
        if os.path.exists(out):
            os.unlink(out)
    return {k: {"error": error, "ratio": None, "ours": None, "baseline": None, "unit": "", "min": None,
                "max": None, "pairs": 0, "target": None, "met": False} for k in BENCHMARKS[name]}


# --------------------------------------------------------------------------- output

def _num(v, unit: str = "") -> str:
    if v is None or v != v:
        return "-"
    if unit == "s" and v < 1:
        return f"{v * 1000:.0f} ms"
    return f"{v:.3g}" + (f" {unit}" if unit else "")


def _target(r: dict) -> str:
    t = r.get("target")
    if t is None:
        return "-"
    return (">= " if r.get("better") == "higher" else "<= ") + f"{t:g}"


def format_table(results: dict, header: list[str]) -> str:
    rows = [("benchmark", "ours", "baseline", "ratio", "min-max", "pairs", "target", "met")]
    for key, r in results.items():
        if "error" in r:
            rows.append((key, "-", "-", "ERROR", "-", "0", _target(r), "no"))
            continue
        unit = r["unit"]
        met = "-" if r["met"] is None else ("yes" if r["met"] else "NO")
        rows.append((key, _num(r["ours"], unit), _num(r["baseline"], unit), f"{r['ratio']:.3f}",
                     f"{r['min']:.3f}-{r['max']:.3f}", str(r["pairs"]), _target(r), met))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = list(header) + [""]
    for n, row in enumerate(rows):
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append("")
    for key, r in results.items():
        if "error" in r:
            lines.append(f"{key}: ERROR {r['error']}")
            continue
        la = r.get("loadavg_1min") or []
        load = f"; load avg {la[0]:.1f} -> {la[1]:.1f}" if len(la) == 2 else ""
        lines.append(f"{key}: ratio = {r['ratio_is']} ({r['better']} is better{load})")
        lines.append(f"    ours:     {r['ours_is']}")
        lines.append(f"    baseline: {r['baseline_is']}")
        for note in _notes(key, r):
            lines.append(f"    {note}")
    return "\n".join(lines) + "\n"


def _notes(key: str, r: dict) -> list[str]:
    gib = 1 << 30
    out = []
    if "bytes" in r:
        out.append(f"bytes: {r['bytes'] / gib:.3f} GiB per sample")
    if key == "load":
        out.append(f"page cache: {r['cache']}; probe: {r['drop_cache']}")
    if key == "memory_save":
        how = "fused with the copy (tiers._copycrc)" if r["fused_copy"] else "after each piece's copy (not fused)"
        out.append(f"process CPU time ours / memcpy {r['cpu_ratio']:.2f} (both single-threaded); CRC32C {how}")
        out.append(f"torch copy_ of the same tensors (stores through the cache): {r['torch_copy_s']:.3f} s; "
                   f"ours / that {r['ratio_vs_torch_copy']:.2f}")
        out.append(f"the same save into a new file each time (no recycling): {r['fresh_save_s']:.3f} s, "
                   f"x{r['ratio_fresh_save']:.2f} the memcpy")
        out.append(f"bare write of the same tensors to a new file on /dev/shm: {r['tmpfs_write_s']:.3f} s; "
                   f"ours / that {r['ratio_vs_tmpfs_write']:.3f}; over a kept file {r['tmpfs_reused_write_s']:.3f} s "
                   f"(x{r['ratio_tmpfs_reused_write']:.2f} the memcpy); CRC32C alone {r['crc_s']:.3f} s "
                   f"(x{r['ratio_crc']:.2f})")
    if key == "async_stall_vs_dcp_best":  # once for the four async_stall rows
        out.append(f"breakdown (median s): async snapshot {r['async_snapshot_s']:.3f}, sync local write "
                   f"{r['sync_local_write_s']:.3f}, sync drain {r['sync_drain_s']:.3f}")
    if key in ("drain_s3", "drain_s3_rgw", "restore_s3", "restore_s3_rgw"):
        best = sorted(r["transfer_config_search"], key=lambda x: x["seconds"])[:3]
        out.append("TransferConfig search (best 3): " +
                   "; ".join(f"{b['config']}: {b['gib_s']:.3f} GiB/s" for b in best))
    if key == "peak_rss":
        out.append(f"state {r['state_bytes'] / gib:.3f} GiB; peak anon {r['peak_anon_bytes'] / gib:.3f} GiB, "
                   f"peak file-backed {r['peak_file_bytes'] / gib:.3f} GiB; python+torch floor "
                   f"{r['import_floor_bytes'] / gib:.3f} GiB")
        out.append(f"peak RSS / budget during saves {r['ratio_save_phase']:.3f}, during loads "
                   f"{r['ratio_load_phase']:.3f}; without the import floor {r['ratio_without_floor']:.3f}")
    if key == "memory_rss":
        out.append(f"state {r['state_bytes'] / gib:.3f} GiB; rank peak RSS {r['rank_peak_rss_bytes'] / gib:.3f} GiB "
                   f"+ memory tier {r['tier_peak_bytes'] / gib:.3f} GiB ({r['tier_copies']} copies budgeted); "
                   f"python+torch floor {r['import_floor_bytes'] / gib:.3f} GiB; without it "
                   f"{r['ratio_without_floor']:.3f}; the run's own report says x{r['report_ratio']:.2f}")
    if key == "emulator_cpu":
        out.append(f"the state's update (the optimizer's stand-in, excluded above): "
                   f"{(r['update_cpu_fraction'] or 0):.1%} CPU; with it {(r['ratio_with_update'] or 0):.3f}")
        out.append(f"{r['windows']} windows, {r['baseline']:.1f} s; whole run incl. checkpoints: "
                   f"{r['whole_run_cpu_fraction']:.1%} CPU; launcher (torchrun + cli) in the windows: "
                   f"{(r['launcher_cpu_fraction'] or 0):.2%}")
    if key == "scaling":
        out.append("ranks  rank GiB  ours GiB/s  worst rank s  dd GiB/s  dd worst s  ratio  speedup  peak RSS ratio")
        for row in r["rows"]:
            out.append(f"{row['ranks']:5d}  {row['rank_bytes'] / gib:8.3f}  {row['save_gib_s']:10.3f}  "
                       f"{row['worst_rank_s']:12.3f}  {row['dd_gib_s']:8.3f}  {row['dd_worst_s']:10.3f}  "
                       f"{row['ratio']:5.2f}  {row['speedup_vs_1_rank'] or 0:7.2f}  {row['peak_rss_ratio']:14.2f}")
    return out


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


def _finite(obj):
    """NaN (a benchmark with no usable sample) as null, so the JSON is strict."""
    if isinstance(obj, float) and obj != obj:
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def machine_header(params: Params, workdir: Path) -> list[str]:
    mem = 0
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    fs = subprocess.run(["df", "-T", str(workdir)], capture_output=True, text=True).stdout.splitlines()[-1:]
    return [
        f"ckpt-emu bench: {os.cpu_count()} cores, {mem / (1 << 30):.0f} GiB RAM, {platform.release()}, "
        f"python {platform.python_version()}, torch {_version('torch')}, load avg {os.getloadavg()[0]:.1f}",
        f"  workdir {workdir} ({fs[0].split()[1] if fs else '?'}); rank {params.rank_gib:g} GiB, "
        f"{params.pairs} pairs after {params.warmup} warm-up, S3 object {params.s3_mib} MiB, "
        f"scaling {params.scaling_ranks} x {params.scaling_rank_gib:g} GiB, footprint "
        f"{params.footprint_rank_gib:g} GiB, torch threads {params.threads}",
    ]


# --------------------------------------------------------------------------- CLI

def build_parser() -> argparse.ArgumentParser:
    d = Params()
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="+", metavar="NAME",
                    help=f"run only these benchmarks or result keys ({', '.join(BENCHMARKS)})")
    ap.add_argument("--json", action="store_true", help="print one JSON object (one key per benchmark)")
    ap.add_argument("--pairs", type=int, default=d.pairs, help=f"kept pairs per benchmark (default {d.pairs})")
    ap.add_argument("--warmup", type=int, default=d.warmup, help=f"warm-up pairs, discarded (default {d.warmup})")
    ap.add_argument("--rank-gib", type=float, default=d.rank_gib, help=f"state per rank, GiB (default {d.rank_gib:g})")
    ap.add_argument("--s3-mib", type=int, default=d.s3_mib, help=f"S3 object size, MiB (default {d.s3_mib})")
    ap.add_argument("--scaling-ranks", type=int, nargs="+", default=d.scaling_ranks,
                    help="rank counts of the scaling benchmark (default 1 2 4 8)")
    ap.add_argument("--scaling-rank-gib", type=float, default=d.scaling_rank_gib,
                    help=f"state per rank in the scaling runs, GiB (default {d.scaling_rank_gib:g})")
    ap.add_argument("--footprint-rank-gib", type=float, default=d.footprint_rank_gib,
                    help=f"state of the footprint's rank, GiB (default {d.footprint_rank_gib:g})")
    ap.add_argument("--threads", type=int, default=d.threads,
                    help="torch threads in the in-process benchmarks (default 1, like run.threads_per_rank)")
    ap.add_argument("--no-drop-cache", action="store_true", help="never drop the page cache (load: warm vs warm)")
    ap.add_argument("--workdir", help="where files are written (default: a fresh folder in the temp dir)")
    ap.add_argument("--out", help="also write the JSON object to this file")
    ap.add_argument("--timeout", type=float, default=900, help="seconds allowed per benchmark (default 900)")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed or a benchmark failed")
    ap.add_argument("--quick", action="store_true", help=argparse.SUPPRESS)  # smoke test: no extras
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    names = select(args.only)
    if args.pairs < 1 or args.warmup < 0 or args.rank_gib <= 0 or args.s3_mib < 1 \
            or args.footprint_rank_gib <= 0:
        raise SystemExit("bench: --pairs must be >= 1, --warmup >= 0, --rank-gib, --footprint-rank-gib and --s3-mib > 0")
    workdir, own_dir = work_folder(args.workdir, "ckpt-emu-bench-")
    params = Params(pairs=args.pairs, warmup=args.warmup, rank_gib=args.rank_gib, workdir=str(workdir),
                    s3_mib=args.s3_mib, threads=args.threads, drop_cache=not args.no_drop_cache,
                    scaling_ranks=args.scaling_ranks, scaling_rank_gib=args.scaling_rank_gib,
                    footprint_rank_gib=args.footprint_rank_gib, quick=args.quick)
    header = machine_header(params, workdir)
    log = sys.stderr
    if args.json:  # the table repeats the header otherwise
        for line in header:
            print(line, file=log)
    results: dict = {}
    progress = Counted(len(names), "benchmarks", label="bench: ", display=Display(log))
    try:
        for name in names:
            t = time.perf_counter()
            progress.display.say(f"[bench] {name} ...")
            with progress.running(name):
                res = run_worker(name, params, args.timeout)
            for key in BENCHMARKS[name]:
                r = res.get(key) or {"error": "worker returned no result", "met": False}
                results[key] = r
                status = r.get("error") or f"ratio {r['ratio']:.3f} (target {_target(r)}, met {r['met']})"
                progress.display.say(f"[bench]   {key}: {status}")
            progress.display.say(f"[bench]   {time.perf_counter() - t:.0f} s")
            progress.advance(name)
    finally:
        progress.close()
        if own_dir:
            shutil.rmtree(workdir, ignore_errors=True)
    text = json.dumps(_finite(results), indent=1, allow_nan=False)
    if args.out:
        write_file(args.out, text + "\n", what="--out")  # renamed into place: never through a link there
    if args.json:
        print(text)
    else:
        print(format_table(results, header), end="")
    if args.strict and any(r.get("met") is False for r in results.values()):
        return 1
    return 0
