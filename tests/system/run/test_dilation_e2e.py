"""Time dilation on real runs: the same design at several dilations gives the same full-size figures,
and a design far faster than this machine is emulated at the factor the probe picks, its phases at
their closed forms (emulator/design/costs.py)."""
from __future__ import annotations

import pytest
import yaml
from emu import ckpt_emu, results
from level_runs import shm  # noqa: F401 - a folder in host memory for the tiers, removed after

from emulator.config import load_config
from emulator.design import resolve
from emulator.design.costs import copy_seconds, restore_seconds, snapshot_seconds

pytestmark = pytest.mark.timeout(900)


def _design(tmp_path, shm, name: str, *, local: str, global_: str, dilation, scale: float, ranks: int = 2,
            step_seconds: float = 300, snapshot: str | None = None, sync_only: bool = False) -> str:
    """``sync_only``: the sync mode and no load, for a test that reads the sync figures alone."""
    checkpoint = {"interval_steps": 2, "saves": 2, "loads": 1, "baseline": False}
    if sync_only:
        checkpoint |= {"modes": ["sync"], "loads": 0}
    cfg = {"extends": "llama3-8b", "parallelism": {"ranks": ranks},
           "run": {"scale": scale, "out": str(tmp_path / name / "out"), "dilation": dilation},
           "training": {"step_seconds": step_seconds},
           "checkpoint": checkpoint,
           "drain": {"verify": "size"},
           "tiers": {"local": {"backend": "dir", "path": f"{shm}/{name}/l"},  # in host memory, removed after
                     "global": {"backend": "dir", "path": f"{shm}/{name}/g"}},
           "design": {"job": {"nodes": 1, "accelerators_per_node": ranks},
                      "node": {"local": {"write": local, "read": local}, "nic": "400Gb/s"},
                      "global": {"write": global_, "read": global_}}}
    if snapshot:  # stated, so the run paces its snapshot (unstated, the snapshot is this host's memcpy)
        cfg["design"]["node"]["snapshot"] = {"rate": snapshot}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _run(path: str) -> dict:
    proc = ckpt_emu("run", path, "--quiet", timeout=800)
    assert proc.returncode == 0, proc.stderr
    return results(load_config(path).run.out)


def _figures(res: dict) -> dict:
    sync = res["modes"]["sync"]["full_size"]
    return {"local_write": sync["local_write_mean_s"], "drain": sync["drain_mean_s"], "stall": sync["stall_mean_s"]}


def test_the_same_design_at_three_dilations_gives_the_same_design_figures(tmp_path, shm):
    """A design this machine can pace as it is (a 1 GB/s device, a 0.25 GB/s store) at D = 1, 4 and 16:
    the full-size figures agree within run-to-run spread, and with the closed forms. The figures are
    the sync mode's (112 s to the device, then 450 s to the store, the stall both), so the run is the
    sync mode alone, without a load, and its steps are 30 s: the async mode, the load and steps of
    300 s (an interval that held an async checkpoint's copies) took two fifths of its time (every
    full-size second takes 16 ms here at D = 16)."""
    runs = {d: _run(_design(tmp_path, shm, f"d{d}", local="1GB/s", global_="250MB/s", dilation=d, scale=0.001,
                            step_seconds=30, sync_only=True))
            for d in (1, 4, 16)}
    for d, res in runs.items():
        assert res["dilation"]["factor"] == d and res["time_factor"] == pytest.approx(0.001 * d)
    base = _figures(runs[1])
    for d in (4, 16):
        for key, value in _figures(runs[d]).items():
            assert value == pytest.approx(base[key], rel=0.10), (d, key, value, base[key])
    design = resolve(load_config(_design(tmp_path, shm, "d1", local="1GB/s", global_="250MB/s", dilation=1, scale=0.001,
                                         step_seconds=30, sync_only=True)))
    for d, res in runs.items():
        f = _figures(res)
        assert f["local_write"] == pytest.approx(copy_seconds(design, "local"), rel=0.10), (d, f)
        assert f["drain"] == pytest.approx(copy_seconds(design, "global"), rel=0.10), (d, f)


@pytest.mark.alone  # a second worker's load overran its x100 pacing: flagged
@pytest.mark.large
def test_a_design_a_hundred_times_faster_than_this_machine_runs_at_the_factor_the_probe_picks(tmp_path, shm):
    """A 700 GB/s NVMe and a 200 GB/s store: the probe picks D, every phase keeps to its design rate
    at it (no phase flagged), and the full-size figures are the closed forms within 10 %."""
    # 2.5 s steps: at the factor of a few hundred this host needs, a 400 s step would take over an
    # hour, and an interval of 5 s still holds an async checkpoint's copies (3.5 s: the drain at the
    # NIC's 50 GB/s), so no checkpoint waits for the one before it; scale 0.002 (0.2 GiB a checkpoint)
    # takes half the wall time of 0.004 at about the same factor
    path = _design(tmp_path, shm, "fast", local="700GB/s", global_="200GB/s", dilation="auto", scale=0.002, ranks=2,
                   step_seconds=2.5, snapshot="48GiB/s")
    res = _run(path)
    d = res["dilation"]
    assert d["auto"] and d["factor"] >= 50, d  # this host moves a few GB/s: a factor of 100-odd
    assert not [n for n in res["notes"] if "of its full-size time is this host's own" in n], res["notes"]
    design = resolve(load_config(path))
    f = _figures(res)
    assert f["local_write"] == pytest.approx(copy_seconds(design, "local"), rel=0.10), f
    assert f["drain"] == pytest.approx(copy_seconds(design, "global"), rel=0.10), f
    load = res["load"]  # at the loads' own factor, the software around the stream apart
    assert res["dilation"]["loads"]["factor"] >= d["factor"], res["dilation"]["loads"]
    assert load["load_worst_full_size_s"] - load["load_software_s"] == pytest.approx(
        restore_seconds(design, "local"), rel=0.10), load
    asyn = res["modes"]["async"]["full_size"]
    assert asyn["stall_mean_s"] == pytest.approx(snapshot_seconds(design), rel=0.10), asyn
