"""MLPerf Storage's checkpointing protocol in real runs: DLIO's file names and sizes, fsync, reads and the
cache rule, DLIO's summary figures, two nodes, the separate read phase and its 30 s rule, compare
against DLIO.
"""
from __future__ import annotations

import json
import math
import re
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from emu import ckpt_emu, free_port, small_config
from mlperf_runs import SAVES, mlperf_config  # noqa: F401 - helpers and fixtures shared with tests/unit/

GIB = 1 << 30


TS = "%Y-%m-%dT%H:%M:%S.%f"


SUMMARY_KEYS = {"start", "end", "num_accelerators", "num_hosts", "hostname", "host_cpu_count",
                "host_processor_name", "host_memory_GB", "potential_caching", "host_cpuinfo", "host_meminfo",
                "data_size_per_host_GB", "num_files_train", "num_files_eval", "num_samples_per_file", "epochs",
                "metric"}


METRIC_KEYS = {f"{op}_checkpoint_{what}" for op in ("save", "load")
               for what in ("io_mean_GB_per_second", "io_stdev_GB_per_second", "duration_mean_seconds",
                            "duration_stdev_seconds")} | {"checkpoint_size_GB"}


def strict_json(path: Path):
    """json.loads that refuses NaN and Infinity, as a strict parser does."""
    def refuse(token):
        raise ValueError(f"{path}: non-JSON constant {token}")
    return json.loads(Path(path).read_text(), parse_constant=refuse)


def load_cfg(tmp: Path):
    from emulator.config import from_mapping
    return from_mapping(json.loads((tmp / "out" / "config.json").read_text()))


def fsynced_paths(trace: Path) -> set[str]:
    """Paths of the files fsync/fdatasync was called on (strace -y prints the fd's path; a call
    another thread interrupted ends ``<unfinished ...>``, and a failed one fails the run)."""
    out = set()
    for line in trace.read_text(errors="replace").splitlines():
        m = re.search(r"\b(?:fsync|fdatasync)\(\d+<([^>]*)>", line)
        if m:
            out.add(m.group(1))
    return out


@pytest.fixture(scope="module")
def eight_ranks(tmp_path_factory):
    """One 8-rank run, phase both, under ``strace -f -y -e trace=fsync,fdatasync`` when present."""
    tmp = tmp_path_factory.mktemp("mlperf8")
    cfg = mlperf_config(tmp)
    cmd = [sys.executable, "-m", "emulator.cli", "run", str(cfg), "--quiet"]
    trace = tmp / "strace.txt"
    if shutil.which("strace"):
        cmd = ["strace", "-f", "-y", "-qq", "-e", "trace=fsync,fdatasync", "-o", str(trace)] + cmd
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp, (trace if trace.exists() else None), proc.stdout


def test_files_are_named_and_sized_as_dlio_writes_them(eight_ranks):
    from emulator import sizing
    from emulator.mlperf.protocol import rank_files
    tmp, _, _ = eight_ranks
    cfg = load_cfg(tmp)
    glob = tmp / "global"
    assert sorted(p.name for p in glob.iterdir() if not p.name.startswith(".")) == \
        [f"global_epoch1_step{s}" for s in range(1, SAVES + 1)]
    want = {f"zero_pp_rank_{r}_mp_rank_0_{kind}_states.pt" for r in range(8) for kind in ("model", "optim")}
    for step in range(1, SAVES + 1):
        folder = glob / f"global_epoch1_step{step}"
        assert {p.name for p in folder.iterdir()} == want
        for rank in range(8):
            files = rank_files(cfg, rank)
            size = sizing.rank_size(cfg.model, cfg.parallelism, rank)
            tensors = sum(s.nbytes for f in files for s in f.specs)
            # the scaled shares of the MLPerf sizing (rounding: at least one row per tensor)
            assert math.isclose(tensors, size.total_bytes * cfg.run.scale, rel_tol=0.02), (rank, tensors)
            for f in files:
                on_disk = (folder / f.name).stat().st_size
                payload = sum(s.nbytes for s in f.specs)
                assert payload <= on_disk <= payload + 64 * 1024 + payload // 100, (f.name, on_disk, payload)


