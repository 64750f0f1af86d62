"""The contract every Tier must pass, shipped with the package so a backend from outside can run it.

A backend's test module subclasses ``TierContract`` and provides a ``tier``
fixture yielding a fresh, empty tier; pytest then runs every test here
against it (the tests are the spec)::

    from tiers.testing import TierContract

    class TestMyTier(TierContract):
        @pytest.fixture
        def tier(self, tmp_path):
            yield MyTier(...)

Needs pytest, from the ``testing`` extra (``pip install 'ckpt-emu[testing]'``): a test tool,
not something ``import tiers`` needs.
"""
from __future__ import annotations

import os

try:
    import pytest
except ImportError:
    raise ImportError("tiers.testing runs the backend contract under pytest: pip install 'ckpt-emu[testing]'") from None

from tiers.base import InvalidKey, Tier
from tiers.copycrc import copy_crc32c
from tiers.runsync import run_sync

BAD_KEYS = ["", "/abs/path", "../escape", "a/../../b", "a//b", "./a", "a/./b", "a\\b", "nul\x00byte", "a/"]


def run(coro):
    return run_sync(coro)  # objects as large as a backend's users store, without CPU per byte


class TierContract:
    """Subclasses define a ``tier`` fixture yielding a fresh, empty Tier."""

    def test_put_get_roundtrip(self, tier: Tier):
        data = os.urandom(1 << 16)
        run(tier.put("a/b/c.bin", data))
        assert run(tier.get("a/b/c.bin")) == data
        assert run(tier.size("a/b/c.bin")) == len(data)

    def test_missing_object(self, tier: Tier):
        assert run(tier.size("nope")) is None
        with pytest.raises(FileNotFoundError):
            run(tier.get("nope"))
        with pytest.raises(FileNotFoundError):
            tier.open_read("nope").read()

    def test_overwrite_replaces_whole_object(self, tier: Tier):
        run(tier.put("k", b"x" * 1000))
        run(tier.put("k", b"short"))
        assert run(tier.get("k")) == b"short"

    def test_empty_object(self, tier: Tier):
        run(tier.put("empty", b""))
        assert run(tier.get("empty")) == b""
        assert run(tier.size("empty")) == 0

    def test_list_prefix_sorted(self, tier: Tier):
        for k in ["s2/b", "s1/a", "s1/c/d", "s10/x", "top"]:
            run(tier.put(k, k.encode()))
        assert run(tier.list()) == ["s1/a", "s1/c/d", "s10/x", "s2/b", "top"]
        assert run(tier.list("s1/")) == ["s1/a", "s1/c/d"]
        assert run(tier.list("s1")) == ["s1/a", "s1/c/d", "s10/x"]
        assert run(tier.list("none/")) == []

    def test_delete_is_idempotent(self, tier: Tier):
        run(tier.put("d/x", b"1"))
        run(tier.delete("d/x"))
        run(tier.delete("d/x"))
        assert run(tier.size("d/x")) is None
        assert run(tier.list("d/")) == []

    def test_sink_invisible_until_commit(self, tier: Tier):
        sink = tier.open_write("s/obj")
        sink.write(b"abc" * 1000)
        assert run(tier.size("s/obj")) is None
        assert run(tier.list("s/")) == []
        sink.commit()
        assert run(tier.get("s/obj")) == b"abc" * 1000

    def test_sink_abort_leaves_previous_value(self, tier: Tier):
        run(tier.put("s/obj", b"old"))
        with pytest.raises(RuntimeError):
            with tier.open_write("s/obj") as sink:
                sink.write(b"new-partial")
                raise RuntimeError("writer crashed")
        assert run(tier.get("s/obj")) == b"old"
        assert run(tier.list("s/")) == ["s/obj"]

    def test_put_file_get_file(self, tier: Tier, tmp_path):
        src = tmp_path / "src.bin"
        data = os.urandom(3 * (1 << 20) + 7)
        src.write_bytes(data)
        run(tier.put_file("f/src.bin", src))
        assert run(tier.size("f/src.bin")) == len(data)
        dest = tmp_path / "out" / "dest.bin"
        dest.parent.mkdir()
        run(tier.get_file("f/src.bin", dest))
        assert dest.read_bytes() == data
        with tier.open_read("f/src.bin") as fh:
            assert fh.read() == data

    def test_put_file_read_back_stores_the_file_and_says_what_it_read(self, tier: Tier, tmp_path):
        """Stored as ``put_file`` stores it; a read-back, where the tier gives one, is of those bytes."""
        src = tmp_path / "src.bin"
        data = os.urandom(3 * (1 << 20) + 7)
        src.write_bytes(data)
        read_back = run(tier.put_file_read_back("f/src.bin", src))
        assert read_back is None or read_back == (copy_crc32c(bytearray(len(data)), 0, data, 0), len(data))
        with tier.open_read("f/src.bin") as fh:
            assert fh.read() == data

    def test_get_file_missing(self, tier: Tier, tmp_path):
        with pytest.raises(FileNotFoundError):
            run(tier.get_file("missing", tmp_path / "x"))

    @pytest.mark.parametrize("key", BAD_KEYS)
    def test_rejects_bad_keys(self, tier: Tier, key):
        with pytest.raises(InvalidKey):
            run(tier.put(key, b"x"))
        with pytest.raises(InvalidKey):
            run(tier.size(key))
        with pytest.raises(InvalidKey):
            tier.open_write(key)
