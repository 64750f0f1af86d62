"""A calibration's fixed costs per checkpoint (what a run measured beyond its transfers: barriers,
manifests) in the closed forms: the one before the write delays every tier, the one after the
drain only global storage, and a sync checkpoint's stall holds both."""
from __future__ import annotations

import pytest
import yaml

from emulator.config import load_config
from emulator.design import Calibration, resolve
from emulator.design.costs import checkpoint_costs, lag_seconds

PRE, POST = 0.3, 0.7


@pytest.fixture(scope="module")
def designs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fixed")
    data = {"extends": "llama3-8b",
            "tiers": {"local": {"backend": "dir", "path": str(tmp / "nvme")},
                      "global": {"backend": "dir", "path": str(tmp / "pfs")}},
            "design": {"job": {"nodes": 4}, "node": {"nic": "400Gb/s", "local": {"write": "7GB/s", "read": "7GB/s"}},
                       "global": {"write": "4GB/s", "read": "8GB/s", "latency_ms": 1}}}
    path = tmp / "d.yaml"
    path.write_text(yaml.safe_dump(data))
    cfg = load_config(str(path))
    return resolve(cfg), resolve(cfg, calibration=Calibration(fixed_pre_s=PRE, fixed_post_s=POST))


def test_the_fixed_costs_delay_the_tiers_they_come_before(designs):
    plain, calibrated = designs
    assert lag_seconds(calibrated, "local") - lag_seconds(plain, "local") == pytest.approx(PRE)
    assert lag_seconds(calibrated, "global") - lag_seconds(plain, "global") == pytest.approx(PRE + POST)
    a, b = checkpoint_costs(plain), checkpoint_costs(calibrated)
    assert b.lag_s["global"] - a.lag_s["global"] == pytest.approx(PRE + POST)
    assert b.sync_stall_s - a.sync_stall_s == pytest.approx(PRE + POST)
    assert b.async_stall_s == a.async_stall_s  # the snapshot alone
