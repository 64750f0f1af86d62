"""Runs with levels, for their unit and system tests: a fresh folder in host memory (/dev/shm) for
the memory tier, and a small run config with memory, NVMe and global tiers."""
from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest
from emu import small_config


@pytest.fixture
def shm():
    """A fresh folder in host memory (tmpfs), removed afterwards."""
    root = Path("/dev/shm") / f"ckpt-emu-test-{uuid.uuid4().hex[:8]}"
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _levels(tmp: Path, shm: Path, *, ranks=2, memory=None, local=None, global_=None, **sections) -> Path:
    tiers = {"memory": {"backend": "dir", "path": str(shm / "node{node}"), **(memory or {})},
             "local": {"backend": "dir", "path": str(tmp / "local" / "node{node}"), **(local or {})},
             "global": {"backend": "dir", "path": str(tmp / "global"), **(global_ or {})}}
    return small_config(tmp, ranks=ranks, tiers=tiers, **sections)
