"""What a scaled run cannot show as the full-size design: the report's notes.

A run at ``run.scale`` F shrinks bytes and time by F, and emulated rates act on
the bytes, so ratios are the full-size design's, except where something does
not shrink or is not the design's at all:

* per-request latency and per-checkpoint fixed costs stay the same at every
  scale, so at small F they weigh more than at full size;
* the host may be slower than an emulated tier (the emulation can only slow a
  tier down): then that phase measures the host; a tier that is not emulated
  always measures the host, at this run's size;
* a compressed step may be shorter than the host can schedule (sleep
  granularity, CPU contention): then the step time is the host's.
"""
from __future__ import annotations

from emulator.design import run_emulation
from emulator.units import GIB

#: a per-request latency at least this share of a phase's mean is "a large share"
LATENCY_SHARE = 0.10
#: a measured rate below this share of the emulated one is the host's, not the design's
RATE_SHARE = 0.8
#: steps longer than the compressed step time by this factor are the host's
STEP_SLACK = 1.10


def _modes(results: dict):
    return [(m, s) for m, s in results["modes"].items() if s.get("checkpoints")]


def latency_notes(cfg, results: dict) -> list[str]:
    notes = []
    for name, tcfg in (("local", cfg.tiers.local), ("global", cfg.tiers.global_)):
        em = run_emulation(cfg, name) if tcfg is not None else None
        if em is None or not em.latency_ms:
            continue
        phase = "local_write_mean_s" if name == "local" or cfg.tiers.local is None else "drain_mean_s"
        for mode, s in _modes(results):
            if s[phase] and em.latency_ms / 1000 >= LATENCY_SHARE * s[phase]:
                share = em.latency_ms / 1000 / s[phase]
                notes.append(f"{name} tier: its {em.latency_ms:g} ms per request is {share:.0%} of the mean "
                             f"{phase[:-7].replace('_', ' ')} ({mode}); latency does not shrink with --scale, so at "
                             f"full size that share would be about {share * cfg.run.scale:.1%}")
                break
    return notes


def rate_notes(cfg, results: dict) -> list[str]:
    """Emulated bandwidth shared by a node (a job's rate: each node's share of it), against the rate
    measured: a phase slower than the design's own time for it by more than 1 / RATE_SHARE measured
    the host."""
    notes, nodes = [], max(1, results["nodes"])
    for name, phase in (("local", "local_write_mean_s"), ("global", "drain_mean_s")):
        em = run_emulation(cfg, name, run_nodes=nodes) if cfg.tiers.entry(name) is not None else None
        if em is None or not em.write_gib_s or em.shared_by != "node" or \
                (name == "global" and cfg.tiers.local is None):
            continue
        want = em.write_gib_s * nodes * GIB
        for mode, s in _modes(results):
            design_s = _design_seconds(cfg, results, em, want, phase)
            if s[phase] and design_s < RATE_SHARE * s[phase]:
                got = results["bytes"]["run_actual_state"] / s[phase]
                notes.append(f"{name} tier: this host moved {got / GIB:.2f} GiB/s ({mode}), below the emulated "
                             f"{want / GIB:.4g} GiB/s: the {phase[:-7].replace('_', ' ')} figures are this host's, not the design's")
                break
    return notes


def _design_seconds(cfg, results: dict, em, want_bps: float, phase: str) -> float:
    """The design's own time for a phase: the bytes at the emulated rate; a drain that verifies by
    checksum also reads its last file back at the read rate (earlier ones overlap later copies)."""
    total = results["bytes"]["run_actual_state"]
    seconds = total / want_bps
    if phase == "drain_mean_s" and cfg.drain.verify == "checksum" and em.read_gib_s:
        largest = total / max(1, results["ranks"])
        seconds += largest / (em.read_gib_s * GIB)
    return seconds


def raw_tier_notes(cfg, results: dict) -> list[str]:
    """Tiers without emulation measure this host at this run's size; a host's throughput is not
    proportional to the bytes (caches, writeback), so those durations are not the design's."""
    raw = [name for name, t in (("local", cfg.tiers.local), ("global", cfg.tiers.global_))
           if t is not None and run_emulation(cfg, name) is None]
    if not raw or cfg.run.scale >= 1:
        return []
    return [f"{' and '.join(raw)} tier{'s' if len(raw) > 1 else ''} not emulated: {'their' if len(raw) > 1 else 'its'} "
            f"durations are this host's for {results['bytes']['run_actual_state'] / GIB:.2f} GiB, not a full-size "
            "design's (a host's throughput changes with the bytes); set tiers.*.emulate to the design's rates"]


def step_notes(cfg, results: dict) -> list[str]:
    base, want = results.get("baseline"), cfg.wall_step_seconds
    if not base or want <= 0 or base["step_wall_s"] <= STEP_SLACK * want:
        return []
    return [f"steps took {base['step_wall_s'] * 1000:.1f} ms without checkpoints, against the compressed "
            f"{want * 1000:.1f} ms ({cfg.training.step_seconds:g} s x scale {cfg.run.scale:g}): the step time is "
            "this host's; run at a larger --scale for the design's"]
