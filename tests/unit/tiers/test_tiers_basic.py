"""The tier contract on the directory and memory tiers, plus directory-only crash behaviour."""
import asyncio
import os

import pytest

from tiers.directory import DirTier
from tiers.memory import MemoryTier
from tiers.testing import TierContract


class TestMemoryTier(TierContract):
    @pytest.fixture
    def tier(self):
        return MemoryTier()


class TestDirTier(TierContract):
    @pytest.fixture
    def tier(self, tmp_path):
        return DirTier(tmp_path / "tier")

    def test_partials_are_hidden_and_swept(self, tier):
        sink = tier.open_write("step_1/y.pt")
        sink.write(b"half")  # a crash here leaves a .partial file
        assert asyncio.run(tier.list()) == []
        assert tier.sweep_partials() == 1
        assert not any(f for _, _, f in os.walk(tier.root) if f)

    def test_delete_prunes_empty_folders(self, tier):
        asyncio.run(tier.put("step_1/a", b"1"))
        asyncio.run(tier.delete("step_1/a"))
        assert not (tier.root / "step_1").exists()

    def test_local_path_is_the_object(self, tier):
        asyncio.run(tier.put("p/q", b"bytes"))
        assert tier.local_path("p/q").read_bytes() == b"bytes"


class TestFaultyTier(TierContract):
    """Between outages, the fault-injection wrapper is a tier like any other."""

    @pytest.fixture
    def tier(self, tmp_path):
        from tiers.faulty import FaultyTier
        return FaultyTier(DirTier(tmp_path / "tier"))

    def test_an_outage_fails_every_door_and_leaves_nothing(self, tier):
        from tiers.faulty import TransientFault
        tier.activate(60)
        with pytest.raises(TransientFault):
            asyncio.run(tier.put("k", b"x"))
        with pytest.raises(TransientFault):
            with tier.open_write("s/obj") as sink:
                sink.write(b"abc")  # bytes pass; the commit is refused and the sink aborts
        with pytest.raises(TransientFault):
            tier.open_read("k")
        assert not any(f for _, _, f in os.walk(tier.inner.root) if f)
