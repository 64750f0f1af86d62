"""An override restates only what it names (issue 53, reproduction 1): switching a tier's backend keeps
its own schedule (interval and retention), and a tier interval that is not a multiple of the
checkpoint interval is refused whatever the backend and whatever the order of the overrides."""
from __future__ import annotations

import pytest

from emulator.cli import main
from emulator.config import load_config
from emulator.errors import ConfigError

S3 = ("tiers.global.backend=s3", "tiers.global.bucket=b")


def test_a_backend_switch_keeps_the_tiers_interval_and_keep():
    """design-memory-peer-pfs sends every 30th checkpoint to global storage and keeps 3 there; the
    switch to S3 used to drop both: every checkpoint to global storage, checkpoint.keep copies."""
    cfg = load_config("design-memory-peer-pfs", ["tiers.global.keep=3", *S3])
    assert cfg.tiers.global_.backend == "s3"
    assert cfg.tier_every["global"] == 30
    assert cfg.tiers.global_.keep == 3


def test_the_planner_plans_the_switched_tier_at_its_own_interval(capsys):
    import json
    assert main(["plan", "design-memory-peer-pfs", *[a for s in S3 for a in ("--set", s)], "--json"]) == 0
    configured = json.loads(capsys.readouterr().out)["modes"]["async"]["configured"]
    assert configured["every"]["global"] == 30


@pytest.mark.parametrize("backend", [("tiers.global.backend=dir", "tiers.global.path=/tmp/x"),
                                     ("tiers.global.backend=memory",), S3],
                         ids=["dir", "memory", "s3"])
@pytest.mark.parametrize("first", ["interval", "backend"])
def test_a_tier_interval_off_the_checkpoints_is_refused_whatever_the_backend(backend, first):
    interval = ["tiers.global.interval_steps=12"]  # the default checkpoints every 8 steps
    overrides = interval + list(backend) if first == "interval" else list(backend) + interval
    with pytest.raises(ConfigError, match=r"tiers.global.interval_steps: 12 is not a multiple of "
                                          r"checkpoint.interval_steps \(8\)"):
        load_config("default", overrides)
