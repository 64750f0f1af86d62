"""Drawn designs run for real: the emulator's side of the agreement on any design (issue 53).

:func:`drawn_design` draws, from a seed, a design this host runs in well under a minute, in the
data format of :mod:`generated_designs` (so a counterexample is kept as the same plain data): one
emulated node of 4 or 8 ranks of a job of 1 to 128 nodes (ZeRO-0, 1 or 3, either writer choice: the
emulated node the heaviest, or one of many alike), a ladder of one or two directory tiers (the
NVMe, an emulated global storage sharing its aggregate with the job's other nodes), global storage
every checkpoint or every other one. :func:`run_config` makes its run (sync then async, two
checkpoints each, one restore, the node moving 48 MiB a checkpoint); :func:`figures` pairs the
run's full-size figures with ``plan --json``'s and :func:`off` says which are more than 10 % apart.
"""
from __future__ import annotations

import json
import os
import random
from pathlib import Path

from generated_designs import config_of

from emulator import fullsize
from emulator.config.loading import load_mapping
from emulator.config.mapping import deep_merge
from emulator.design import resolve
from emulator.design.costs import checkpoint_costs, restore_seconds
from emulator.design.links import pacing
from emulator.fullsize import full_record, tier_lag

#: replays: the seed of a CI run (both its designs), or one design as the JSON its test printed
SEED_ENV, SPEC_ENV = "CKPT_EMU_DRAWN_SEED", "CKPT_EMU_DRAWN_SPEC"
#: CI's seed (``CI`` set): its draws (two tiers on 2 nodes, ZeRO-0, every replica writing; global
#: storage alone on 4 nodes, ZeRO-3, one replica) passed here; CI replays them, as Hypothesis's
#: ``derandomize`` does, so that a CI run's verdict is the change's, and a developer's run explores
CI_SEED = 22
#: how close a run's full-size figure must be to the design's closed form (issue 53)
CLOSE = 0.10
#: the bytes an emulated node moves per checkpoint: a drawn design's run.scale
NODE_BYTES = 48 * 2**20
#: the most a drawn node's fastest paced rate may be of its slowest
SPREAD = 8.0
#: the most paced seconds (before dilation) of a drawn run's longest pipeline or restore
MOST_PACED_S = 0.4
SAVES = 2
#: the least full-size seconds of a figure checked: the run's own software is counted once in it
LEAST_S = 30.0


def run_seed() -> int:
    """The seed of this run: ``CKPT_EMU_DRAWN_SEED`` where set (a replay), :data:`CI_SEED` in CI, else
    one per pytest session, the same in every xdist worker of it (they must collect the same tests)."""
    if os.environ.get(SEED_ENV):
        return int(os.environ[SEED_ENV])
    if os.environ.get("CI"):
        return CI_SEED
    uid = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    return int(uid[:8], 16) if uid else random.SystemRandom().randrange(2**31)


def _rate(rng: random.Random, lo: float, hi: float, unit: str = "GB/s") -> str:
    return f"{lo * (hi / lo) ** rng.random():.4g}{unit}"


def drawn_design(rng: random.Random) -> dict:
    """One design of :mod:`generated_designs`' format this host runs quickly, plus the run's ``ranks``:
    drawn again until each copy, lag and restore it is checked on takes at least :data:`LEAST_S` at
    full size (the run's own software, a second or so here and counted once, a few % of it) and its
    node's fastest paced rate is at most :data:`SPREAD` times its slowest (the dilation the fastest
    needs slows the slowest as much: the run's wall), its longest pipeline or restore paced at most
    :data:`MOST_PACED_S` at its run's scale before any dilation."""
    while True:
        spec = _draw(rng)
        cfg = load_mapping(_design_config(spec, Path("/nonexistent")))
        design = resolve(cfg, run=True)
        costs = checkpoint_costs(design)
        restore = restore_seconds(design, design.tiers[0], own_files_only=True)
        rates = [r for name in design.tiers for r in pacing(cfg, name, design.job)[:3] if r]
        paced = max(*costs.lag_s.values(), restore) * _scale(design)
        if min([*costs.copy_s.values(), *costs.lag_s.values(), restore]) >= LEAST_S and \
                max(rates) <= SPREAD * min(rates) and paced <= MOST_PACED_S:
            return spec


def _draw(rng: random.Random) -> dict:
    model, tp = rng.choice([("llama3-8b", 1), ("llama3-8b", 8), ("llama3-70b", 8)])
    zero = rng.choice([0, 1, 3])
    nodes = rng.choice([1, 2, 4, 16, 128])
    spec = {"model": model, "tp": tp, "pp": 1, "zero": zero, "nodes": nodes, "shard_group": None,
            "writers": rng.choice(["one_replica", "every_replica"]), "mode": "sync", "step_s": 1.0,
            "interval_steps": 1, "keep": rng.choice([1, 2]), "verify": rng.choice(["size", "checksum"]),
            "nic": _rate(rng, 50, 800, "Gb/s"), "ranks": rng.choice([4, 8])}
    # no host-memory tier: its rates need a dilation of x80-100 here (its loads x800), two minutes a run
    near = rng.choice(["local", "global"])
    tiers = {}
    if near == "local":
        tiers["local"] = {"every": 1, "write": _rate(rng, 1, 14), "read": _rate(rng, 1, 14),
                          "duplex": rng.random() < 0.5, "capacity": None}
    tiers["global"] = {"every": 1 if near == "global" else rng.choice([1, 2]),
                       "write": _rate(rng, 0.5, 4000), "read": _rate(rng, 0.5, 4000),
                       "latency_ms": rng.choice([0, 1, 20])}
    spec["tiers"] = tiers
    spec["failures"] = {"mttf_h": 50_000, "node": 0.2, "group": 0.02, "restart_s": 150}
    return spec


