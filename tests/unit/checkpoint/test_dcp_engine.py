"""A rank's checkpoints by DCP (emulator/checkpoint/dcp_engine.py), in a one-process gloo world: sync and
async saves of a real rank state through a tier, the library's own phases timed, loads restoring it."""
import asyncio
import time

import pytest
import torch
import torch.distributed as dist

from emulator.checkpoint.dcp_engine import DcpSaver, state_dict
from emulator.config import load_config
from emulator.workload.state import RankState
from tiers.directory import DirTier


@pytest.fixture
def group(tmp_path):
    assert not dist.is_initialized()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    yield dist.new_group(backend="gloo")
    dist.destroy_process_group()



def _same(a, b) -> bool:
    """Byte for byte (random bytes hold NaNs, which torch.equal calls unequal)."""
    return torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def test_sync_and_async_saves_write_dcps_files_and_time_its_phases(group, tmp_path):
    cfg = load_config("llama3-8b", ["parallelism.dp=1", "parallelism.zero_stage=0"])
    state = RankState(cfg.model, cfg.parallelism, 0, scale=0.0002)
    saver, tier = DcpSaver(state, cfg.parallelism, group), DirTier(tmp_path / "tier")
    files, times = saver.save(tier, "step_00000001")
    assert sorted(f.key for f in files) == ["step_00000001/.metadata", "step_00000001/__0_0.distcp"]
    assert times.planning_s > 0 and times.write_s > 0 and times.finish_s > 0 and times.staging_s == 0
    before = {k: t.clone() for k, t in state_dict(state, cfg.parallelism).items()}
    future, times = saver.async_save(tier, "step_00000002")
    assert times.staging_s > 0
    state.mutate(1)  # training goes on: the save has its staged copy
    files = future.result(timeout=120)
    assert times.write_s > 0 and len(files) == 2
    saver.load(tier, "step_00000002", files)
    assert all(_same(t, before[k]) for k, t in state_dict(state, cfg.parallelism).items())
    saver.close()


def test_a_load_refuses_a_file_the_manifest_does_not_list(group, tmp_path):
    cfg = load_config("llama3-8b", ["parallelism.dp=1", "parallelism.zero_stage=0"])
    state = RankState(cfg.model, cfg.parallelism, 0, scale=0.0001)
    saver, tier = DcpSaver(state, cfg.parallelism, group), DirTier(tmp_path / "tier")
    files, _ = saver.save(tier, "step_00000001")
    asyncio.run(tier.put("step_00000001/.metadata", b"not a pickle"))
    with pytest.raises(Exception, match="CRC32C a99bb018; the manifest lists"):  # not DCP's BaseException
        saver.load(tier, "step_00000001", files)


def test_the_pipeline_saves_with_dcp_drains_and_restores_from_the_nearest_tier(group, tmp_path):
    """The checkpointer with engine dcp, sync then async: each checkpoint's DCP files (its .distcp and
    .metadata) listed in both tiers' manifests with their sizes and CRC32Cs, drained to global; a
    restore loads the newest from the local tier, then from global once the local copy is corrupt."""
    from emulator.checkpoint import layout
    from emulator.checkpoint.checkpointer import Checkpointer
    from emulator.checkpoint.dcp_engine import Dcp
    from emulator.checkpoint.restore import Restorer
    from emulator.rank.comm import SoloComm

    cfg = load_config("llama3-8b", ["parallelism.dp=1", "parallelism.zero_stage=0"])
    state = RankState(cfg.model, cfg.parallelism, 0, scale=0.0002)
    saver = DcpSaver(state, cfg.parallelism, group)
    local, glob = DirTier(tmp_path / "local"), DirTier(tmp_path / "global")
    ckpt = Checkpointer(state, local, glob, SoloComm(), keep=3, engine=Dcp(saver, node_copy=False))
    try:
        ckpt.checkpoint(1, "sync")
        ckpt.checkpoint(2, "async")
        ckpt.finish()
    finally:
        ckpt.close()
    assert all(r.global_complete and r.engine_s["write_s"] > 0 for r in ckpt.records)
    assert ckpt.records[1].engine_s["staging_s"] > 0
    for tier in (local, glob):
        m = asyncio.run(layout.read_manifest(tier, 2))
        assert sorted(f.key.rsplit("/", 1)[1] for f in m.files) == [".metadata", "__0_0.distcp"]
        for f in m.files:
            assert tier.local_path(f.key).stat().st_size == f.size
    saved = {k: t.clone() for k, t in state_dict(state, cfg.parallelism).items()}
    state.mutate(3)
    restorer = Restorer(state, [("local", local), ("global", glob)], SoloComm(), dcp=saver)
    rec = restorer.load()
    assert rec.ok and (rec.step, rec.tier) == (2, "local") and rec.bytes > 0
    assert all(_same(t, saved[k]) for k, t in state_dict(state, cfg.parallelism).items())
    path = local.local_path("step_00000002/__0_0.distcp")
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 3] ^= 1
    path.write_bytes(bytes(raw))
    rec = Restorer(state, [("local", local), ("global", glob)], SoloComm(), dcp=saver).load()
    assert rec.ok and (rec.step, rec.tier) == (2, "global")
    assert any(f.startswith("local@2: checksum mismatch") for f in rec.fallbacks)
    saver.close()


def test_an_async_saves_paced_writes_count_as_the_local_write_in_dcps_own_thread(group, tmp_path):
    """DCP writes an async save from a thread of its own, which inherits no context: its paced spans
    must still count as the local write, or the run reads the write as all the host's own time and
    scales it by the bytes (a 2.6 s write read as 43 minutes at full size)."""
    from tiers import paced
    from tiers.emulated import EmulatedTier
    cfg = load_config("llama3-8b", ["parallelism.dp=1", "parallelism.zero_stage=0"])
    state = RankState(cfg.model, cfg.parallelism, 0, scale=0.0002)
    saver = DcpSaver(state, cfg.parallelism, group)
    tier = EmulatedTier(DirTier(tmp_path / "tier"), write_bps=20e6, shared_by="rank")  # ~0.1 s a save
    paced.clear()
    t0 = time.time()
    future, _ = saver.async_save(tier, "step_00000001")
    files = future.result(timeout=120)
    t1 = time.time()
    due = sum(f.size for f in files) / 20e6
    assert paced.seconds("local_write", t0, t1) >= 0.9 * due
    saver.close()


def test_the_device_books_a_saves_bytes_from_when_dcp_begins_writing_not_from_the_ranks_barrier(group, tmp_path):
    """DCP plans (collectives, the software's own time) before it writes: booked from the node's
    barrier, the paced device time would cover the planning too, and the run would shrink DCP's
    planning by the time factor at full size. The paced spans begin when the writes do."""
    from tiers import paced
    from tiers.emulated import EmulatedTier, anchored_at, counted_as
    cfg = load_config("llama3-8b", ["parallelism.dp=1", "parallelism.zero_stage=0"])
    state = RankState(cfg.model, cfg.parallelism, 0, scale=0.0001)
    saver = DcpSaver(state, cfg.parallelism, group)
    tier = EmulatedTier(DirTier(tmp_path / "tier"), write_bps=50e6, shared_by="rank")
    paced.clear()
    barrier = time.time() - 5.0  # the node's ranks were ready long before DCP got to its writes
    with counted_as("local_write"), anchored_at(barrier):
        saver.save(tier, "step_00000001")
    spans = paced.spans("local_write", barrier, time.time())
    assert spans and spans[0][0] > barrier + 4.9  # not from the barrier
    saver.close()