def test_every_file_was_fsynced(eight_ranks):
    tmp, trace, _ = eight_ranks
    if trace is None:
        pytest.skip("strace is not installed: cannot see the fsync calls")
    synced = fsynced_paths(trace)
    files = sorted((tmp / "global").glob("global_epoch1_step*/*.pt"))
    assert len(files) == SAVES * 16
    for f in files:
        # the tier writes a hidden partial sibling, fsyncs it, renames it into place
        hit = [p for p in synced if p.startswith(str(f.parent / f".{f.name}.")) or p == str(f)]
        assert hit, f"{f} was never fsynced"
    for step in range(1, SAVES + 1):  # and the folder that names them
        assert str(tmp / "global" / f"global_epoch1_step{step}") in synced


def _mem_total_bytes() -> int:
    """This host's memory as /proc/meminfo says it, read here (not by the code under test)."""
    with open("/proc/meminfo") as fh:
        kib = next(int(line.split()[1]) for line in fh if line.startswith("MemTotal:"))
    return kib * 1024


def test_single_node_reads_and_the_cache_rule(eight_ranks):
    """The 3x rule's inputs worked out here: the node's checkpoint data (8 ranks' tensors, 3 saves)
    is far under 3x this host's memory, so the rule asks for the drop, and the run (the
    checkpoint files' own pages: no root needed) must have dropped them, and say so."""
    from emulator.mlperf.protocol import rank_files
    tmp, _, stdout = eight_ranks
    cfg = load_cfg(tmp)
    res = strict_json(tmp / "out" / "results.json")
    assert res["protocol"] == "mlperf" and len(res["ranks"]) == 8
    for r in res["ranks"]:
        assert [x["index"] for x in r["saves"]] == [1, 2, 3] and [x["index"] for x in r["loads"]] == [1, 2, 3]
        assert all(x["source_rank"] == r["rank"] for x in r["loads"])  # (r + 8) % 8 on one node of 8
    (cache,) = [r["cache"] for r in res["ranks"] if r["cache"]]
    node_bytes = SAVES * sum(s.nbytes for r in range(8) for f in rank_files(cfg, r) for s in f.specs)
    assert cache["node_bytes"] == node_bytes and cache["memory_bytes"] == _mem_total_bytes()
    assert node_bytes < _mem_total_bytes(), "the run is meant to fit in memory many times over"
    assert cache["needed"] is True and cache["dropped"] is True, cache
    assert cache["why"] == "dropped: the node's checkpoint data is under 3x its memory (the checkpoint files' own pages)"
    assert f"page cache before the reads, node 0: {cache['why']}" in stdout


