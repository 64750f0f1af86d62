"""Where a run's figures are this host's rather than the full-size design's: the report's notes.

A run paces everything the design describes at the time factor (scale x dilation), so its
full-size figures are the design's (emulator/results/design_time.py), except where something
was not paced or the host could not keep up:

* a paced phase whose own, unpaced time is a large share of it: the host (its software, or its
  speed below the paced rate) set that part;
* a tier that is not emulated always measures the host, at this run's size;
* the snapshot is paced at the design's copy rate (stated, or the documented default): without a
  design it is this host's memory copy;
* a compressed step may be shorter than the host can schedule (sleep granularity, CPU
  contention): then the step time is the host's.
"""
from __future__ import annotations

from emulator.config.design import STAGING_RATES
from emulator.design import ladder
from emulator.results.design_time import HOST_SHARE
from emulator.units import GIB

#: steps longer than the compressed step time by this factor are the host's
STEP_SLACK = 1.10


def _modes(results: dict):
    return [(m, s) for m, s in results["modes"].items() if s.get("checkpoints")]


#: what a mode's summary says of a paced phase past HOST_SHARE: its key there, and the note's words
_HOST_FIGURES = (
    ("host_share", lambda v: f"{v:.0%} of its full-size time is this host's own (software, or the host slower "
                             "than the paced rate), not the design's; a higher run.dilation leaves the host more room"),
    ("host_lag", lambda v: f"this host ran {v:.0%} past its paced time here (less the software the probe "
                           "measured, where one ran): its full-size figures count that once, but the run's own "
                           "timing (what overlapped, the waits, the ratios as measured) was this host's; a higher "
                           "run.dilation leaves the host more room"),
)


def rate_notes(results: dict) -> list[str]:
    """Each paced phase whose own (unpaced) time was a large share of its full-size figure, or that
    the host ran well past its paced time here (emulator/results/design_time.py ``host_shares``,
    ``host_lags``): there the host, not the paced design, set part of the figure or of the run's
    timing; and one line saying so where every phase kept to its design rate."""
    notes, flagged, seen = [], set(), set()
    for mode, s in _modes(results):
        for key, says in _HOST_FIGURES:
            for phase, value in (s.get(key) or {}).items():
                seen.add(phase)
                if value > HOST_SHARE and phase not in flagged:
                    flagged.add(phase)
                    notes.append(f"{phase.replace('_', ' ')} ({mode}): {says(value)}")
    load = results.get("load") or {}
    if load.get("loads") and load.get("load_paced"):  # the loads' own note says where they were the host's
        seen.add("restore")
        if max(load.get("load_host_share", 0.0), load.get("load_host_lag", 0.0)) > HOST_SHARE:
            flagged.add("restore")
    for rec in results.get("recoveries") or ():
        if rec.get("paced"):
            seen.add("recovery")
            if rec.get("host_lag", 0.0) > HOST_SHARE:
                flagged.add("recovery")
                notes.append(f"recovery ({rec['class']}): its restore ran {rec['host_lag']:.0%} past its paced time "
                             "here (this host's reads, checksums and deserialisation at the run's dilation; the loads "
                             "after training get one of their own, a recovery does not): its full-size figure counts "
                             "that once, but the restore was this host's; a higher run.dilation leaves the host more room")
        if rec.get("fetch_host_lag", 0.0) > HOST_SHARE:
            flagged.add("recovery")
            notes.append(f"recovery ({rec['class']}): its fetch from a peer ran {rec['fetch_host_lag']:.0%} past its "
                         "paced time here (this host's sends, receipts and copies behind the paced NIC): its full-size "
                         "figure counts that once, but the fetch was this host's; a higher run.dilation leaves the "
                         "host more room")
    notes += _software_notes(results)
    if seen and not flagged:
        notes.append(f"every paced phase ({', '.join(sorted(p.replace('_', ' ') for p in seen))}) kept to its "
                     f"design rate here: the full-size figures are the design's, this host's own time under "
                     f"{HOST_SHARE:.0%} of each")
    return notes


def _software_notes(results: dict) -> list[str]:
    """Per phase with software around its stream (peer sends), how much of a checkpoint's full-size
    time that software is: per checkpoint, not per byte, so counted once and not the host's pace."""
    notes = []
    for mode, s in _modes(results):
        for phase, seconds in (s.get("software_s") or {}).items():
            notes.append(f"{phase.replace('_', ' ')} ({mode}): {seconds * 1e3:.1f} ms a checkpoint is the software "
                         "around the paced streams (set-up, every rank's receipts, the holders' manifest), "
                         "counted once at full size, not scaled with the bytes")
    return notes


