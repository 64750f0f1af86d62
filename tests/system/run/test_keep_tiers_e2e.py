"""After a run, no checkpoint stays in host memory unless asked: tiers on tmpfs are emptied when
the run ends, the report says so, and --keep-tiers keeps them (tests/unit/tiers/test_keep_tiers.py: the rule)."""
from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest

from emu import ckpt_emu, results, small_config
from tiers.directory import RAM_FILESYSTEMS
from tiers.fileops import fs_type
from tiers.locking import INTERNAL_FILES


def _bytes(root: Path) -> int:
    """The checkpoints' bytes under ``root`` (not the run's lock files, which name their holder)."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and p.name not in INTERNAL_FILES)


@pytest.fixture
def shm():
    if not os.path.isdir("/dev/shm") or fs_type(os.stat("/dev/shm").st_dev) not in RAM_FILESYSTEMS:
        pytest.skip("no tmpfs at /dev/shm")
    root = Path("/dev/shm") / f"ckpt-emu-test-{uuid.uuid4().hex[:8]}"
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_tiers_in_host_memory_are_emptied_unless_kept(tmp_path, shm):
    tiers = {"local": {"backend": "dir", "path": str(shm / "nvme" / "node{node}"), "recycle": True},
             "global": {"backend": "dir", "path": str(shm / "pfs")}}
    cfg = small_config(tmp_path, tiers=tiers, run={"keep_tiers": False}, checkpoint={"saves": 2, "loads": 1})
    proc = ckpt_emu("run", cfg, "--quiet", check=True)
    res = results(tmp_path / "out")
    assert res["load"]["ok"] and res["modes"]["async"]["checkpoints"] == 2
    assert res["tiers_emptied"] == ["global", "local"]
    assert "tiers in host memory emptied when the run ended: global, local" in proc.stdout
    assert _bytes(shm) == 0 and not list(shm.rglob("step_*"))

    ckpt_emu("run", cfg, "--quiet", "--keep-tiers", "--out", tmp_path / "kept", check=True)
    assert results(tmp_path / "kept")["tiers_emptied"] == []
    assert len(list((shm / "pfs").glob("step_*"))) == 2 and _bytes(shm / "nvme") > 0