def drawn_designs(seed: int, count: int = 2) -> list:
    """``count`` designs of ``seed`` (or the one design ``CKPT_EMU_DRAWN_SPEC`` holds, as JSON)."""
    if os.environ.get(SPEC_ENV):
        return [json.loads(os.environ[SPEC_ENV])]
    return [drawn_design(random.Random(f"{seed}:{i}")) for i in range(count)]


def _design_config(spec: dict, folder: Path, out: Path | None = None) -> dict:
    """The design's config with its tiers in ``folder``, its results in ``out``, and the run's shape
    (not yet its scale)."""
    cfg = config_of(spec)
    every = {name: t["every"] for name, t in spec["tiers"].items()}
    tiers = {"memory": {"path": str(folder / "m" / "node{node}")}, "local": {"path": str(folder / "l" / "node{node}")},
             "global": {"path": str(folder / "g")}}
    run = {"parallelism": {"ranks": spec["ranks"]},
           "run": {"out": str(out or folder / "out"), "timeline": False},
           "checkpoint": {"interval_steps": 1, "saves": SAVES, "loads": 1, "baseline": False,
                          "modes": ["sync", "async"]},
           "tiers": {name: {**tiers[name], "interval_steps": every[name]} for name in every}}
    return deep_merge(cfg, run)


def run_config(spec: dict, folder: Path, out: Path) -> dict:
    """The run of ``spec`` (its tiers in ``folder``, its results in ``out``): a scale that gives its
    emulated node :data:`NODE_BYTES` a checkpoint, and a step so long that an async checkpoint never
    waits for the one before (its stall is then the snapshot)."""
    cfg = _design_config(spec, folder, out)
    design = resolve(load_mapping(cfg), run=True)
    longest = max(checkpoint_costs(design).lag_s.values())
    return deep_merge(cfg, {"run": {"scale": _scale(design)},
                            "training": {"step_seconds": round(2 * longest + 1, 1)}})


def _scale(design) -> float:
    return float(f"{min(1.0, NODE_BYTES / max(g.node_bytes for g in design.job.emulated)):.3g}")


def _job_records(res: dict, mode: str) -> list:
    """Per checkpoint of ``mode``, the job's record at full size: each duration its slowest rank's (the
    ranks of a node share its devices, so they finish their writes one after another)."""
    k, scale = res["time_factor"], res["scale"]
    by_step = {}
    for rank in res["per_rank"]:
        for rec in (r for r in rank["records"] if r["mode"] == mode):
            full = full_record(rec, k, bytes_factor=scale)
            mine = by_step.setdefault(rec["step"], {"due": tuple(rec["due"]), "stall_s": 0.0, "copy": {}, "lag": {}})
            mine["stall_s"] = max(mine["stall_s"], full["stall_s"])
            for name in mine["due"]:
                if name == mine["due"][0]:  # the ranks' own write
                    copy = full["local_write_s"]
                else:  # a copy of the node's
                    t = rec["tiers"][name]
                    copy = fullsize.full(t["seconds"], t.get("paced", 0.0), k, bytes_factor=scale)
                mine["copy"][name] = max(mine["copy"].get(name, 0.0), copy)
                mine["lag"][name] = max(mine["lag"].get(name, 0.0), tier_lag(rec, name, k, bytes_factor=scale))
    return [by_step[s] for s in sorted(by_step)]


def figures(res: dict, plan: dict, design) -> list:
    """(what, the run's at full size, the design's closed form) for each checkpoint of each mode: the
    stall (sync: where the checkpoint took every tier, the snapshot and every copy; async: the
    snapshot), each due tier's copy, and where the checkpoint took every tier, each tier's lag; and the
    restore from the nearest tier."""
    costs, tiers = plan["costs"], tuple(plan["costs"]["copy_s"])
    out = []
    for mode in ("sync", "async"):
        for i, rec in enumerate(_job_records(res, mode)):
            every = rec["due"] == tiers
            if mode == "async" or every:
                want = costs["async_stall_s"] if mode == "async" else costs["sync_stall_s"]
                out.append((f"{mode}[{i}] stall", rec["stall_s"], want))
            for name in rec["due"]:
                out.append((f"{mode}[{i}] {name} copy", rec["copy"][name], costs["copy_s"][name]))
                if every:
                    out.append((f"{mode}[{i}] {name} lag", rec["lag"][name], costs["lag_s"][name]))
    load, first = res["load"], tiers[0]
    # the emulated node is the first replica's: its ranks hold what they wrote (plan's restore also
    # waits for the other replicas' nodes, which read what they hold from global storage)
    out.append((f"restore from {first}", load["load_worst_full_size_s"] - load["load_software_s"],
                restore_seconds(design, first, own_files_only=True)))
    return out


def time_line(res: dict) -> str:
    """The run's scale, dilation and each mode's wall time, on one line. The loads' own factor where
    they had one: a run at a set ``run.dilation`` (a flagged run's second try) has none."""
    loads = res["dilation"].get("loads")
    own = f" (loads x{loads['factor']:g})" if loads else " (loads at the run's)"
    return (f"scale {res['scale']:.3g}, dilation x{res['dilation']['factor']:g}{own}, "
            + ", ".join(f"{m} {v['mode_wall_s']:.1f} s" for m, v in res["modes"].items()))


def off(figs: list, close: float = CLOSE) -> list:
    """The figures further than ``close`` from their closed form."""
    return [(what, run, want, run / want if want else float("inf")) for what, run, want in figs
            if abs(run - want) > close * want]