def restore_notes(results: dict) -> list[str]:
    """The loads, where this host set a large share of the slowest one's full-size time, or its stream
    ran well past its paced time here (its reads, checksums and deserialisation behind the paced
    rate: a fixed run.dilation, or the host got busier after the loads' own probe)."""
    load = results.get("load") or {}
    share, lag = load.get("load_host_share", 0.0), load.get("load_host_lag", 0.0)
    tiers = ", ".join(sorted(load.get("served_by") or {})) or "none"
    if share > HOST_SHARE:
        return [f"restore ({tiers}): {share:.0%} of its full-size time is this host's own (its reads, checksums and "
                "deserialisation slower than the paced rate), not the design's; the loads' full-size figures are "
                "this host's, and a higher run.dilation leaves the host more room"]
    if lag > HOST_SHARE:
        return [f"restore ({tiers}): this host ran {lag:.0%} past its paced time here (its reads, checksums and "
                "deserialisation behind the paced rate): its full-size figure counts that once, but the reads were "
                "this host's, not the design's; a higher run.dilation leaves the host more room"]
    return []


def raw_tier_notes(design, results: dict) -> list[str]:
    """Tiers without emulation measure this host at this run's size; a host's throughput is not
    proportional to the bytes (caches, writeback), so those durations are not the design's."""
    raw = [name for name in ladder.lasting_file_tiers()
           if name in design.tiers and design.emulation.tier(name) is None]
    if not raw or results.get("scale", 1.0) >= 1:
        return []
    return [f"{' and '.join(raw)} tier{'s' if len(raw) > 1 else ''} not emulated: {'their' if len(raw) > 1 else 'its'} "
            f"durations are this host's for {results['bytes']['run_actual_state'] / GIB:.2f} GiB, not a full-size "
            "design's (a host's throughput changes with the bytes); set tiers.*.emulate to the design's rates"]


def step_notes(results: dict) -> list[str]:
    base = results.get("baseline")
    want = results["step_seconds"]["here"] if base else 0.0
    if not base or want <= 0 or base["step_wall_s"] <= STEP_SLACK * want:
        return []
    return [f"steps took {base['step_wall_s'] * 1000:.1f} ms without checkpoints, against the compressed "
            f"{want * 1000:.1f} ms ({results['step_seconds']['full_size']:g} s x time factor "
            f"{results['time_factor']:g}): the step "
            "time here is this host's, and so are the ratios as measured; at full size the time past the paced "
            "step is counted once a step; a larger --scale or run.dilation makes the ratios here the design's too"]


def snapshot_notes(design, results: dict) -> list[str]:
    """A design that states no snapshot rate: its snapshot is paced at the documented default, and
    the report says the rate was assumed."""
    if design.emulation.snapshot is None or design.sources.get("snapshot") != "assumed":
        return []
    staging = design.emulation.snapshot.staging
    return [f"snapshot: paced at the assumed {STAGING_RATES[staging]} per accelerator (a device-to-host copy into "
            f"{staging} buffers on one H100): the design states no design.node.snapshot.rate; state its nodes' "
            "own rate where they copy at another"]


def part_node_notes(design, results: dict) -> list[str]:
    """A run whose nodes hold fewer ranks than the design's node: each is paced at its part of its
    design node's devices, NIC and share of global storage (emulator/design/links.py
    ``node_fraction``), so its node figures (writes, drains, restores) are the whole node's. (A run
    of a config without a ``design:`` section paces no snapshot, and is its own node.)"""
    nodes = results.get("nodes") or 1
    if design.emulation.snapshot is None or not results.get("ranks"):
        return []
    mine, whole = results["ranks"] / nodes, design.job.accelerators_per_node
    if mine >= whole:
        return []
    return [f"node: each node of this run holds {mine:g} of the design node's {whole} ranks, and is paced at "
            f"that part ({mine / whole:.0%}) of the node's devices, NIC and share of global storage: its write, "
            f"drain and restore figures are the whole node's (a drain's read-back of its last file, alone at its "
            f"end, at that part of the node's read rate)"]
