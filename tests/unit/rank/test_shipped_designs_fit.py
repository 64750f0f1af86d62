"""Every shipped design runs here in a few minutes: its training, at the scale run.wall_target makes
it take (emulator/rank/dilation.py ``fit_scale``, the estimate run.wall_limit refuses by), plus the
run's own time around it, fits 5 minutes on this machine.

Without a run: each design's probe is predicted from its design (the rates its node is paced at,
its bytes at run.scale) and what the probe of its real run here found of this host (``PROBED``: the
host's rate and software seconds per phase, 7 Dec 2026, 2 cores under other sessions' tests, load
average 2-20; scripts/run-shipped-designs.py runs them, docs/time-dilation.md has their wall times)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from rundesign import run_design

from emulator.config import load_config
from emulator.design import ladder
from emulator.rank.dilation import PhaseProbe, design_rate, fit_scale, sync_stall_seconds

ROOT = Path(__file__).resolve().parents[3]
#: design -> (phase, tier) -> (this host's bytes/s, software seconds a checkpoint for the node), as the
#: probe of the design's real run here found them
PROBED = {
    # the slower of a cold first run's probe and a warm one's
    "default": {("write", "local"): (1.057e9, 0.112), ("drain", "global"): (0.341e9, 0.041),
                ("restore", "local"): (0.662e9, 0.099), ("restore", "global"): (16.1e9, 0.012)},
    "design-direct-pfs": {("write", "global"): (0.196e9, 0.721), ("restore", "global"): (3.2e9, 0.034)},
    "design-nvme-pfs": {("write", "local"): (0.414e9, 0.375), ("drain", "global"): (0.191e9, 0.047),
                        ("restore", "local"): (1.282e9, 0.038), ("restore", "global"): (5.681e9, 0.014)},
    "design-llama405-2048-nvme-pfs": {("write", "local"): (0.588e9, 0.061), ("drain", "global"): (0.265e9, 0.019),
                                      ("restore", "local"): (1.988e9, 0.040), ("restore", "global"): (6.196e9, 0.015)},
    "design-llama70-128-nvme-s3": {("write", "local"): (1.654e9, 0.212), ("drain", "global"): (0.269e9, 0.021),
                                   ("restore", "local"): (1.565e9, 0.027), ("restore", "global"): (8.9e9, 0.007)},
    "design-nvme-s3": {("write", "local"): (0.515e9, 0.311), ("drain", "global"): (0.050e9, 0.212),
                       ("restore", "local"): (2.459e9, 0.042), ("restore", "global"): (0.185e9, 0.124)},
    "design-memory-nvme-s3": {("write", "memory"): (1.525e9, 0.040), ("drain", "global"): (0.021e9, 0.480),
                              ("restore", "memory"): (1.445e9, 0.028), ("restore", "global"): (0.061e9, 0.178)},
    "design-memory-peer-pfs": {("write", "memory"): (0.461e9, 0.059), ("replicate", "peer"): (0.158e9, 0.077),
                               ("drain", "global"): (0.141e9, 0.027), ("restore", "memory"): (0.918e9, 0.038),
                               ("restore", "global"): (9.915e9, 0.013)},
}
#: a run's own wall time besides its training here: start, state, probe, the last drains, loads, report
#: (the most the shipped designs' real runs took here, docs/time-dilation.md)
OUTSIDE_TRAINING_S = 90
#: designs this host, so loaded, could not run in 5 minutes at any scale -> why: a phase's software,
#: given its room in every checkpoint, sets a floor under the training time that no scale goes below
#: (docs/time-dilation.md). An entry that fits again fails: the list only shrinks.
OVER_HERE = {
    "design-llama70-128-nvme-s3": "the NVMe write's 0.21 s of software a checkpoint: a time factor of about 0.4 "
                                  "at any scale, 36 min of training",
    "design-nvme-pfs": "the NVMe write's 0.38 s of software a checkpoint (8 ranks' torch.save and fsync on the "
                       "virtual disk): 3.8 min of training at its floor, 5.1 min in all",
    "design-memory-peer-pfs": "the peer sends' 77 ms of software a checkpoint, 12 % of their design time at 25 GB/s",
    "design-memory-nvme-s3": "the S3 drain's and restore's software (0.48 s, 0.18 s a checkpoint against 5 and "
                             "10.6 GB/s)",
}
#: designs run as several agents here (their peer needs another node): (nodes, ranks per node)
AGENTS = {"design-memory-peer-pfs": (2, 4)}


def shipped() -> list[str]:
    return ["default"] + sorted(p.stem for p in (ROOT / "configs").glob("design-*.yaml"))


def predicted_phases(cfg, design, ranks_per_node: int, host: dict) -> list[PhaseProbe]:
    """The phases a probe of node 0 would find here (emulator/rank/dilation.py ``Probe.run``): the
    design's rate for each, this host's (``host``: (phase, tier) -> its rate and software) for its
    bytes at run.scale."""
    comm = SimpleNamespace(node=0, local_world_size=ranks_per_node)
    node_bytes = int(design.job.emulated[0].node_bytes * cfg.run.scale)
    names = [n for n in ladder.file_tiers() if cfg.tiers.entry(n) is not None]
    first = names[0]
    steps = [("write", first, "write")]
    if first == "memory" and cfg.tiers.peer is not None:
        steps.append(("replicate", "peer", None))
    if first != "global":
        steps += [("drain", "global", "write"), ("restore", first, "read")]
    steps.append(("restore", "global", "read"))
    phases = []
    for phase, tier, direction in steps:
        rate = design.emulation.node(0).peer_bps if phase == "replicate" else design_rate(design, comm, tier, direction)
        if rate:
            host_bps, fixed_s = host[(phase, tier)]
            phases.append(PhaseProbe(phase, tier, rate, host_bps, fixed_s, node_bytes, cfg.run.scale))
    return phases


@pytest.mark.parametrize("name", shipped())
def test_each_shipped_design_fits_five_minutes_here(name):
    assert name in PROBED, f"{name}: run it here (scripts/run-shipped-designs.py --only {name}), add its probe"
    nodes, per_node = AGENTS.get(name, (1, None))
    cfg = load_config(name, [f"parallelism.ranks={nodes * per_node}"] if per_node else [])
    assert cfg.run.wall_target_s is not None, f"{name}: no run.wall_target"
    design = run_design(cfg, nodes)
    phases = predicted_phases(cfg, design, per_node or cfg.parallelism.active_ranks, PROBED[name])
    assert phases, "the design paces something: its probe finds phases"
    stalls = sync_stall_seconds(cfg, design)
    fit = fit_scale(phases, scale=cfg.run.scale, wall=lambda s, f: cfg.wall_seconds(s, f, stalls),
                    target_s=cfg.run.wall_target_s)
    assert fit.wall_s <= cfg.run.wall_limit_s  # not refused
    fits = fit.wall_s + OUTSIDE_TRAINING_S <= 300
    what = f"{name}: training {fit.wall_s / 60:.1f} min at scale {fit.scale:g} x{fit.factor:g} (floor: {fit.floor})"
    if name in OVER_HERE:
        assert fit.floor and not fits, f"{what}: fits now, remove it from OVER_HERE"
    else:
        assert fits, what


def test_the_prediction_finds_what_the_probe_of_the_peer_design_found():
    """design-memory-peer-pfs's probe, two agents of 4 ranks, measured here: a write into host
    memory, the peer sends, a drain to the PFS, a restore from each."""
    cfg = load_config("design-memory-peer-pfs", ["parallelism.ranks=8"])
    got = [(p.phase, p.tier) for p in predicted_phases(cfg, run_design(cfg, 2), 4, PROBED["design-memory-peer-pfs"])]
    assert got == [("write", "memory"), ("replicate", "peer"), ("drain", "global"), ("restore", "memory"),
                   ("restore", "global")]