def test_dlio_summary_and_per_rank_stats_are_dlio_exact(eight_ranks):
    from emulator.mlperf.protocol import rank_files
    tmp, _, _ = eight_ranks
    cfg = load_cfg(tmp)
    folder = tmp / "out" / "dlio"
    summ = strict_json(folder / "summary.json")
    assert set(summ) == SUMMARY_KEYS and set(summ["metric"]) == METRIC_KEYS
    for key in ("start", "end"):
        datetime.strptime(summ[key], TS)
    assert summ["num_accelerators"] == 8 and summ["num_hosts"] == 1
    assert isinstance(summ["host_memory_GB"], list) and isinstance(summ["host_cpu_count"], list)
    size_gib = sum(s.nbytes for r in range(8) for f in rank_files(cfg, r) for s in f.specs) / GIB
    assert math.isclose(summ["metric"]["checkpoint_size_GB"], size_gib, rel_tol=1e-12)
    stats = [strict_json(folder / f"{r}_per_epoch_stats.json") for r in range(8)]
    for st in stats:
        assert list(st) == ["1"]
        want = {"start", "end"} | {f"{op}_ckpt{i}" for op in ("save", "load") for i in range(1, SAVES + 1)}
        assert set(st["1"]) == want
        for op in ("save", "load"):
            for i in range(1, SAVES + 1):
                rec = st["1"][f"{op}_ckpt{i}"]
                assert set(rec) == {"start", "end", "duration", "throughput"}
                d = (datetime.strptime(rec["end"], TS) - datetime.strptime(rec["start"], TS)).total_seconds()
                assert math.isclose(rec["duration"], d, abs_tol=1e-9)
                assert math.isclose(rec["throughput"], size_gib / d, rel_tol=1e-9)
    # DLIO's summary: rank 0's per-checkpoint throughputs, mean and population stdev
    for op in ("save", "load"):
        recs = [stats[0]["1"][f"{op}_ckpt{i}"] for i in range(1, SAVES + 1)]
        rates, durs = [size_gib / x["duration"] for x in recs], [x["duration"] for x in recs]
        m = summ["metric"]
        assert math.isclose(m[f"{op}_checkpoint_io_mean_GB_per_second"], statistics.fmean(rates), rel_tol=1e-9)
        assert math.isclose(m[f"{op}_checkpoint_io_stdev_GB_per_second"], statistics.pstdev(rates),
                            rel_tol=1e-9, abs_tol=1e-12)
        assert math.isclose(m[f"{op}_checkpoint_duration_mean_seconds"], statistics.fmean(durs), rel_tol=1e-9)
    log = (folder / "dlio.log").read_text()
    assert f"[METRIC] Checkpoint save I/O Throughput (GB/second): " \
           f"{summ['metric']['save_checkpoint_io_mean_GB_per_second']:.4f} (" in log
    assert "[METRIC] Checkpoint load duration (seconds): " in log
    header = (folder / "results.csv").read_text().splitlines()[0].split(",")
    for col in ("Write B/W (GiB/s)", "Write Duration (secs)", "Read B/W (GiB/s)", "Read Duration (secs)"):
        assert col in header


def test_report_shows_exact_and_corrected_and_how_far_apart(eight_ranks):
    tmp, _, stdout = eight_ranks
    res = strict_json(tmp / "out" / "results.json")
    for op in ("save", "load"):
        f = res["figures"][op]
        recs = [(x["start"], x["end"], x["bytes"]) for r in res["ranks"] for x in r[f"{op}s"] if x["index"] == 1]
        span = max(e for _, e, _ in recs) - min(s for s, _, _ in recs)
        assert math.isclose(f["per_checkpoint"][0]["gib_s"], sum(b for _, _, b in recs) / GIB / span)
        assert math.isclose(f["per_checkpoint"][0]["slowest_s"], max(e - s for s, e, _ in recs))
        ratio = f["exact_over_corrected"]
        assert math.isclose(ratio, f["dlio_exact"]["gib_s_mean"] / f["corrected"]["gib_s_mean"])
        assert f"DLIO-exact {op} throughput is {ratio:.3f}x the corrected one" in stdout


def _two_nodes(tmp: Path, cfg: Path) -> list:
    port, procs = free_port(), []
    for node in range(2):
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "emulator.cli", "run", str(cfg), "--quiet", "--out", str(tmp / f"out{node}"),
             "--nnodes", "2", "--nproc-per-node", "4", "--rdzv-endpoint", f"127.0.0.1:{port}",
             "--rdzv-id", "mlperf-shift"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return [(p, *p.communicate(timeout=400)) for p in procs]


