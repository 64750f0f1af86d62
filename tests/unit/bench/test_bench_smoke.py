"""Smoke test of the benchmark suite (``python -m bench``): it runs, measures the bytes it was asked
to, and its figures are the same bytes over both sides' times.

One tiny pair (a few MiB, no warm-up) of the cheapest benchmarks: the local write through the real
CLI and worker process, the directory drain and the MLPerf pairs in this process. Never an absolute
time or a target: the machine is shared and the suite is a measurement, not a test. What a pair's
figures are made of is checked on timings of its own (``test_a_pair_alternates...``).
"""
import json
import math
import subprocess
import sys

import pytest

from bench.benches import throughput_samples
from bench.common import Params, result, run_rounds
from bench.suite import BENCHMARKS, format_table, select
from bench.worker import run as run_in_process
from paths import ROOT

KEYS = ("ratio", "ours", "baseline", "unit", "min", "max", "pairs", "target", "met", "better", "ratio_is")
TINY = dict(pairs=1, warmup=0, rank_gib=0.004, quick=True)
GIB = 1 << 30


def test_a_pair_alternates_and_its_figures_are_the_same_bytes_over_each_sides_time():
    """On timings of its own: the warm-up round is dropped, ours goes first on even rounds and the
    baseline on odd ones, and 4 GiB in 2 s (ours) against 1 s (the baseline) is 2 GiB/s against 4,
    a ratio of 0.5 (the medians of the kept rounds)."""
    order = []

    def side(name, seconds):
        return lambda i: order.append((name, i)) or seconds[i]
    rounds = run_rounds(Params(pairs=2, warmup=1), {"ours": side("ours", [9.0, 2.0, 2.0]),
                                                   "baseline": side("baseline", [9.0, 1.0, 1.0])})
    assert order == [("ours", 0), ("baseline", 0), ("baseline", 1), ("ours", 1), ("ours", 2), ("baseline", 2)]
    r = result(**throughput_samples([(x["ours"], x["baseline"]) for x in rounds], 4 * GIB), unit="GiB/s",
               target=0.9, better="higher", ratio_is="", ours_is="", baseline_is="")
    assert (r["ours"], r["baseline"], r["ratio"], r["pairs"], r["met"]) == (2.0, 4.0, 0.5, 2, False)


#: the issue's targets (issue 58: the verified drain at 0.95 of cp + sync); the rest 0.9
TARGETS = {"drain_dir": 0.95}


def check_throughput_result(key, r):
    assert "error" not in r, r.get("error")
    for k in KEYS:
        assert k in r, (key, k)
    assert r["pairs"] == 1 and r["unit"] == "GiB/s" and r["better"] == "higher"
    assert r["ratio"] > 0 and r["ours"] > 0 and r["baseline"] > 0
    assert r["min"] <= r["ratio"] <= r["max"]
    # a throughput ratio on the same bytes: ours / baseline, consistent with both sides
    assert math.isclose(r["ratio"], r["ours"] / r["baseline"], rel_tol=1e-6)
    assert r["target"] == TARGETS.get(key, 0.9) and isinstance(r["met"], bool)
    # the bytes asked for (a rank of rank_gib), and little more: a file's headers
    assert TINY["rank_gib"] * GIB <= r["bytes"] <= 1.05 * TINY["rank_gib"] * GIB, (key, r["bytes"])
    # each side's throughput is those bytes over its own time
    (ours_s,), (base_s,) = r["samples"]["ours"], r["samples"]["baseline"]
    assert math.isclose(r["ours"], ours_s) and math.isclose(r["baseline"], base_s)


