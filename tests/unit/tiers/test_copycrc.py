"""The memory tier's copy with its CRC32C in one pass (tiers/_copycrc.c) and the two-pass
fallback (tiers/copycrc.py): both copy every byte and give crc32c.crc32c's value, at every
length around the C loop's block edges, at any offset, continued from any CRC."""
import asyncio
import mmap
import os
import platform

import crc32c
import pytest

from tiers import copycrc

PATHS = {"two passes": copycrc._copy_then_crc}
if copycrc.FUSED:
    PATHS["fused"] = copycrc._fused

# the C loop copies up to 63 bytes to reach a whole line, then, from 3 x 4 lines on, three thirds
# of whole lines (one CRC stream each, joined at the end), then words, then bytes
LENGTHS = [0, 1, 7, 8, 9, 63, 64, 127, 383, 384, 385, 767, 768, 769, 768 + 191, 768 + 192, 768 + 64 + 13,
           8192 * 3 + 5, (1 << 20) + 3, (5 << 20) + 191]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("length", LENGTHS)
def test_copies_every_byte_and_gives_the_crc32c_of_them(path, length):
    src = os.urandom(length)
    for offset, start_crc in ((0, 0), (5, 0xDEADBEEF), (4093, 1)):  # unaligned both ends
        dst = bytearray(b"\xaa" * (length + offset + 11))
        crc = PATHS[path](dst, offset, memoryview(src), start_crc)
        assert crc == crc32c.crc32c(src, start_crc)
        assert dst[offset:offset + length] == src
        assert dst[:offset] == b"\xaa" * offset and dst[offset + length:] == b"\xaa" * 11


@pytest.mark.parametrize("path", PATHS)
def test_pieces_continue_one_crc_into_a_shared_mapping(path, tmp_path):
    """As the memory tier uses it: torch.save's writes, one after the other, into a kept mapping."""
    data = os.urandom(5 << 20)
    file = tmp_path / "tier.bin"
    file.write_bytes(b"\0" * len(data))
    with open(file, "r+b") as f, mmap.mmap(f.fileno(), len(data)) as mm:
        crc, pos = 0, 0
        for size in (17, 3 << 20, 1, (2 << 20) - 18):
            crc = PATHS[path](mm, pos, memoryview(data)[pos:pos + size], crc)
            pos += size
    assert pos == len(data) and crc == crc32c.crc32c(data)
    assert file.read_bytes() == data


@pytest.mark.parametrize("path", PATHS)
def test_what_does_not_fit_is_refused_and_nothing_is_copied(path):
    dst = bytearray(10)
    for offset, n in ((0, 11), (8, 3), (-1, 1), (11, 0)):
        with pytest.raises(ValueError, match="do not fit"):
            PATHS[path](dst, offset, b"x" * n, 0)
    assert dst == bytearray(10)


def test_the_public_call_takes_any_buffer_format():
    array = memoryview(bytearray(range(256)) * 4).cast("I")  # 4-byte items, not bytes
    dst = bytearray(1024)
    assert copycrc.copy_crc32c(dst, 0, array, 0) == crc32c.crc32c(bytes(array))
    assert dst == bytes(array)


@pytest.mark.skipif(not copycrc.FUSED, reason="no fused path here")
def test_the_fused_path_refuses_a_read_only_destination():
    with pytest.raises(TypeError):
        copycrc._fused(b"\0" * 8, 0, b"x", 0)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="the fused loop is x86-64 only")
def test_the_install_built_the_fused_copy_on_x86_64():
    """On x86-64 the install compiles it (it is optional only so that no compiler is no failure):
    without it a memory-tier save costs about 1.6 memcpys instead of one."""
    assert copycrc.FUSED, "tiers._copycrc was not built: is there a C compiler and Python.h?"


def test_a_memory_tier_save_without_the_compiled_module_gives_the_same_file(tmp_path, monkeypatch):
    """Where tiers._copycrc is not built, the mapped sink copies and checksums in two passes."""
    torch = pytest.importorskip("torch")
    from emulator.checkpoint.integrity import ChecksumSink, format_crc
    from tiers.directory import DirTier
    state = {"w": torch.arange(1 << 18, dtype=torch.float32)}
    tier = DirTier(tmp_path / "mem", recycle=True)
    digests = {}
    for fused in (True, False):
        if not fused:
            monkeypatch.setattr(copycrc, "_fused", None)
        for key in ("a", "b"):  # the second is copied through the kept mapping
            inner = tier.open_write(key)
            with ChecksumSink(inner) as sink:
                torch.save(state, sink)
            digests[fused, key] = (sink.hexdigest, tier.local_path(key).read_bytes())
            assert sink.hexdigest == format_crc(crc32c.crc32c(tier.local_path(key).read_bytes()))
            asyncio.run(tier.delete(key))
        assert inner.bytes_mapped > 0
    assert digests[True, "b"] == digests[False, "b"]