def test_two_nodes_read_what_the_next_node_wrote(tmp_path):
    """Rank r reads rank (r + 4) % 8's files: another node's, so from the global tier, where the
    local tier's files were drained."""
    from emulator.mlperf.protocol import file_key, rank_files
    cfg_path = mlperf_config(tmp_path, local=True, saves=2, loads=2)
    runs = _two_nodes(tmp_path, cfg_path)
    assert all(p.returncode == 0 for p, _, _ in runs), [e[-2000:] for _, _, e in runs]
    # the rendezvous, not the launch order, decides which agent gets rank 0 and writes the report
    (report,) = [p for p in (tmp_path / "out0" / "results.json", tmp_path / "out1" / "results.json") if p.exists()]
    res = strict_json(report)
    from emulator.config import load_config
    cfg = load_config(str(cfg_path))
    assert res["figures"]["hosts"] == 2
    for r in res["ranks"]:
        src = (r["rank"] + 4) % 8
        for x in r["loads"]:
            assert x["source_rank"] == src and x["tier"] == "global"
            assert x["files"] == [file_key(x["index"], f) for f in rank_files(cfg, src)]
        # every save was drained to the global tier, in time measured around the copy
        assert [x["index"] for x in r["saves"]] == [1, 2] and all(x["drain_s"] > 0 for x in r["saves"]), r["saves"]
    for node in range(2):  # each node's local tier holds only its own ranks' files
        names = {p.name for p in (tmp_path / "local" / f"node{node}" / "global_epoch1_step1").iterdir()}
        assert names == {f"zero_pp_rank_{r}_mp_rank_0_{k}_states.pt" for r in range(4 * node, 4 * node + 4)
                         for k in ("model", "optim")}
    for step in (1, 2):  # ... and the global tier holds every rank's files of each
        assert len(list((tmp_path / "global" / f"global_epoch1_step{step}").iterdir())) == 16, step


def test_separate_read_phase_checks_the_30_second_rule(tmp_path):
    cfg = mlperf_config(tmp_path, ranks=2)
    ckpt_emu("run", cfg, "--quiet", "--phase", "write", check=True)
    res = strict_json(tmp_path / "out" / "results.json")
    assert res["figures"]["load"] is None and all(not r["loads"] for r in res["ranks"])
    written = strict_json(tmp_path / "out" / "dlio-write" / "summary.json")
    assert "load_checkpoint_io_mean_GB_per_second" not in written["metric"]

    read = ckpt_emu("run", cfg, "--quiet", "--phase", "read", check=True)
    rule = strict_json(tmp_path / "out" / "results.json")["rule_30s"]
    # whether the reads began within 30 s is this host's speed at starting a run (a loaded CI host
    # took longer): checked is that the gap is measured from the write phase's end and judged by it
    assert rule["gap_s"] >= 0 and rule["met"] == (rule["gap_s"] <= 30), rule
    verdict = "met" if rule["met"] else "BROKEN"
    assert f"30 s rule: the reads began {rule['gap_s']:.1f} s after the write phase ended: {verdict}" in read.stdout
    summ = strict_json(tmp_path / "out" / "dlio-read" / "summary.json")
    assert summ["metric"]["save_checkpoint_io_mean_GB_per_second"] is None  # DLIO writes NaN here
    assert summ["metric"]["load_checkpoint_io_mean_GB_per_second"] > 0
    assert "NaN" not in (tmp_path / "out" / "dlio-read" / "summary.json").read_text()
    assert strict_json(tmp_path / "out" / "dlio-write" / "summary.json") == written  # kept

    mark = tmp_path / "out" / "mlperf-write.json"
    mark.write_text(json.dumps({**json.loads(mark.read_text()), "end": time.time() - 100}))
    assert strict_json(tmp_path / "out" / "results-write.json")["phase"] == "write"  # the write phase's, kept
    late = ckpt_emu("run", cfg, "--quiet", "--phase", "read", "--force", check=True)  # replaces the first read
    assert re.search(r"30 s rule: the reads began 1\d\d\.\d s after the write phase ended: BROKEN", late.stdout)
    assert strict_json(tmp_path / "out" / "results.json")["rule_30s"]["met"] is False


