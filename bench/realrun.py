"""Benchmarks on the real thing: ``ckpt-emu run`` (torchrun, gloo, one process per rank).

While a run goes, a sampler thread reads every rank process's /proc status
(VmHWM, VmRSS, RssAnon, RssFile) and CPU time (utime + stime) every 50 ms;
afterwards the run's results.json says when each checkpoint started and ended
and when the training loop was sleeping, so the samples can be cut into
phases.

- ``scaling``: 1, 2, 4, 8 ranks of the Llama-3 8B layout (``parallelism.ranks=N``,
  ``--scaling-rank-gib`` per rank), sync checkpoints only: aggregate save
  throughput (all ranks' bytes over the slowest rank's local write, MLPerf style)
  and the worst rank's write time, per checkpoint; after each run the same byte
  counts are written by N concurrent ``dd ... conv=fsync`` as the reference.
- ``footprint``: one rank of ``--footprint-rank-gib`` in a sleep-compute run (sync, async,
  loads): its peak RSS against state + staging bytes, and the CPU the rank
  process burns while the loop sleeps and no checkpoint is in flight (metrics,
  bookkeeping, the per-step all-reduce, idle threads) as a fraction of that wall
  time.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from emulator.job.lifeline import rank_of_process

from . import baselines
from .common import GIB, LOWER, Params, median, proc_cpu_seconds, proc_status, remove, result

SAMPLE_S = 0.05
PRESET = "llama3-8b"


# --------------------------------------------------------------------------- process sampling

def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            raw = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        ppid = int(raw[raw.rindex(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def _descendants(root: int, kids: dict[int, list[int]]) -> list[int]:
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        for c in kids.get(pid, ()):
            out.append(c)
            todo.append(c)
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class ProcSampler:
    """Samples the rank processes (and the launcher) below ``root_pid`` until stopped."""

    def __init__(self, root_pid: int):
        self.root = root_pid
        self.procs: dict[int, dict] = {}  # pid -> {"role", "rank", "cpu": [(t, s)], "mem": [(t, status)]}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="proc-sampler", daemon=True)

    def start(self) -> "ProcSampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _discover(self) -> None:
        kids = _children_map()
        agents = set(kids.get(self.root, ()))  # torchrun's agent: the launcher's child
        for pid in [self.root] + _descendants(self.root, kids):
            if pid in self.procs:
                continue
            rank = rank_of_process(pid)
            if rank is not None:
                role = "rank"
            elif pid == self.root:
                role = "cli"
            elif pid in agents and "emulator.rank.agent" in _cmdline(pid):
                role = "torchrun"
            else:
                continue  # the fork server, or a rank not yet named (both have the agent's command line): next round
            self.procs[pid] = {"role": role, "rank": rank, "cpu": [], "mem": []}

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            if n % 5 == 0:
                self._discover()
            n += 1
            for pid, p in self.procs.items():
                t = time.time()
                cpu = proc_cpu_seconds(pid)
                if cpu is None:
                    continue
                p["cpu"].append((t, cpu))
                if p["role"] == "rank":
                    st = proc_status(pid)
                    if st:
                        p["mem"].append((t, st))
            self._stop.wait(SAMPLE_S)

    def ranks(self) -> dict[int, dict]:
        return {p["rank"]: p for p in self.procs.values() if p["role"] == "rank"}

    def by_role(self, role: str) -> list[dict]:
        return [p for p in self.procs.values() if p["role"] == role]


# --------------------------------------------------------------------------- running ckpt-emu

def rank_scale(rank_gib: float) -> float:
    from emulator import sizing
    from emulator.config import load_config
    cfg = load_config(PRESET)
    return min(1.0, rank_gib * GIB / sizing.rank_size(cfg.model, cfg.parallelism, 0).total_bytes)


def run_ckpt_emu(out: Path, overrides: list[str], timeout: float = 900) -> tuple[dict, ProcSampler]:
    """``ckpt-emu run PRESET --out OUT --quiet --set ...`` with a sampler on its process tree."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "emulator.cli", "run", PRESET, "--out", str(out), "--quiet",
           "--set", f"tiers.local.path={out / 'local'}", "--set", f"tiers.global.path={out / 'global'}"]
    for o in overrides:
        cmd += ["--set", o]
    with open(out / "cli.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        sampler = ProcSampler(proc.pid).start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        finally:
            sampler.stop()
    if rc != 0:
        tail = (out / "cli.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"ckpt-emu run failed (exit {rc}):\n{tail}")
    return json.loads((out / "results.json").read_text()), sampler


def _records(results: dict, mode: str) -> dict[int, list[dict]]:
    """{step: [each rank's record]} for one mode."""
    by_step: dict[int, list[dict]] = {}
    for r in results["per_rank"]:
        for rec in r["records"]:
            if rec["mode"] == mode:
                by_step.setdefault(rec["step"], []).append(rec)
    return dict(sorted(by_step.items()))


def _mode_origin(results: dict, mode: str) -> float:
    """Absolute time of the mode's t0 (timeline events are relative to it).

    A rank's first "stall" event of the mode is its first checkpoint record of the
    mode (same start), so their difference is t0.
    """
    for r in results["per_rank"]:
        starts = [rec["start"] for rec in r["records"] if rec["mode"] == mode]
        rel = [e["start"] for e in results["timeline"].get(mode, ()) if e["kind"] == "stall" and e["rank"] == r["rank"]]
        if starts and rel:
            return min(starts) - min(rel)
    raise RuntimeError(f"cannot place mode {mode} in time: no checkpoint recorded")


# --------------------------------------------------------------------------- scaling

def _dd_reference(wd: Path, out: Path, per_rank_bytes: list[int], saves: int, warmup: int) -> tuple[list, list]:
    """The same bytes written by as many concurrent ``dd`` writers as ranks, same filesystem."""
    dd_dir = out / "dd"
    dd_dir.mkdir(exist_ok=True)
    paths = [dd_dir / f"rank{i}.bin" for i in range(len(per_rank_bytes))]
    source = baselines.random_file(wd / "random.bin", max(per_rank_bytes))
    dd_agg, dd_worst = [], []
    for k in range(saves):
        os.sync()
        _, each = baselines.parallel_dd(paths, per_rank_bytes, source)
        for p in paths:
            remove(p)
        if k >= warmup:
            dd_agg.append(sum(per_rank_bytes) / max(each))
            dd_worst.append(max(each))
    return dd_agg, dd_worst


def bench_scaling(params: Params, wd: Path) -> dict:
    scale = rank_scale(params.scaling_rank_gib)
    saves = params.warmup + params.pairs
    rows, ratio_at_max = [], None
    for n in params.scaling_ranks:
        out = wd / f"ranks{n}"
        results, sampler = run_ckpt_emu(out, [
            "parallelism.subset=false", f"parallelism.ranks={n}", f"run.scale={scale!r}",
            f"training.step_seconds={0.05 / scale!r}", "checkpoint.interval_steps=2", f"checkpoint.saves={saves}",
            "checkpoint.loads=0", "checkpoint.modes=[sync]", "checkpoint.keep=1", "checkpoint.baseline=false"])
        steps = list(_records(results, "sync").values())[params.warmup:]
        ours_agg = [sum(x["file_bytes"] for x in s) / max(x["local_write_s"] for x in s) for s in steps]
        ours_worst = [max(x["local_write_s"] for x in s) for s in steps]
        per_rank_bytes = [x["file_bytes"] for x in sorted(steps[0], key=lambda x: x["rank"])]
        dd_agg, dd_worst = _dd_reference(wd, out, per_rank_bytes, saves, params.warmup)
        ratios = [o / d for o, d in zip(ours_agg, dd_agg)]
        state_per_rank = results["bytes"]["run_actual_state"] / n
        hwm = [max((m[1].get("VmHWM", 0) for m in p["mem"]), default=0) for p in sampler.ranks().values()]
        rows.append({
            "ranks": n, "rank_bytes": per_rank_bytes[0], "save_gib_s": median(ours_agg) / GIB,
            "worst_rank_s": median(ours_worst), "dd_gib_s": median(dd_agg) / GIB, "dd_worst_s": median(dd_worst),
            "ratio": median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
            "peak_rss_per_rank_bytes": max(hwm, default=0),
            "peak_rss_ratio": max(hwm, default=0) / (2 * state_per_rank),
            "samples": {"save_gib_s": [x / GIB for x in ours_agg], "worst_rank_s": ours_worst,
                        "dd_gib_s": [x / GIB for x in dd_agg]},
        })
        ratio_at_max = ratios
    one = next((r for r in rows if r["ranks"] == 1), None)
    for r in rows:
        r["speedup_vs_1_rank"] = r["save_gib_s"] / one["save_gib_s"] if one else None
    last = rows[-1]
    return {"scaling": result(
        ratio_samples=ratio_at_max, ours_samples=last["samples"]["save_gib_s"],
        base_samples=last["samples"]["dd_gib_s"], unit="GiB/s", target=None, better="higher",
        ratio_is=f"aggregate save throughput ours/baseline at {last['ranks']} ranks (rows: every rank count)",
        ours_is="ckpt-emu run (torchrun, sync mode): all ranks' bytes / slowest rank's local write, per checkpoint",
        baseline_is="the same per-rank byte counts written by N concurrent dd bs=64M conv=fsync",
        rows=rows, note="no target in issue 7; one ckpt-emu run per rank count, then its dd runs")}


# --------------------------------------------------------------------------- footprint: RSS and CPU

def import_floor_bytes() -> int:
    """RSS of a bare rank process before any state: python + torch + the emulator's imports."""
    code = ("import torch, torch.distributed, emulator.rank.run, emulator.checkpoint.checkpointer, emulator.checkpoint.restore, "
            "emulator.metrics, tiers.directory, prometheus_client\n"
            "print(open('/proc/self/status').read())")
    text = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _idle_windows(results: dict, rank: int, margin: float = 0.3) -> list[tuple[float, float]]:
    """Absolute spans where this rank's loop was training and no checkpoint was in flight."""
    windows = []
    for mode in results["modes"]:
        t0 = _mode_origin(results, mode)
        compute = sorted((t0 + e["start"], t0 + e["end"]) for e in results["timeline"][mode]
                         if e["kind"] == "compute" and e["rank"] == rank)
        if not compute:
            continue
        busy = sorted((rec["start"] - 0.05, rec["start"] + max(rec["stall_s"], rec["complete_s"]) + margin)
                      for s in _records(results, mode).values() for rec in s if rec["rank"] == rank)
        cur = compute[0][0]
        end = compute[-1][1]
        for b0, b1 in busy + [(end, end)]:
            if b0 > cur:
                windows.append((cur, min(b0, end)))
            cur = max(cur, b1)
            if cur >= end:
                break
    return [(a, b) for a, b in windows if b - a >= 0.4]


def update_cpu_in(results: dict, rank: int, a: float, b: float) -> float:
    """CPU seconds of the state's update (the optimizer's stand-in) in the rank's steps that
    began within [a, b]: the mode's measured CPU per step times those steps."""
    total = 0.0
    for mode, figures in results["modes"].items():
        t0 = _mode_origin(results, mode)
        steps = sum(1 for e in results["timeline"][mode]
                    if e["rank"] == rank and e["kind"] in ("compute", "slow_compute") and a <= t0 + e["start"] <= b)
        total += steps * figures.get("update_cpu_per_step_s", 0.0)
    return total


def _cpu_in(samples: list[tuple[float, float]], a: float, b: float) -> tuple[float, float] | None:
    """(cpu seconds, wall seconds) between the first and last sample inside [a, b]."""
    inside = [s for s in samples if a <= s[0] <= b]
    if len(inside) < 2:
        return None
    return inside[-1][1] - inside[0][1], inside[-1][0] - inside[0][0]


def footprint_rank_gib(params: Params) -> float:
    """The footprint's rank size: a real rank's, but the smoke test's tiny one when quick."""
    return params.rank_gib if params.quick else params.footprint_rank_gib


def bench_footprint(params: Params, wd: Path) -> dict:
    scale = rank_scale(footprint_rank_gib(params))
    step_s, interval = 0.5, 6
    saves = 2 if params.quick else 3
    results, sampler = run_ckpt_emu(wd / "run", [
        "parallelism.subset=false", "parallelism.ranks=1", f"run.scale={scale!r}",
        "training.compute=sleep", f"training.step_seconds={step_s / scale!r}", f"checkpoint.interval_steps={interval}",
        f"checkpoint.saves={saves}", "checkpoint.loads=2", "checkpoint.modes=[sync,async]", "checkpoint.baseline=false"])
    ranks = sampler.ranks()
    if 0 not in ranks:
        raise RuntimeError("the sampler never saw the rank process")
    return {"peak_rss": _peak_rss(results, ranks[0]),
            "emulator_cpu": _emulator_cpu(results, ranks[0], sampler, step_s, interval)}


def _peak_rss(results: dict, rank0: dict) -> dict:
    """The rank's peak RSS against its live state plus one staging copy, and when it peaked."""
    state = results["bytes"]["run_actual_state"]
    budget = 2 * state  # live state + staging buffers of the same layout
    mem = rank0["mem"]
    hwm = max(m[1].get("VmHWM", 0) for m in mem)
    # when was RSS highest: during the save phases or the loads that follow them?
    save_end = max(_mode_origin(results, m) + max(e["end"] for e in results["timeline"][m])
                   for m in results["modes"])
    rss_save = max((m[1]["VmRSS"] for m in mem if m[0] <= save_end), default=0)
    rss_load = max((m[1]["VmRSS"] for m in mem if m[0] > save_end), default=0)
    floor = import_floor_bytes()
    return result(
        ratio=hwm / budget, ratio_samples=[hwm / budget], ours_samples=[hwm / GIB], base_samples=[budget / GIB],
        unit="GiB", target=1.1, better=LOWER,
        ratio_is="peak RSS of the rank process / (state + staging bytes)",
        ours_is="VmHWM of the rank process over a whole ckpt-emu run (sync, async, loads)",
        baseline_is="state bytes x 2 (live tensors + staging buffers of the same layout)",
        state_bytes=state, peak_anon_bytes=max(m[1].get("RssAnon", 0) for m in mem),
        peak_file_bytes=max(m[1].get("RssFile", 0) for m in mem),
        peak_rss_save_phase_bytes=rss_save, peak_rss_load_phase_bytes=rss_load,
        ratio_save_phase=rss_save / budget, ratio_load_phase=rss_load / budget,
        import_floor_bytes=floor, ratio_without_floor=(hwm - floor) / budget)


def _emulator_cpu(results: dict, rank0: dict, sampler, step_s: float, interval: int) -> dict:
    """The rank's CPU while its steps sleep and no checkpoint is in flight, over that wall time,
    less the state's update: that is the emulated training's work (on a GPU in a real job),
    reported beside it, not the emulator's own."""
    per_window, cpu_sum, wall_sum, launcher_cpu, update_sum = [], 0.0, 0.0, 0.0, 0.0
    for a, b in _idle_windows(results, 0):
        got = _cpu_in(rank0["cpu"], a, b)
        if got is None or got[1] <= 0:
            continue
        update = update_cpu_in(results, 0, a, b)
        cpu_sum, wall_sum, update_sum = cpu_sum + got[0] - update, wall_sum + got[1], update_sum + update
        per_window.append((got[0] - update) / got[1])
        for p in sampler.by_role("torchrun") + sampler.by_role("cli"):  # reported apart: not a rank
            lg = _cpu_in(p["cpu"], a, b)
            if lg:
                launcher_cpu += lg[0]
    cpu = rank0["cpu"]
    whole = cpu[-1][1] - cpu[0][1] if len(cpu) > 1 else 0.0
    whole_wall = cpu[-1][0] - cpu[0][0] if len(cpu) > 1 else 0.0
    return result(
        ratio=cpu_sum / wall_sum if wall_sum else float("nan"), ratio_samples=per_window,
        ours_samples=[cpu_sum], base_samples=[wall_sum], unit="s", target=0.02, better=LOWER,
        ratio_is="rank process CPU seconds, less the state's update, / wall seconds while sleeping steps run "
                 "and no checkpoint is in flight",
        ours_is="utime+stime of the rank process (all threads) in those windows (/proc, 50 ms samples), less "
                "the update's CPU per step (measured by the rank) times the steps begun in them",
        baseline_is="wall time of those windows",
        windows=len(per_window), step_seconds=step_s, interval_steps=interval,
        update_cpu_fraction=update_sum / wall_sum if wall_sum else None,
        ratio_with_update=(cpu_sum + update_sum) / wall_sum if wall_sum else None,
        launcher_cpu_fraction=launcher_cpu / wall_sum if wall_sum else None,
        whole_run_cpu_fraction=whole / whole_wall if whole_wall else None,
        note="min/max are over windows; ratio is total CPU / total wall of all windows")


REAL_BENCHES = {"scaling": bench_scaling, "footprint": bench_footprint}
