"""Tiers as levels (issue 24): memory, NVMe and global storage each take every N-th checkpoint,
and each failure class recovers from the nearest tier that survived it.

Real runs of the CLI: the memory tier is a folder on /dev/shm, as NVRx's RAM disk and DLRover's
shared memory are; two torchrun agents on 127.0.0.1 are two nodes.
"""
from __future__ import annotations


import pytest

from emulator.checkpoint.schedule import Schedule
from emulator.config import load_config
from emulator.design.ladder import ladder_of
from emu import refused
from level_runs import _levels, shm  # noqa: F401 - helpers and fixtures shared with tests/system/


def test_schedule_takes_every_nth_checkpoint_nearest_tier_first():
    s = Schedule({"memory": 1, "peer": 2, "local": 5, "global": 10}, {})
    assert s.due(1) == ("memory",)
    assert s.due(2) == ("memory", "peer")
    assert s.due(5) == ("memory", "local")
    assert s.due(10) == ("memory", "peer", "local", "global")
    assert Schedule.first(s.due(10)) == "memory"
    assert Schedule.first(("local", "global")) == "local" and Schedule.first(("global",)) == "global"
    cfg = load_config("llama3-8b-subset", ["checkpoint.interval_steps=4", "tiers.local.interval_steps=4",
                                           "tiers.global.interval_steps=16", "tiers.local.keep=3"])
    assert Schedule.of(ladder_of(cfg)).every == {"local": 1, "global": 4}
    assert Schedule.of(ladder_of(cfg)).keep == {"local": 3, "global": cfg.checkpoint.keep}


@pytest.mark.parametrize("override, message", [
    ("tiers.local.interval_steps=3", "tiers.local.interval_steps: 3 is not a multiple of checkpoint.interval_steps"),
    ("tiers.peer.replicas=1", "tiers.peer.replicas: 1 replica(s) need more than the run's 1 node(s)"),
    ("tiers.memory.emulate.capacity_gib=100000", "tiers.memory: a capacity of 100000.0 GiB"),
    ("failures.lose_nodes={after: 9, nodes: [0]}", "failures.lose_nodes.after: 9, but the run takes 6 checkpoint(s)"),
    (("tiers.peer.replicas=1", "tiers.memory=null"), "tiers.peer: needs tiers.memory"),
    (("tiers.memory.interval_steps=4", "tiers.local.interval_steps=4", "tiers.global.interval_steps=4"),
     "checkpoint.interval_steps: 2, but no tier takes every checkpoint"),
])
def test_bad_level_input_is_one_line_exit_2_and_nothing_written(tmp_path, shm, capsys, override, message):
    cfg = _levels(tmp_path, shm)
    overrides = override if isinstance(override, tuple) else (override,)
    line = refused(capsys, "run", cfg, "--quiet", *[a for o in overrides for a in ("--set", o)])
    assert message in line, line
    assert not (tmp_path / "out").exists() and not shm.exists()
    assert not (tmp_path / "local").exists() and not (tmp_path / "global").exists()


def test_replaced_nodes_are_those_that_restarted_fewer_times_and_need_fixed_node_ranks():
    """The job's attempt is the highest restart count; a node whose ranks restarted fewer times is
    a replacement. Under the c10d rendezvous (no --node-rank) that is one line, not a run on
    renumbered ranks that could restore another node's state."""
    from emulator.errors import UserError
    from emulator.rank.membership import Membership, membership
    assert membership([0, 0, 0, 0], 2, fixed_node_ranks=False) == Membership(0, ())
    assert membership([2, 2, 2, 2], 2, fixed_node_ranks=False) == Membership(2, ())
    assert membership([1, 1, 0, 0, 1, 1], 2, fixed_node_ranks=True) == Membership(1, (1,))
    with pytest.raises(UserError, match=r"node\(s\) \[1\] joined as replacements, but the nodes were not"):
        membership([1, 1, 0, 0], 2, fixed_node_ranks=False)


def test_a_peer_layout_that_does_not_fit_the_nodes_is_refused_at_launch(tmp_path, shm, capsys):
    """Cliques of 2 on 3 nodes: one line and exit 2 before anything runs, not when the ranks start."""
    cfg = _levels(tmp_path, shm, ranks=6)
    line = refused(capsys, "run", cfg, "--quiet", "--set", "tiers.peer={replicas: 1, placement: clique}",
                    "--nnodes", "3", "--rdzv-endpoint", "127.0.0.1:29999")
    assert line == ("ckpt-emu: error: tiers.peer.jump: 3 nodes do not split into cliques of 2 "
                                   "(replicas + 1) nodes spaced 1 apart (nodes must be a multiple of 2) (--nnodes 3)")
    assert not (tmp_path / "out").exists() and not shm.exists() and not (tmp_path / "local").exists()


@pytest.mark.parametrize("args, message", [
    (("--node-rank", "0"), "--node-rank 0: needs --nnodes > 1 and a rank from 0 to nnodes - 1"),
    (("--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "127.0.0.1:29999"),
     "--node-rank 2: needs --nnodes > 1 and a rank from 0 to nnodes - 1"),
    (("--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", "node0"),
     "--rdzv-endpoint 'node0': with --node-rank, use node 0's HOST:PORT"),
])
def test_bad_node_rank_is_one_line_exit_2_and_nothing_written(tmp_path, shm, capsys, args, message):
    assert refused(capsys, "run", _levels(tmp_path, shm), "--quiet", *args) == f"ckpt-emu: error: {message}"
    assert not (tmp_path / "out").exists() and not shm.exists() and not (tmp_path / "local").exists()


def test_resume_drains_only_checkpoints_global_takes(tmp_path):
    """A checkpoint only NVMe takes (global every 2nd) stays off global when a restarted run
    resumes the drains an earlier attempt left: resume follows the schedule too."""
    from emulator.checkpoint.checkpointer import Checkpointer
    from emulator.checkpoint.layout import list_steps
    from emulator.rank.comm import SoloComm
    from rundesign import rank_state
    from tiers.directory import DirTier
    cfg = load_config("llama3-8b", ["run.scale=0.0002", "parallelism.ranks=1"])
    local, glob = DirTier(tmp_path / "l"), DirTier(tmp_path / "g")
    schedule = Schedule({"local": 1, "global": 2}, {"local": 2, "global": 2})
    ckpt = Checkpointer(rank_state(cfg, 0), local, glob, SoloComm(), schedule=schedule)
    try:
        assert ckpt.checkpoint(1, "sync").due == ["local"]
        assert ckpt.resume() == []  # a restart's resume: nothing global should take
    finally:
        ckpt.close()
    import asyncio
    assert asyncio.run(list_steps(glob))[0] == [] and asyncio.run(list_steps(local))[0] == [1]
