"""One config, one design, at any ``--scale``: time follows the bytes, so the embedded default at
two scales gives the same ratios at full size (within run-to-run spread, measured here), where
before the fixed wall-clock interval made overhead and overlap grow with the scale. The ratios of
wall time here are not compared: they weigh this host's own time (counted once at full size) by 1/k.

Tiers on this host's disk (the test's paths) measure the host, whose throughput is not
proportional to the bytes (here a drain ran at 1.2 GiB/s for 105 MiB and 0.5 GiB/s for
420 MiB), and the report says so. So the test gives the default a design's rates that a 2-core CI host
sustains at both sizes with room to spare (an NVMe share of 0.25 GiB/s per node, a PFS share of
0.125 GiB/s for the job; one CI host wrote only 0.31 GiB/s under 8 ranks' serialization) and a
checkpoint every 24 steps; then every duration is the design's, and so every ratio."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from emu import ckpt_emu, run_unflagged, unflagged

pytestmark = [pytest.mark.large, pytest.mark.timeout(1200)]  # three runs, the last at 0.43 GiB

RATIOS = ("drain_overlap_ratio", "overhead_ratio")


def _default_at(tmp: Path, scale: float) -> dict:
    """The run at ``scale``, again once if it flagged a paced phase as this host's (once in four
    fresh-clone runs here, under the parallel part's load)."""
    return run_unflagged(lambda folder: _run_default(folder, scale), tmp)[0]


def _run_default(tmp: Path, scale: float) -> dict:
    tmp.mkdir(parents=True)
    design = ["design.node.local={write: 0.25GiB/s, read: 0.25GiB/s, duplex: true}",
              "design.global={write: 0.125GiB/s, read: 0.25GiB/s}", "checkpoint.interval_steps=24"]
    args = ["run", "--quiet", "--scale", scale, "--out", tmp / "out"]
    # at the scale asked: the default's run.wall_target would fit a smaller one
    for s in [f"tiers.local.path={tmp}/local", f"tiers.global.path={tmp}/global", "checkpoint.loads=0",
              "checkpoint.baseline=false", "run.wall_target=null", *design]:
        args += ["--set", s]
    ckpt_emu(*args, check=True, timeout=900)
    return json.loads((tmp / "out" / "results.json").read_text())


def test_the_default_gives_the_same_ratios_at_two_scales(tmp_path):
    small = [_default_at(tmp_path / f"small{i}", 0.001) for i in range(2)]
    large = _default_at(tmp_path / "large", 0.004)
    assert large["step_seconds"]["full_size"] == small[0]["step_seconds"]["full_size"] == 62.5
    # a step here is the full-size step x scale x D, and the probe chose each run's D (1.25 and 1.5 on
    # a loaded host): per unit of D, 4x the bytes take 4x the time
    here = [r["step_seconds"]["here"] / r["dilation"]["factor"] for r in (small[0], large)]
    assert here[1] == pytest.approx(4 * here[0])
    for mode in ("sync", "async"):
        for key in RATIOS:  # the design's, as the report's brackets give them (this host's time once)
            runs = [r["modes"][mode]["full_size"][key] for r in small]
            spread = abs(runs[0] - runs[1])
            got = large["modes"][mode]["full_size"][key]
            # within three run-to-run spreads of the small runs, or 2 points for ratios near 0
            assert abs(got - statistics.mean(runs)) <= max(3 * spread, 0.02 + 0.25 * statistics.mean(runs)), \
                (mode, key, runs, got)
        misses = [r["modes"][mode]["deadline_misses"] for r in small]
        assert large["modes"][mode]["deadline_misses"] <= max(misses) + 1, (mode, misses)
    assert all(unflagged(r) for r in (*small, large))
    for r in (*small, large):  # the full-size figures are the measured ones over the scale
        m = r["modes"]["sync"]
        assert m["full_size"]["stall_mean_s"] >= m["stall_mean_s"]  # the design's: paced / time factor, software once
