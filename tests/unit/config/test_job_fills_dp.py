"""A design's job gives the data parallelism (issue 53, reproduction 5): an HSDP layout valid for the
job's DP is accepted without ``parallelism.dp`` written out, and checked against that DP, not the
preset's."""
from __future__ import annotations

import pytest

from emulator.config import load_config
from emulator.errors import ConfigError


def test_an_hsdp_design_is_valid_without_dp_written_out():
    """70B on 128 nodes of 8 at TP8 is DP128: shard groups of 16 divide it (the preset's DP8 did not)."""
    cfg = load_config("design-llama70-128-nvme-s3", ["parallelism.shard_group=16"])
    assert (cfg.parallelism.dp, cfg.parallelism.shard_group) == (128, 16)


def test_a_shard_group_that_does_not_divide_the_jobs_dp_is_still_refused():
    with pytest.raises(ConfigError, match=r"parallelism.shard_group: 48 does not divide the data-parallel "
                                          r"size 128 \(dp\)"):
        load_config("design-llama70-128-nvme-s3", ["parallelism.shard_group=48"])