def test_cli_local_write_pair(tmp_path):
    work = tmp_path / "work"
    cmd = [sys.executable, "-m", "bench", "--only", "local_write", "--json", "--pairs", "1", "--warmup", "0",
           "--rank-gib", str(TINY["rank_gib"]), "--quick", "--workdir", str(work), "--timeout", "120"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(proc.stdout)
    assert list(res) == ["local_write"]
    check_throughput_result("local_write", res["local_write"])
    assert not list(work.glob("*/*")), "the workdir is left clean"


def test_drain_dir_pair_in_process(tmp_path):
    res = run_in_process("drain_dir", Params(workdir=str(tmp_path), **TINY))
    assert list(res) == ["drain_dir", "drain_verify_cost"]
    check_throughput_result("drain_dir", res["drain_dir"])
    assert "verify checksum" in res["drain_dir"]["ours_is"]  # the default drain is the one measured
    cost = res["drain_verify_cost"]
    assert "error" not in cost and all(k in cost for k in KEYS)
    assert cost["pairs"] == 1 and cost["unit"] == "s" and cost["better"] == "lower"
    assert cost["target"] is None and cost["met"] is None  # a measured cost, not a goal
    # a time ratio of the same round: checksum drain seconds over size-only drain seconds
    assert cost["ours"] > 0 and cost["baseline"] > 0
    assert math.isclose(cost["ratio"], cost["ours"] / cost["baseline"], rel_tol=1e-6)
    assert cost["bytes"] == res["drain_dir"]["bytes"]


def test_mlperf_write_pair_in_process(tmp_path):
    res = run_in_process("mlperf_write", Params(workdir=str(tmp_path), **TINY))
    assert list(res) == ["mlperf_write"]
    check_throughput_result("mlperf_write", res["mlperf_write"])
    assert res["mlperf_write"]["files"] == 2  # rank 0's model and optimizer files (ZeRO-3)


def test_mlperf_read_pair_in_process(tmp_path):
    res = run_in_process("mlperf_read", Params(workdir=str(tmp_path), **TINY))
    assert list(res) == ["mlperf_read"]
    check_throughput_result("mlperf_read", res["mlperf_read"])
    assert res["mlperf_read"]["files"] == 2


def test_select_and_table():
    from bench.rgw import available
    # every benchmark; the Ceph RGW one only where radosgw is installed (.ci/test installs it)
    assert select(None) == [b for b in BENCHMARKS if b != "s3_rgw" or available()]
    assert "s3_rgw" in BENCHMARKS and "s3_rgw" in select(["s3_rgw"])
    assert select(["async_stall_vs_dcp_best", "load"]) == ["load", "async_stall"]
    with pytest.raises(SystemExit):
        select(["nope"])
    table = format_table({"load": {"error": "boom", "met": False, "target": 0.9, "better": "higher"}}, ["hdr"])
    assert "ERROR" in table and "boom" in table


def test_gpu_bench_skips_without_cuda_and_its_figures_keep_their_shape():
    from types import SimpleNamespace

    import torch

    from bench import gpu
    if not torch.cuda.is_available():
        proc = subprocess.run([sys.executable, "-m", "bench.gpu"], cwd=ROOT, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0 and proc.stdout.startswith("skipped: no CUDA"), proc.stdout + proc.stderr
    # the figures from synthetic rounds: our stall 0.1 s against a 0.09 s floor and 0.4 s DCP staging
    rounds = [{"async": 0.1, "floor_d2h": 0.09, "dcp_pinned": 0.4, "dcp_default": 3.0, "restore_h2d": 0.1,
               "floor_h2d": 0.09}] * 3
    state = SimpleNamespace(nbytes=4 << 30, tensors=lambda: iter(range(8)),
                            stager=SimpleNamespace(describe=lambda: {"bucketed": False}))
    res = gpu._results(rounds, [SimpleNamespace(d2h_s=0.095)] * 3, state)
    assert list(res) == ["gpu_async_stall_vs_floor", "gpu_async_stall_vs_dcp_pinned",
                         "gpu_async_stall_vs_dcp_default", "gpu_restore_h2d_vs_floor"]
    floor, dcp, default, h2d = res.values()
    assert math.isclose(floor["ratio"], 0.1 / 0.09) and floor["target"] == 1.2 and floor["met"] is True
    assert math.isclose(dcp["ratio"], 0.25) and dcp["met"] is True and default["met"] is None
    assert math.isclose(h2d["ratio"], 0.9) and h2d["better"] == "higher" and h2d["met"] is True
    assert math.isclose(h2d["ours"], 40.0) and floor["async_d2h_s"] == 0.095
    assert "ERROR" not in format_table(res, ["hdr"])


def test_emulator_cpu_leaves_out_the_state_update_of_the_steps_in_its_window():
    """The footprint's CPU figure is the emulator's own: each step begun inside an idle window
    gives back the update CPU per step the rank measured (the optimizer's stand-in)."""
    from bench.realrun import update_cpu_in
    events = [{"rank": 0, "kind": "stall", "start": 1.0, "end": 1.1}]
    events += [{"rank": 0, "kind": "compute", "start": t, "end": t + 0.4} for t in (0.0, 0.5, 1.5, 2.0)]
    events += [{"rank": 1, "kind": "compute", "start": 0.2, "end": 0.6}]
    results = {"modes": {"async": {"update_cpu_per_step_s": 0.01}},
               "per_rank": [{"rank": 0, "records": [{"mode": "async", "start": 100.0}]}],
               "timeline": {"async": events}}
    # the mode began at 99.0: steps at 99.0 and 99.5 lie in [99.0, 100.1], the one at 100.5 does not
    assert update_cpu_in(results, 0, 99.0, 100.1) == pytest.approx(0.02)
    assert update_cpu_in(results, 0, 100.2, 101.6) == pytest.approx(0.02)
    assert update_cpu_in(results, 0, 200.0, 201.0) == 0.0


def test_the_footprint_is_measured_at_a_real_ranks_size_and_the_smoke_tests_at_theirs():
    """peak_rss's 10 % allowance over state + staging is a real rank's (issue 58): at 1 GiB the fixed
    0.2 GiB of Python and torch alone was 11 %. The full bench's rank holds over 2 GiB; --quick keeps
    the smoke test's tiny rank."""
    from bench.realrun import footprint_rank_gib, rank_scale
    from bench.suite import build_parser
    args = build_parser().parse_args([])
    full = Params(footprint_rank_gib=args.footprint_rank_gib)
    assert footprint_rank_gib(full) >= 2 and rank_scale(footprint_rank_gib(full)) > rank_scale(Params().rank_gib)
    assert footprint_rank_gib(Params(**TINY)) == TINY["rank_gib"]
