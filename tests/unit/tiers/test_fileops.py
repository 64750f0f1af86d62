"""Durability of folders: what a power cut would otherwise lose even after every file's fsync; and
writes that the kernel takes in parts."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import tiers.fileops as fileops
from tiers.directory import DirTier


@pytest.fixture
def fsynced_dirs(monkeypatch):
    calls = []
    real = fileops.fsync_dir

    def record(path, **kw):
        calls.append(str(path))
        real(path, **kw)
    monkeypatch.setattr(fileops, "fsync_dir", record)
    return calls


def test_make_dirs_fsyncs_the_parent_of_every_folder_it_creates(tmp_path, fsynced_dirs):
    fileops.make_dirs(tmp_path / "a" / "b" / "c")
    assert fsynced_dirs == [str(tmp_path), str(tmp_path / "a"), str(tmp_path / "a" / "b")]
    fsynced_dirs.clear()
    fileops.make_dirs(tmp_path / "a" / "b" / "c")  # nothing new: nothing to fsync
    assert fsynced_dirs == []


def test_a_new_step_folder_and_its_file_are_durable(tmp_path, fsynced_dirs):
    tier = DirTier(tmp_path / "tier")
    fsynced_dirs.clear()
    asyncio.run(tier.put("step_00000001/manifest.json", b"{}"))
    # the step folder's entry in the tier root, then the file's entry in the step folder
    assert fsynced_dirs == [str(tier.root), str(tier.root / "step_00000001")]


def test_delete_is_durable_and_removes_the_emptied_folder(tmp_path, fsynced_dirs):
    tier = DirTier(tmp_path / "tier")
    asyncio.run(tier.put("step_00000001/a.pt", b"1"))
    fsynced_dirs.clear()
    asyncio.run(tier.delete("step_00000001/a.pt"))
    assert not (tier.root / "step_00000001").exists()
    assert fsynced_dirs == [str(tier.root / "step_00000001"), str(tier.root)]


def test_copy_avoids_copy_file_range_where_the_filesystem_can_clone(tmp_path, monkeypatch):
    monkeypatch.setattr(fileops, "fs_type", lambda dev: "xfs")
    used = []
    monkeypatch.setattr(fileops, "_copy_file_range", lambda *a: used.append("cfr") or 0)
    src = tmp_path / "src"
    src.write_bytes(b"x" * 100_000)
    fileops.copy_file_durable(src, tmp_path / "dst")
    assert used == [] and (tmp_path / "dst").read_bytes() == src.read_bytes()


def test_fs_type_reads_mountinfo(tmp_path):
    import os
    assert fileops.fs_type(os.stat("/proc").st_dev) == "proc"


def test_a_partial_names_the_file_it_was_written_for_and_no_other_name_does():
    assert fileops.partial_of(fileops.partial_path(Path("out") / "progress.json").name) == "progress.json"
    assert fileops.partial_of(fileops.partial_path(Path("step_00000002") / "a.b.pt").name) == "a.b.pt"
    for name in ("progress.json", ".progress.json.partial", "progress.json.0123456789ab.partial"):
        assert fileops.partial_of(name) is None


def test_a_write_the_kernel_takes_in_parts_is_written_whole(tmp_path, monkeypatch):
    """One write() moves at most 2,147,479,552 bytes on Linux: ``write_all`` loops over short
    writes (here 3 bytes at a time) until every byte is written, and raises when none is taken."""
    import os
    real = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real(fd, bytes(data[:3])))
    path = tmp_path / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        assert fileops.write_all(fd, memoryview(b"0123456789")) == 10
    finally:
        os.close(fd)
    assert path.read_bytes() == b"0123456789"
    monkeypatch.setattr(os, "write", lambda fd, data: 0)
    with pytest.raises(OSError, match="write stopped after 0 of 4 bytes"):
        fileops.write_all(1, b"abcd")
