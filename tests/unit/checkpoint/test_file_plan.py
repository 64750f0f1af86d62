"""A restore from a tier without files reads the rank file once, laid out as the run writes it
(emulator/checkpoint/file_plan.py), and a file laid out otherwise still restores, read the general
way. In process, on the reference in-memory tier (no local paths, like S3)."""
import asyncio
import io

import crc32c
import pytest
import torch
import torch.utils.serialization as serialization

from emulator.checkpoint import layout
from emulator.checkpoint.checkpointer import Checkpointer
from emulator.checkpoint.file_plan import expected_layout
from emulator.checkpoint.restore import Restorer
from emulator.config import load_config
from emulator.design import resolve
from emulator.rank.comm import SoloComm
from emulator.workload.state import RankState
from tiers.directory import DirTier
from tiers.memory import MemoryTier

STEP = 3


class CountingMemoryTier(MemoryTier):
    """The in-memory tier, counting the bytes its readers hand out."""

    def __init__(self):
        super().__init__()
        self.read = 0

    def open_read(self, key):
        inner, tier = super().open_read(key), self

        class Counted(io.BufferedIOBase):
            def readable(self):
                return True

            def seekable(self):
                return True

            def seek(self, *a):
                return inner.seek(*a)

            def tell(self):
                return inner.tell()

            def read(self, n=-1):
                data = inner.read(n)
                tier.read += len(data)
                return data

            def readinto(self, b):
                n = inner.readinto(b)
                tier.read += n
                return n
        return Counted()


@pytest.fixture
def saved(tmp_path, monkeypatch):
    monkeypatch.setattr(serialization.config.save, "compute_crc32", False)  # as a rank sets it (the default)
    cfg = load_config("llama3-8b", ["run.scale=0.0002", "parallelism.ranks=1"])
    state = RankState.of_run(cfg, resolve(cfg, run=True), 0)
    glob = CountingMemoryTier()
    ck = Checkpointer(state, DirTier(tmp_path / "local"), glob, SoloComm(), keep=2)
    rec = ck.checkpoint(STEP, "sync")
    assert rec.global_complete, rec.error
    bits = _bits(state)
    for t in state.tensors("live"):  # training went on
        t.view(-1).view(torch.uint8)[::97] ^= 0x5A
    yield state, glob, bits
    ck.close()


def _bits(state) -> list:
    return [t.reshape(-1).view(torch.uint8).clone() for t in state.tensors("live")]  # bytes: NaNs differ


def _key(state):
    return layout.rank_file_key(STEP, 0, state.coords.dp, 0)


def _restore(state, glob):
    glob.read = 0
    rec = Restorer(state, [("global", glob)], SoloComm()).load()
    return rec


def _replace_file(glob, state, data: bytes):
    glob._objects[_key(state)] = data
    man = asyncio.run(layout.read_manifest(glob, STEP))
    man.files[0].size, man.files[0].crc32c = len(data), f"{crc32c.crc32c(data):08x}"
    asyncio.run(layout.write_manifest(glob, man))


def test_the_expected_layout_is_the_files_own(saved):
    state, glob, _ = saved
    data = glob._objects[_key(state)]
    plan = expected_layout(state, STEP)
    assert plan.size == len(data) and plan.whole_tensors
    meta = torch.load(io.BytesIO(data), map_location="meta", weights_only=True)
    offsets = sorted(m.untyped_storage()._checkpoint_offset for g in ("model", "optimizer") for m in meta[g].values())
    assert [off for off, _ in plan.spans] == offsets
    assert all(data[off:off + len(gap)] == gap for off, gap in plan.gaps)
    assert plan.matches([(0, data[off:off + len(gap)]) for off, gap in plan.gaps])
    assert not expected_layout(state, STEP + 1).matches(plan.gaps)  # the step is in the pickle


def test_a_restore_without_files_reads_the_file_once(saved):
    state, glob, bits = saved
    rec = _restore(state, glob)
    assert rec.ok and rec.step == STEP and rec.fallbacks == []
    assert glob.read == rec.bytes == len(glob._objects[_key(state)])  # one pass, no structure read first
    assert all(torch.equal(a, b) for a, b in zip(_bits(state), bits))


def test_a_file_laid_out_otherwise_restores_the_general_way(saved):
    """torch's zip CRC32 on: the same bytes of the tensors, other bytes in the structure."""
    state, glob, bits = saved
    buf = io.BytesIO()
    serialization.config.save.compute_crc32 = True
    torch.save(state.payload(STEP), buf)  # the staging buffers still hold the checkpoint's bytes
    serialization.config.save.compute_crc32 = False
    data = buf.getvalue()
    assert data != glob._objects[_key(state)] and len(data) == len(glob._objects[_key(state)])
    _replace_file(glob, state, data)
    rec = _restore(state, glob)
    assert rec.ok and rec.step == STEP and rec.fallbacks == []
    # read as written (intact, unmatched), then the general way: the structure, then every byte again
    assert 2 * len(data) < glob.read < 2 * len(data) + (256 << 10)
    assert all(torch.equal(a, b) for a, b in zip(_bits(state), bits))


def test_a_file_of_another_step_is_refused(saved):
    state, glob, _ = saved
    buf = io.BytesIO()
    torch.save(state.payload(STEP + 1), buf)
    _replace_file(glob, state, buf.getvalue())
    rec = _restore(state, glob)
    assert not rec.ok and rec.fallbacks == [f"global@{STEP}: file belongs to another step or rank"]


def test_a_corrupted_file_is_a_checksum_mismatch(saved):
    state, glob, _ = saved
    data = bytearray(glob._objects[_key(state)])
    data[len(data) // 2] ^= 0xFF
    glob._objects[_key(state)] = bytes(data)
    rec = _restore(state, glob)
    assert not rec.ok and rec.fallbacks[0].startswith(f"global@{STEP}: checksum mismatch")
