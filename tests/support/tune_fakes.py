"""A `tune` whose emulation runs are faked: the results.json a run of a config would write if each tier ran at
the rates given (the ones the emulator paces its node at), so tune's calibration and planning can be
tested without starting torchrun. Only the fields tune and its calibration read are written."""
from __future__ import annotations

import json
import math

from emulator.sizing import checkpoint_size, rank_size

GIB = 1 << 30


def fake_results(cfg, *, local_bps: float, global_bps: float, global_latency_s: float = 0.0,
                 snapshot_bps: float = 48 * GIB, interference: float = 0.0, restores: dict | None = None,
                 host_lag_s: float = 0.0) -> dict:
    """Per node: ``local_bps`` into the local tier, ``global_bps`` of the drain and its read-back of the last
    file (``drain.verify: checksum``; both at the run's node),
    ``global_latency_s`` per request (two per file and wave of the drain); each rank's snapshot at
    ``snapshot_bps``; ``interference``: the async steps slowed beyond their stalls (a share of a step);
    ``restores``: tier -> seconds (at the run's scale) a load from it took; ``host_lag_s``: this host's own
    seconds in each async commit here (its software, not in the design's figures)."""
    scale, ranks, saves = cfg.run.scale, cfg.parallelism.active_ranks, cfg.checkpoint.saves
    files = [int(rank_size(cfg.model, cfg.parallelism, r).total_bytes * scale) for r in range(ranks)]
    snapshot = max(files) / snapshot_bps
    # a request's latency is paced at the time factor, as the bytes are (docs/time-dilation.md)
    requests = 2 * math.ceil(ranks / cfg.drain.concurrency) * global_latency_s * cfg.time_factor
    local = sum(files) / local_bps
    readback = max(files) / global_bps if cfg.drain.verify == "checksum" else 0.0  # the last file's, after its copy
    drain = sum(files) / global_bps + requests + readback
    stall = {"sync": snapshot + local + drain, "async": snapshot}
    step_wall = cfg.wall_step_seconds * cfg.checkpoint.interval_steps

    def record(mode, step, rank):
        return {"mode": mode, "step": step, "rank": rank, "node": 0, "stall_s": stall[mode], "wait_s": 0.0,
                "snapshot_s": snapshot, "local_write_s": local, "drain_s": drain,
                "complete_s": snapshot + local + drain, "file_bytes": files[rank], "written_to": "local",
                "missed": False, "global_complete": True, "error": None}

    def mode(m):
        steps = saves * cfg.checkpoint.interval_steps
        slowed = interference * cfg.wall_step_seconds * steps if m == "async" else 0.0
        wall = saves * (step_wall + stall[m]) + slowed
        return {"checkpoints": saves, "steps": steps, "training_wall_s": wall,
                "stall_total_s": saves * stall[m], "overhead_ratio": saves * stall[m] / wall,
                "interference_ratio": slowed / steps / cfg.wall_step_seconds,
                "drain_overlap_ratio": saves * drain / wall, "deadline_misses": 0, "incomplete": 0,
                "lag_max_s": local + drain + host_lag_s if m == "async" else 0.0}
    modes = ("sync", "async")
    return {
        "config": cfg.to_dict(), "nodes": 1, "ranks": ranks, "step_seconds": {"full_size": cfg.training.step_seconds,
                                                                               "here": cfg.wall_step_seconds},
        "bytes": {"job_checkpoint_emulated": checkpoint_size(cfg.model, cfg.parallelism).total_bytes,
                  "run_emulated": round(sum(files) / scale), "run_actual_state": sum(files)},
        "baseline": {"steps": saves * cfg.checkpoint.interval_steps, "step_wall_s": cfg.wall_step_seconds},
        "modes": {m: mode(m) for m in modes},
        "load": {"recovery_mean_s_by_tier": dict(restores or {})},
        "per_rank": [{"rank": r, "node": 0, "records": [record(m, (i + 1) * cfg.checkpoint.interval_steps, r)
                                                        for m in modes for i in range(saves)]}
                     for r in range(ranks)],
    }


def faked_tune(monkeypatch, rates):
    """The tune module with every emulation run replaced by :func:`fake_results`; ``rates(cfg)`` gives
    the keyword arguments for the config a run is of; returns (tune module, the configs run)."""
    from emulator.cli import tune as tune_mod
    runs = []

    def fake_run(cfg, out, *, force=False, quiet=True, stage="", **run):
        out.mkdir(parents=True, exist_ok=True)
        cfg = tune_mod.run_config(cfg, out, **run)  # the config the run would be of
        runs.append(cfg)
        res = fake_results(cfg, **rates(cfg))
        (out / "results.json").write_text(json.dumps(res))
        return res
    monkeypatch.setattr(tune_mod, "_run", fake_run)
    monkeypatch.setattr(tune_mod, "_check_folders", lambda *a: None)  # no run: no results folder to check
    return tune_mod, runs


L405_SUBSET = {  # docs/simulation.md's design: 8 ranks of TP group 0 stand for one node of the job
    "extends": "llama3-405b-subset", "run": {"scale": 0.004}, "training": {"step_seconds": 62.5},
    "checkpoint": {"interval_steps": 8, "saves": 3, "loads": 0},
    "tiers": {"local": {"backend": "dir", "path": "/nonexistent/nvme",
                        "emulate": {"write_gib_s": 6.0, "read_gib_s": 7.0, "shared_by": "node"}},
              "global": {"backend": "dir", "path": "/nonexistent/pfs",
                         "emulate": {"write_gib_s": 400.0, "read_gib_s": 800.0, "latency_ms": 1,
                                     "shared_by": "job"}}}}


def paced(cfg, **fake) -> dict:
    """The rates the emulator paces the run's node at (emulator/design run_emulation), for fake_results."""
    from emulator.design import run_emulation
    local, glob = run_emulation(cfg, "local"), run_emulation(cfg, "global")
    rates = {"local_bps": local.write_gib_s * GIB}
    if glob is not None and glob.write_gib_s:
        rates.update(global_bps=glob.write_gib_s * GIB, global_latency_s=glob.latency_ms / 1000)
    else:  # a plain folder: as fast as this host (a made-up figure)
        rates.update(global_bps=3 * GIB)
    return {**rates, **fake}


def faked_paced_tune(monkeypatch, **fake):
    """(tune module, the configs its runs were of) with every emulation run replaced by tune_fakes'
    results at the paced rates (``fake``: more of its keyword arguments)."""
    return faked_tune(monkeypatch, lambda cfg: paced(cfg, **fake))
