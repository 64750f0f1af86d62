"""checkpoint.restore_readers: one rank per data-parallel group reads, the others get its bytes by a gloo
broadcast, verify them against their own manifest and adopt them (emulator/checkpoint/broadcast_restore.py).

End to end: a real 4-rank ZeRO-0 run (tp 2 x dp 2: two DP groups of two) reads from the tier on exactly
one rank per group. In processes (gloo, real tiers of a real run): the members' restored state is the
file they would have read, bit for bit; a corrupted broadcast chunk makes the member read the file
itself; a reader that cannot load a step makes every rank take the previous one.
"""
from __future__ import annotations


import pytest
from emu import refused, small_config

from emulator.checkpoint.broadcast_restore import dp_group
from emulator.config import load_config
from emulator.errors import ConfigError

ONE = "one_per_dp_group"


def test_dp_groups_follow_the_rank_layout_and_only_replicas_share():
    par = load_config("llama3-8b", ["parallelism.tp=2", "parallelism.dp=3", "parallelism.zero_stage=0"]).parallelism
    assert [dp_group(par, r) for r in range(6)] == [[0, 2, 4], [1, 3, 5], [0, 2, 4], [1, 3, 5], [0, 2, 4], [1, 3, 5]]
    sharded = load_config("llama3-8b", ["parallelism.zero_stage=1"]).parallelism
    assert dp_group(sharded, 5) == [5]


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_a_layout_that_shards_the_state_across_dp_ranks_is_refused(stage, tmp_path, capsys):
    with pytest.raises(ConfigError, match="restore_readers.*zero_stage 0.*ZeRO-"):
        load_config("llama3-8b", [f"parallelism.zero_stage={stage}", f"checkpoint.restore_readers={ONE}"])
    cfg = small_config(tmp_path, parallelism={"zero_stage": stage}, checkpoint={"restore_readers": ONE})
    assert "checkpoint.restore_readers" in refused(capsys, "run", cfg, "--quiet")
    assert not (tmp_path / "out" / "results.json").exists()


def test_an_unknown_value_is_refused():
    with pytest.raises(ConfigError, match="restore_readers: must be 'all' or 'one_per_dp_group'"):
        load_config("llama3-8b", ["checkpoint.restore_readers=some"])


# --------------------------------------------------------------------------- in processes, over gloo
