"""Restore from the nearest tier, and the fallbacks when the nearest copy cannot be trusted.

In process (fast): one rank's Checkpointer writes real checkpoints to a local and a global
directory tier (sync mode, SoloComm); the tests damage them and check what
``Restorer.load()`` picks, why it fell back, and that the live state it restored equals
the saved one bit for bit. End to end: ``ckpt-emu run --lose-local-after N`` on directory
tiers recovers every rank from the global tier.
"""
import asyncio
import shutil

import pytest
import torch
from rundesign import rank_state
from s3server import s3_bucket, s3_endpoint, s3_server  # noqa: F401 - pytest fixtures

from emulator.checkpoint import layout
from emulator.checkpoint.checkpointer import Checkpointer
from emulator.checkpoint.restore import Restorer
from emulator.config import load_config
from emulator.rank.comm import SoloComm
from emulator.workload.state import RankState
from tiers.directory import DirTier

STEPS = (2, 4)


def perturb(state: RankState, step: int) -> None:
    """Flip one byte of every live tensor, so each step's state differs from every other's.

    (Independent of ``RankState.mutate``, so these tests control exactly which bytes differ.)
    """
    for t in state.tensors("live"):
        raw = t.view(-1).view(torch.uint8)
        raw[(step * 7919) % raw.numel()] ^= 0x5A


class Setup:
    """Two complete checkpoints (steps 2 and 4) on both tiers, then the live state moved on."""

    def __init__(self, tmp):
        self.cfg = load_config("llama3-8b", ["run.scale=0.0002", "parallelism.ranks=1"])
        self.state = rank_state(self.cfg, 0)
        self.local, self.glob = DirTier(tmp / "local"), DirTier(tmp / "global")
        self.ckpt = Checkpointer(self.state, self.local, self.glob, SoloComm(), keep=len(STEPS))
        self.saved = {}
        for step in range(1, STEPS[-1] + 1):
            perturb(self.state, step)
            if step in STEPS:
                rec = self.ckpt.checkpoint(step, "sync")
                assert rec.local_complete and rec.global_complete, rec.error
                self.saved[step] = self.bits()
        perturb(self.state, STEPS[-1] + 1)  # training went on: a restore must change the live state
        assert not self.live_equals(STEPS[-1])

    def bits(self) -> dict:
        return {(g, k): t.contiguous().view(-1).view(torch.uint8).clone()
                for g, ts in self.state.live.items() for k, t in ts.items()}

    def live_equals(self, step: int) -> bool:
        now = self.bits()
        return now.keys() == self.saved[step].keys() and all(
            torch.equal(now[k], self.saved[step][k]) for k in now)

    def root(self, tier: str):
        return {"local": self.local, "global": self.glob}[tier].root

    def file(self, tier: str, step: int):
        key = layout.rank_file_key(step, 0, self.state.coords.dp, 0)
        path = self.root(tier) / key
        assert path.is_file()
        return path

    def manifest_path(self, tier: str, step: int):
        return self.root(tier) / layout.manifest_key(step)

    def load(self):
        restorer = Restorer(self.state, [("local", self.local), ("global", self.glob)], SoloComm())
        return restorer.load()


@pytest.fixture
def setup(tmp_path):
    s = Setup(tmp_path)
    yield s
    s.ckpt.close()


def flip_bytes(path, offset=None, n=16):
    data = bytearray(path.read_bytes())
    offset = len(data) // 2 if offset is None else offset
    for i in range(offset, offset + n):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def test_intact_checkpoint_loads_newest_from_local(setup):
    rec = setup.load()
    assert (rec.ok, rec.step, rec.tier, rec.fallbacks) == (True, 4, "local", [])
    assert rec.bytes == setup.file("local", 4).stat().st_size
    assert setup.live_equals(4)


def test_corrupted_local_file_falls_back_to_global(setup):
    flip_bytes(setup.file("local", 4))  # same size: only the checksum can tell
    rec = setup.load()
    assert (rec.ok, rec.step, rec.tier) == (True, 4, "global")
    assert len(rec.fallbacks) == 1 and rec.fallbacks[0].startswith("local@4: checksum mismatch"), rec.fallbacks
    assert setup.live_equals(4)


def test_corrupted_zip_header_falls_back_to_global(setup):
    flip_bytes(setup.file("local", 4), offset=0, n=4)  # torch.load alone would refuse this file
    rec = setup.load()
    assert (rec.step, rec.tier) == (4, "global")
    assert rec.fallbacks[0].startswith("local@4: checksum mismatch")
    assert setup.live_equals(4)


