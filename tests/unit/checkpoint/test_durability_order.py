"""The durability rule, checked on the order of a real checkpoint's system calls, without strace.

A checkpoint is complete only when every file and its manifest are durable: each file is fsynced
before it is renamed into place and its folder fsynced after (tiers/fileops.py ``publish``); a
step's manifest is renamed into place only after every file of the step is durable ("manifest
last"); retention unlinks the manifest before any file ("deleted first"). A power cut between any
two calls then never leaves a manifest that lists a file the disk lost.

One rank checkpoints in this process (SoloComm) to a local tier and drains to a global one, with
os.fsync, os.replace, os.rename and os.unlink logged in the order the threads call them. Before
this test only an 8-rank run under strace saw a skipped fsync (tests/system/run/test_mlperf_e2e.py).
"""
from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest
from rundesign import rank_state

from emulator.checkpoint.checkpointer import Checkpointer
from emulator.checkpoint.layout import MANIFEST
from emulator.config import load_config
from emulator.rank.comm import SoloComm
from tiers.directory import DirTier
from tiers.fileops import is_partial


class CallLog:
    """("fsync", path), ("rename", src, dst), ("unlink", path), in call order, from every thread."""

    def __init__(self, monkeypatch):
        self.calls, self._lock = [], threading.Lock()
        for name in ("fsync", "replace", "rename", "unlink"):
            monkeypatch.setattr(os, name, self._logged(name, getattr(os, name)))

    def _logged(self, name, real):
        def call(*args, **kwargs):
            entry = self._entry(name, args, kwargs)
            result = real(*args, **kwargs)
            with self._lock:
                self.calls.append(entry)
            return result
        return call

    @staticmethod
    def _path(path, dir_fd=None) -> str:
        if isinstance(path, int):
            return os.readlink(f"/proc/self/fd/{path}")
        if dir_fd is not None:
            return os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), os.fsdecode(path))
        return os.path.abspath(os.fsdecode(path))

    def _entry(self, name, args, kwargs) -> tuple:
        if name == "fsync":
            return ("fsync", self._path(args[0]))
        if name in ("replace", "rename"):
            return ("rename", self._path(args[0], kwargs.get("src_dir_fd")), self._path(args[1], kwargs.get("dst_dir_fd")))
        return ("unlink", self._path(args[0], kwargs.get("dir_fd")))

    def index(self, entry: tuple) -> int:
        return self.calls.index(entry)


def published(log: CallLog, root: Path) -> list[tuple[int, str, str]]:
    """(position, partial, final) of every file renamed into place under ``root``."""
    return [(i, c[1], c[2]) for i, c in enumerate(log.calls)
            if c[0] == "rename" and c[2].startswith(str(root) + "/") and not is_partial(os.path.basename(c[2]))
            and is_partial(os.path.basename(c[1]))]


def check_durability_rule(log: CallLog, root: Path) -> int:
    """Every file published under ``root`` was fsynced before its rename and its folder after it,
    and every manifest was renamed after each file of its step was durable. Returns the manifests."""
    files = published(log, root)
    assert files, f"nothing was published under {root}: {log.calls}"
    durable = {}  # final path -> position of its folder's fsync after the rename
    for i, partial, final in files:
        before = [j for j, c in enumerate(log.calls[:i]) if c == ("fsync", partial)]
        assert before, f"{final} was renamed into place before its data was fsynced"
        after = [j for j, c in enumerate(log.calls) if j > i and c == ("fsync", os.path.dirname(final))]
        assert after, f"the folder of {final} was never fsynced after its rename"
        durable[final] = after[0]
    manifests = [(i, final) for i, _, final in files if os.path.basename(final) == MANIFEST]
    for i, manifest in manifests:
        step = os.path.dirname(manifest)
        for final, at in durable.items():
            if os.path.dirname(final) == step and final != manifest:
                assert at < i, f"{manifest} was published before {final} was durable"
    return len(manifests)


@pytest.fixture
def checkpoints(tmp_path, monkeypatch):
    """Three sync checkpoints of one rank (keep 1: the two older ones deleted), under the log."""
    cfg = load_config("llama3-8b", ["run.scale=0.0002", "parallelism.ranks=1"])
    state = rank_state(cfg, 0)
    local, glob = DirTier(tmp_path / "local"), DirTier(tmp_path / "global")
    log = CallLog(monkeypatch)
    ckpt = Checkpointer(state, local, glob, SoloComm(), keep=1)
    try:
        for step in (1, 2, 3):
            rec = ckpt.checkpoint(step, "sync")
            assert rec.local_complete and rec.global_complete, rec.error
        ckpt.finish()
    finally:
        ckpt.close()
    monkeypatch.undo()
    return log, local.root, glob.root


def test_files_are_fsynced_before_their_rename_and_the_manifest_comes_last(checkpoints):
    log, local, glob = checkpoints
    assert check_durability_rule(log, local) == 3  # the ranks' writes and their manifests
    assert check_durability_rule(log, glob) == 3   # the drain's copies and the global manifests


def test_retention_unlinks_the_manifest_before_any_file_of_its_step(checkpoints):
    log, local, glob = checkpoints
    for root in (local, glob):
        for step in ("step_00000001", "step_00000002"):
            folder = str(root / step) + "/"
            gone = [(i, c[1]) for i, c in enumerate(log.calls) if c[0] == "unlink" and c[1].startswith(folder)
                    and not is_partial(os.path.basename(c[1]))]
            assert gone and os.path.basename(gone[0][1]) == MANIFEST, (root, step, gone)
            assert not (root / step).exists()


@pytest.mark.parametrize("door", ["put_file", "get_file"])
def test_a_copy_without_a_read_back_is_fsynced_before_its_rename(tmp_path, monkeypatch, door):
    """A drain that verifies reads its copy back and fsyncs it on the way (the checkpoints above); the
    doors that copy without a read-back (a drain with verification off, a restore's fetch from a dir
    tier) fsync in ``publish`` itself: a copy renamed into place unsynced there was caught by no quick test."""
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(1 << 20))
    tier = DirTier(tmp_path / "tier")
    if door == "get_file":
        asyncio.run(tier.put_file("step/rank.pt", src))
    log = CallLog(monkeypatch)
    if door == "put_file":
        asyncio.run(tier.put_file("step/rank.pt", src))
        root = tmp_path / "tier"
    else:
        asyncio.run(tier.get_file("step/rank.pt", tmp_path / "fetched" / "rank.pt"))
        root = tmp_path / "fetched"
    monkeypatch.undo()
    assert check_durability_rule(log, root) == 0
