"""The loads' own dilation: a whole restore (reads, checksums, deserialisation) timed unpaced sets
the factor the loads run at, and their full-size figures use it. Before, the loads ran at the run's
factor, which the probe set from the restore's reads alone: the embedded default's restore was 100 %
this host's time (4.3 min at full size against the 16 s its design reads in)."""
from __future__ import annotations

import pytest

from rundesign import run_of

from emulator.checkpoint.records import LoadRecord
from emulator.config import load_config
from emulator.fullsize import full_load
from emulator.rank.comm import SoloComm
from emulator.rank.dilation import load_clock
from emulator.results.design_time import at_run_factor

MB = 1_000_000


def _restore(seconds: float, nbytes: int, tier: str = "local"):
    def restore(tiers):
        rec = LoadRecord(0, 0, ok=True, tier=tier, seconds=seconds, bytes=nbytes)
        rec.read_bytes = nbytes
        return rec
    return restore


def test_the_loads_factor_leaves_the_host_twice_its_whole_restore():
    """The default's NVMe reads 7 GB/s for the node; this host restored 100 MB in 0.2 s (0.5 GB/s):
    the loads need 2 x 7 / 0.5 = 28, rounded up to x30."""
    design, clock = run_of(load_config("default"))
    loads, [probe] = load_clock(design, clock.at(12.5), SoloComm(), _restore(0.2, 100 * MB), [[("local", None)]])
    assert loads.dilation == 30 and (probe.phase, probe.tier) == ("restore", "local")
    assert probe.host_bps == pytest.approx(0.5e9)


def test_the_loads_are_never_less_dilated_than_the_run():
    design, clock = run_of(load_config("default"))
    loads, _ = load_clock(design, clock.at(50), SoloComm(), _restore(0.2, 100 * MB), [[("local", None)]])
    assert loads.dilation == 50


def test_a_load_at_its_own_factor_is_scaled_by_it():
    """0.19 s of a 0.2 s load paced at the loads' time factor 0.03: 0.19 / 0.03 + 0.01 s at full size,
    not 0.19 / the run's 0.0125."""
    load = {"seconds": 0.2, "paced_s": 0.19, "time_factor": 0.03, "h2d_s": 0.0}
    assert full_load(load, 0.0125)["seconds"] == pytest.approx(0.19 / 0.03 + 0.01)
    assert full_load({**load, "time_factor": 0.0}, 0.0125)["seconds"] == pytest.approx(0.19 / 0.0125 + 0.01)


def test_simulate_as_run_calibrates_a_load_as_if_paced_at_the_runs_factor():
    """``simulate --as-run`` reproduces the run at its own factor: a load at x30 whose 0.9 s of 1 s were
    paced is, at the run's x10, 0.9 x 10 / 30 + 0.1 s (before, its rate read three times too slow)."""
    load = {"seconds": 1.0, "paced_s": 0.9, "time_factor": 0.03}
    assert at_run_factor(load, 0.01) == pytest.approx(0.3 + 0.1)
    assert at_run_factor({**load, "time_factor": 0.0}, 0.01) == pytest.approx(1.0)
