"""A drain whose source tier's folder was removed under the run says so: the tier was removed, not
that a file of it was missing (the run then ended with 'FileNotFoundError: step_.../…states.pt')."""
from __future__ import annotations

import asyncio
import shutil

from emulator.checkpoint.drainer import Drainer
from emulator.checkpoint.layout import FileEntry
from emulator.checkpoint.retry import RetryPolicy
from tiers.directory import DirTier


def test_a_drain_from_a_removed_folder_names_the_lost_tier(tmp_path):
    local, glob = DirTier(tmp_path / "local"), DirTier(tmp_path / "global")
    asyncio.run(local.put("step_00000001/r0.pt", b"x" * 1000))
    shutil.rmtree(tmp_path / "local")
    drainer = Drainer(local, glob, verify="size", policy=RetryPolicy(retries=0))
    result = asyncio.run(drainer.drain([FileEntry("step_00000001/r0.pt", 0, 1000, "00000000")]))
    assert not result.ok and result.error.startswith("TierLost: "), result.error
    assert f"dir tier {tmp_path / 'local'} was removed during the run" in result.error
