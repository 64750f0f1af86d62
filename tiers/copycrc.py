"""Copy bytes into a writable buffer and return their CRC32C: in one pass where the compiled
``tiers._copycrc`` is here (x86-64 with SSE4.2: about one memcpy), else a copy then a checksum
of each 512 KiB piece while it is in cache (about 1.6 memcpys). Both give what
``crc32c.crc32c(src, crc)`` gives."""
from __future__ import annotations

import crc32c

from .fileops import as_bytes

try:
    from ._copycrc import copy_crc32c as _fused
except ImportError:  # not built (no compiler) or not this CPU
    _fused = None

#: whether copies here are fused with their checksum (the benches report it)
FUSED = _fused is not None
PIECE = 512 << 10


def copy_crc32c(dst, offset: int, src, crc: int) -> int:
    """Copy ``src`` into ``dst`` (a writable buffer, e.g. an mmap) at ``offset``; its CRC32C
    continued from ``crc``. ValueError when it does not fit."""
    if _fused is not None:
        return _fused(dst, offset, src, crc)
    return _copy_then_crc(dst, offset, as_bytes(src), crc)


def _copy_then_crc(dst, offset: int, src: memoryview, crc: int) -> int:
    if offset < 0 or offset + len(src) > len(dst):
        raise ValueError(f"{len(src)} bytes at offset {offset} do not fit a buffer of {len(dst)}")
    for start in range(0, len(src), PIECE):
        piece = src[start:start + PIECE]
        dst[offset + start:offset + start + len(piece)] = piece
        crc = crc32c.crc32c(piece, crc)
    return crc