def test_truncated_local_file_falls_back_to_global(setup):
    path = setup.file("local", 4)
    full = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.truncate(full // 3)
    rec = setup.load()
    assert (rec.ok, rec.step, rec.tier) == (True, 4, "global")
    assert rec.fallbacks == [f"local@4: size {full // 3} != manifest {full}"]
    assert setup.live_equals(4)


def test_corrupt_on_both_tiers_falls_back_to_previous_step(setup):
    flip_bytes(setup.file("local", 4))
    flip_bytes(setup.file("global", 4), offset=100)
    rec = setup.load()
    assert (rec.ok, rec.step, rec.tier) == (True, 2, "local")
    assert [f.split(":")[0] for f in rec.fallbacks] == ["local@4", "global@4"]
    assert all("checksum mismatch" in f for f in rec.fallbacks)
    assert setup.live_equals(2)


def test_manifest_listing_a_missing_file_falls_back(setup):
    setup.file("local", 4).unlink()  # the manifest still lists it
    rec = setup.load()
    assert (rec.ok, rec.step, rec.tier) == (True, 4, "global")
    assert rec.fallbacks == ["local@4: file missing"]
    assert setup.live_equals(4)


def test_step_complete_only_on_global_beats_older_local(setup):
    setup.manifest_path("local", 4).unlink()  # local step 4 incomplete; local step 2 still complete
    rec = setup.load()
    assert (rec.ok, rec.step, rec.tier) == (True, 4, "global")  # newest step first, not nearest tier
    assert rec.fallbacks == ["local@4: not complete on this tier"]
    assert setup.live_equals(4)


def test_torn_local_manifest_is_not_complete(setup):
    path = setup.manifest_path("local", 4)
    path.write_bytes(path.read_bytes()[:40])
    rec = setup.load()
    assert (rec.step, rec.tier) == (4, "global")
    assert rec.fallbacks == ["local@4: not complete on this tier"]
    assert setup.live_equals(4)


def test_file_of_another_step_is_refused(setup):
    """A local copy with a consistent manifest entry but the wrong content (step 2's file)."""
    shutil.copyfile(setup.file("local", 2), setup.file("local", 4))
    man = asyncio.run(layout.read_manifest(setup.local, 4))
    old = asyncio.run(layout.read_manifest(setup.local, 2)).files[0]
    man.files[0].size, man.files[0].crc32c = old.size, old.crc32c
    asyncio.run(layout.write_manifest(setup.local, man))
    rec = setup.load()
    assert (rec.step, rec.tier) == (4, "global")
    assert rec.fallbacks == ["local@4: file belongs to another step or rank"]
    assert setup.live_equals(4)


def test_lost_local_tier_loads_from_global(setup):
    shutil.rmtree(setup.root("local"))
    setup.root("local").mkdir()
    rec = setup.load()
    assert (rec.ok, rec.step, rec.tier) == (True, 4, "global")
    assert setup.live_equals(4)


def test_nothing_loadable_fails_and_leaves_state_alone(setup):
    before = setup.bits()
    for tier in ("local", "global"):
        for step in STEPS:
            flip_bytes(setup.file(tier, step))
    rec = setup.load()
    assert not rec.ok and rec.step == -1 and rec.tier == ""
    assert len(rec.fallbacks) == 4 and all("checksum mismatch" in f for f in rec.fallbacks)
    assert all(torch.equal(before[k], v) for k, v in setup.bits().items())


def test_mutate_changes_the_state_every_step():
    cfg = load_config("llama3-8b", ["run.scale=0.0002", "parallelism.ranks=1"])
    state = rank_state(cfg, 0)
    unchanged = []
    for step in range(1, 21):
        before = [t.view(-1).view(torch.uint8).clone() for t in state.tensors("live")]
        state.mutate(step)
        if all(torch.equal(b, t.view(-1).view(torch.uint8)) for b, t in zip(before, state.tensors("live"))):
            unchanged.append(step)
    assert unchanged == []


# ------------------------------------------------------------------ end to end: node loss


# --------------------------------------------------------------------------- from S3, in memory


class _AnotherRankLacks(SoloComm):
    """This rank's comm, with another rank in the job that holds no copy of the newest step (a node
    that lost its memory): the first agreement over it fails, later ones pass."""

    def __init__(self):
        super().__init__()
        self.agreements = 0

    def all_min(self, value: float) -> float:
        self.agreements += 1
        return 0.0 if self.agreements == 1 else value


def test_a_step_another_rank_cannot_load_is_not_read_here(setup, monkeypatch):
    """design-memory-peer-pfs after a node loss: node 0 held step 14 in memory, node 1 (replaced)
    did not; node 0's ranks read and verified their step-14 files, the collective then dropped the
    step, and they read step 12 as well: twice the restore's reads (8.1 s of paced reads against
    4 s). Every rank now agrees that each rank has a complete copy before any rank reads it."""
    reads = []
    monkeypatch.setattr(Restorer, "_read_from_tier", lambda self, tier, entry, step: reads.append(step))
    restorer = Restorer(setup.state, [("local", setup.local), ("global", setup.glob)], _AnotherRankLacks())
    rec = restorer.load()
    assert reads == [2] and (rec.ok, rec.step, rec.tier) == (True, 2, "local")
    assert rec.fallbacks == ["local@4: complete here, not on every rank"]
