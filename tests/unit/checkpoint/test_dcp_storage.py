"""PyTorch DCP saving and loading through our tiers (emulator/checkpoint/dcp_storage.py), in a
single-process gloo world: DCP's own files and format, each file recorded with its size and CRC32C,
checked before a load uses it, paced by an emulated tier, and readable by DCP's own converter in a
fresh process."""
import asyncio
import os
import subprocess
import sys
import time

import crc32c
import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

from torch.distributed.checkpoint.api import CheckpointException

from emulator.checkpoint.dcp_storage import (METADATA, ChecksumMismatch, TierStorageReader, TierStorageWriter,
                                             rank_error)
from tiers.directory import DirTier
from tiers.emulated import EmulatedTier
from tiers.memory import MemoryTier

FOLDER = "step_00000007"


@pytest.fixture
def world(tmp_path):
    """A gloo world of one process (the rank's own group, as a run's checkpointer has)."""
    assert not dist.is_initialized()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    yield dist.group.WORLD
    dist.destroy_process_group()


def state(seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"model.pp0.tp0.layers.0.weight": torch.randn(256, 64, generator=g),
            "model.pp0.tp0.layers.0.norm": torch.randn(64, generator=g).to(torch.bfloat16),
            "optimizer.pp0.tp0.shard0.exp_avg.partition": torch.randn(20000, generator=g)}


def zeros_like(sd: dict) -> dict:
    return {k: torch.zeros_like(v) for k, v in sd.items()}


def stored(tier, key: str) -> bytes:
    return asyncio.run(tier.get(key))


@pytest.mark.parametrize("make", [lambda p: DirTier(p / "tier"), lambda p: MemoryTier()], ids=["dir", "memory"])
def test_dcp_writes_its_files_through_a_tier_and_loads_them_back(world, tmp_path, make):
    tier, sd = make(tmp_path), state()
    writer = TierStorageWriter(tier, FOLDER)
    dcp.save(sd, storage_writer=writer, process_group=world)
    keys = sorted(asyncio.run(tier.list(FOLDER + "/")))
    assert keys == [f"{FOLDER}/{METADATA}", f"{FOLDER}/__0_0.distcp"]
    assert sorted(e.key for e in writer.files) == keys
    for e in writer.files:  # each file as the manifest will list it
        data = stored(tier, e.key)
        assert (e.rank, e.size, e.crc32c) == (0, len(data), f"{crc32c.crc32c(data):08x}")
    loaded = zeros_like(sd)
    dcp.load(loaded, storage_reader=TierStorageReader(tier, FOLDER, entries=writer.files), process_group=world)
    assert all(torch.equal(loaded[k], sd[k]) for k in sd)


def test_a_file_that_is_not_the_manifests_is_refused(world, tmp_path):
    tier, sd = DirTier(tmp_path / "tier"), state()
    writer = TierStorageWriter(tier, FOLDER)
    dcp.save(sd, storage_writer=writer, process_group=world)
    data = next(f for f in writer.files if f.key.endswith(".distcp"))
    path = tier.local_path(data.key)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # one flipped byte, same size
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointException) as caught:  # a BaseException: DCP's, wrapping each rank's
        dcp.load(zeros_like(sd), storage_reader=TierStorageReader(tier, FOLDER, entries=writer.files),
                 process_group=world)
    error = rank_error(caught.value)
    assert isinstance(error, ChecksumMismatch) and "CRC32C" in str(error) and not error.transient
    unlisted = [f for f in writer.files if f.key != data.key]
    with pytest.raises(CheckpointException) as caught:
        dcp.load(zeros_like(sd), storage_reader=TierStorageReader(tier, FOLDER, entries=unlisted),
                 process_group=world)
    assert "not in the checkpoint's manifest" in str(rank_error(caught.value))


def test_writer_threads_write_a_file_each(world, tmp_path):
    tier = DirTier(tmp_path / "tier")
    writer = TierStorageWriter(tier, FOLDER, thread_count=2)
    dcp.save(state(), storage_writer=writer, process_group=world)
    assert sorted(e.key.rsplit("/", 1)[1] for e in writer.files) == [METADATA, "__0_0.distcp", "__0_1.distcp"]


def test_a_paced_tier_holds_the_save_to_its_rate(world, tmp_path):
    """0.5 MiB/s on a ~0.4 MiB checkpoint: the save takes at least its bytes at that rate."""
    tier = EmulatedTier(DirTier(tmp_path / "tier"), write_bps=0.5 * 2**20)
    writer = TierStorageWriter(tier, FOLDER)
    t0 = time.monotonic()
    dcp.save(state(), storage_writer=writer, process_group=world)
    took = time.monotonic() - t0
    assert took >= 0.98 * sum(e.size for e in writer.files) / (0.5 * 2**20)


def test_async_save_with_a_reusable_stager_completes_in_the_background(world, tmp_path):
    tier, sd = DirTier(tmp_path / "tier"), state()
    stager = DefaultStager(StagingOptions(use_pinned_memory=False, use_shared_memory=False,
                                          use_async_staging=False, use_non_blocking_copy=False))
    try:
        for step in (1, 2):
            writer = TierStorageWriter(tier, f"step_{step:08d}")
            dcp.async_save(sd, storage_writer=writer, process_group=world, async_stager=stager).result()
            assert len(writer.files) == 2
    finally:
        stager.close()
    loaded = zeros_like(sd)
    dcp.load(loaded, storage_reader=TierStorageReader(tier, "step_00000002", entries=writer.files),
             process_group=world)
    assert all(torch.equal(loaded[k], sd[k]) for k in sd)


def test_dcps_own_converter_reads_the_tiers_checkpoint_in_a_fresh_process(world, tmp_path):
    tier, sd = DirTier(tmp_path / "tier"), state()
    dcp.save(sd, storage_writer=TierStorageWriter(tier, FOLDER), process_group=world)
    torch.save(sd, tmp_path / "expected.pt")
    script = ("import sys, torch\n"
              "from torch.distributed.checkpoint.format_utils import dcp_to_torch_save\n"
              "dcp_to_torch_save(sys.argv[1], sys.argv[2])\n"
              "got, want = torch.load(sys.argv[2]), torch.load(sys.argv[3])\n"
              "assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want), got.keys()\n"
              "print('same', sum(t.nbytes for t in got.values()))\n")
    out = subprocess.run([sys.executable, "-c", script, str(tier.local_path(FOLDER)), str(tmp_path / "conv.pt"),
                          str(tmp_path / "expected.pt")], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": ""})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["same", str(sum(t.nbytes for t in sd.values()))]