def test_read_phase_without_writes_is_one_line_and_writes_nothing(tmp_path):
    cfg = mlperf_config(tmp_path, ranks=2)
    proc = ckpt_emu("run", cfg, "--quiet", "--phase", "read")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "run the write phase first" in lines[0]
    assert not (tmp_path / "out").exists()


def dlio_folder(path: Path, *, save: float, load, size: float = 104.7, procs: int = 8, hosts: int = 1) -> Path:
    """A DLIO results folder as DLIO writes it (its keys; bare NaN where it has no figure)."""
    path.mkdir(parents=True)
    metric = {"save_checkpoint_io_mean_GB_per_second": save, "save_checkpoint_io_stdev_GB_per_second": 0.1,
              "save_checkpoint_duration_mean_seconds": size / save, "save_checkpoint_duration_stdev_seconds": 0.5,
              "load_checkpoint_io_mean_GB_per_second": load, "load_checkpoint_io_stdev_GB_per_second": 0.1,
              "load_checkpoint_duration_mean_seconds": size / load if load == load else load,
              "load_checkpoint_duration_stdev_seconds": 0.5, "checkpoint_size_GB": size}
    summ = {"start": "2025-06-01T10:00:00.000000", "end": "2025-06-01T10:20:00.000000", "num_accelerators": procs,
            "num_hosts": hosts, "hostname": "client1", "host_cpu_count": [64] * hosts, "host_processor_name": "x86_64",
            "host_memory_GB": [512.0] * hosts, "potential_caching": [0] * hosts, "host_cpuinfo": {}, "host_meminfo": {},
            "data_size_per_host_GB": 0.0, "num_files_train": 8, "num_files_eval": 0, "num_samples_per_file": 1,
            "epochs": 0, "metric": metric}
    (path / "summary.json").write_text(json.dumps(summ, indent=4))  # NaN stays NaN, as in DLIO
    return path


@pytest.fixture(scope="module")
def our_runs(tmp_path_factory):
    """An MLPerf-protocol run and an emulator run, 2 ranks each."""
    m, e = tmp_path_factory.mktemp("mlperf2"), tmp_path_factory.mktemp("emulator2")
    ckpt_emu("run", mlperf_config(m, ranks=2), "--quiet", check=True)
    ckpt_emu("run", small_config(e, ranks=2), "--quiet", check=True)
    return m / "out", e / "out"


def test_compare_dlio_and_our_runs(tmp_path, our_runs):
    mlperf_out, emu_out = our_runs
    a = dlio_folder(tmp_path / "vendor-a", save=20.0, load=40.0)
    sub = tmp_path / "submission" / "results" / "sysB" / "checkpointing" / "llama3-8b"
    dlio_folder(sub / "20250601_100000", save=10.0, load=float("nan"))  # a write-only DLIO run
    proc = ckpt_emu("compare", a, tmp_path / "submission", mlperf_out, emu_out / "results.json")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "[1] dlio" in out and "[3] ours (mlperf)" in out and "[4] ours (emulator)" in out
    assert re.search(r"^save GiB/s\s+20\s+10 \(x0\.500\)", out, re.M), out
    assert "load GiB/s" not in out.split("ratios")[0]  # the submission's run has no load figure
    assert "left out: load GiB/s, load duration s" in out
    assert re.search(r"^processes\s+8\s+8 \(x1\.000\)\s+2 \(x0\.250\)\s+2 \(x0\.250\)", out, re.M), out
    rows = json.loads(ckpt_emu("compare", mlperf_out, "--json", check=True).stdout)
    res = strict_json(mlperf_out / "results.json")
    assert rows[0]["save_gib_s"] == res["figures"]["save"]["dlio_exact"]["gib_s_mean"]
    assert rows[0]["size_gib"] == strict_json(mlperf_out / "dlio" / "summary.json")["metric"]["checkpoint_size_GB"]
