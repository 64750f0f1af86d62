"""A run gives host memory back: tiers whose bytes are the host's memory (a directory on tmpfs,
as the default's, a memory tier) are emptied when a run ends, unless run.keep_tiers
(``--keep-tiers``); tiers on disks and object stores keep their checkpoints."""
from __future__ import annotations

import asyncio
import os
import shutil
import uuid
from argparse import Namespace
from pathlib import Path

import pytest

from emulator.checkpoint import layout
from emulator.cli.common import load
from tiers.directory import RAM_FILESYSTEMS, DirTier
from tiers.emulated import EmulatedTier
from tiers.fileops import fs_type
from tiers.memory import MemoryTier


@pytest.fixture
def shm():
    if not os.path.isdir("/dev/shm") or fs_type(os.stat("/dev/shm").st_dev) not in RAM_FILESYSTEMS:
        pytest.skip("no tmpfs at /dev/shm")
    root = Path("/dev/shm") / f"ckpt-emu-test-{uuid.uuid4().hex[:8]}"
    root.mkdir()
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_which_tiers_are_host_memory(shm, tmp_path):
    assert DirTier(shm).in_host_memory and MemoryTier().in_host_memory
    assert EmulatedTier(DirTier(shm), write_bps=1e9).in_host_memory  # a wrapper is what it wraps
    on_disk = fs_type(os.stat(tmp_path).st_dev) not in RAM_FILESYSTEMS
    assert DirTier(tmp_path).in_host_memory is not on_disk


def test_delete_all_removes_every_checkpoint_complete_or_not():
    tier = MemoryTier()

    async def fill():
        await tier.put(layout.rank_file_key(2, 0, 0, 0), b"x" * 10)
        await tier.put(layout.manifest_key(2), b"{}")
        await tier.put(layout.rank_file_key(4, 0, 0, 0), b"partial checkpoint")
    asyncio.run(fill())
    assert asyncio.run(layout.delete_all(tier)) == [2, 4]
    assert asyncio.run(tier.list("")) == []


def test_keep_tiers_is_a_flag_and_a_key():
    args = Namespace(config=None, set=None, keep_tiers="true")
    assert load(args).run.keep_tiers is True
    assert load(Namespace(config=None, set=["run.keep_tiers=true"])).run.keep_tiers is True
    assert load(Namespace(config=None, set=None)).run.keep_tiers is False
