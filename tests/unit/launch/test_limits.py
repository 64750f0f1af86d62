"""Limits that know the container (issue 54, 8): the memory check reads this process's memory cgroup
(v2 or v1) where it sets a limit below the host's available memory (before, the host's figure
passed a run the container's limit then OOM-killed); counts have upper bounds
(``checkpoint.saves=1000000000000`` was a run that would go on for ever)."""
from __future__ import annotations

import pytest

from emulator.config import load_config
from emulator.errors import ConfigError, UserError
from emulator.launch import bounds

GIB = 1 << 30


def _v2(tmp_path, limit: str, current: int, inactive: int = 0, parent_limit: str = "max"):
    """A cgroup v2 tree: this process in /job/rank, ``limit`` on /job/rank, ``parent_limit`` on /job."""
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "proc").write_text("0::/job/rank\n")
    root = tmp_path / "cg"
    (root / "job" / "rank").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("memory cpu\n")
    for folder, lim in ((root / "job", parent_limit), (root / "job" / "rank", limit)):
        (folder / "memory.max").write_text(lim + "\n")
        (folder / "memory.current").write_text(f"{current}\n")
        (folder / "memory.stat").write_text(f"anon 1\ninactive_file {inactive}\nactive_file 2\n")
    return tmp_path / "proc", root


def test_a_v2_limit_and_what_it_leaves_are_read_from_the_tightest_level(tmp_path):
    proc, root = _v2(tmp_path, str(4 * GIB), current=3 * GIB, inactive=GIB // 2, parent_limit=str(8 * GIB))
    assert bounds.cgroup_memory(proc, root) == (4 * GIB, 4 * GIB - 3 * GIB + GIB // 2)
    proc, root = _v2(tmp_path / "b", "max", current=GIB, parent_limit=str(2 * GIB))  # the parent's binds
    assert bounds.cgroup_memory(proc, root) == (2 * GIB, GIB)
    proc, root = _v2(tmp_path / "c", "max", current=GIB)  # no limit anywhere
    assert bounds.cgroup_memory(proc, root) is None


def test_a_v1_limit_is_read_and_the_unlimited_sentinel_is_no_limit(tmp_path):
    (tmp_path / "proc").write_text("4:memory:/docker/abc\n3:cpuset:/\n0::/\n")
    folder = tmp_path / "cg" / "memory" / "docker" / "abc"
    folder.mkdir(parents=True)
    (tmp_path / "cg" / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (folder / "memory.limit_in_bytes").write_text(f"{3 * GIB}\n")
    (folder / "memory.usage_in_bytes").write_text(f"{GIB}\n")
    (folder / "memory.stat").write_text("cache 5\ntotal_inactive_file 0\n")
    assert bounds.cgroup_memory(tmp_path / "proc", tmp_path / "cg") == (3 * GIB, 2 * GIB)
    (folder / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert bounds.cgroup_memory(tmp_path / "proc", tmp_path / "cg") is None


def test_a_run_over_the_containers_limit_is_refused_naming_it(tmp_path, monkeypatch):
    """The host has GiBs available; the cgroup leaves 1 GiB: a run needing 2 GiB is refused."""
    proc, root = _v2(tmp_path, str(2 * GIB), current=GIB)
    monkeypatch.setattr(bounds, "PROC_CGROUP", proc, raising=False)
    monkeypatch.setattr(bounds, "CGROUP_ROOT", root, raising=False)
    cfg = load_config(None, ["parallelism.ranks=2"])
    with pytest.raises(UserError, match=r"more than this process's memory cgroup's \(limit 2.0 GiB\) 1.0 GiB available"):
        bounds.check_host_memory(cfg, 0.5 * GIB, nproc=2, copies=1)
    bounds.check_host_memory(cfg, 0.1 * GIB, nproc=2, copies=1)  # what fits passes


@pytest.mark.parametrize("override, says", [
    ("checkpoint.saves=1000000000000", "checkpoint.saves: 1,000,000,000,000 is more than limits.checkpoints (100,000)"),
    ("checkpoint.loads=200000", "checkpoint.loads: 200,000 is more than limits.checkpoints"),
    ("checkpoint.interval_steps=100000000", "checkpoint.saves: 300,000,000 steps a mode, more than limits.steps"),
])
def test_counts_past_their_limit_are_refused_and_the_limit_can_be_raised(override, says):
    with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace(")", r"\)")):
        load_config(None, [override])
    raised = load_config(None, [override, "limits.checkpoints=10000000000000", "limits.steps=10000000000000"])
    assert raised.limits.checkpoints == 10 ** 13
