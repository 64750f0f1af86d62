"""Checksums: CRC32C computed while bytes stream out, and verification of stored files.

CRC32C runs at ~11 GiB/s here (hardware instruction) and releases the GIL, so
it costs the save path little; it replaces ``torch.save``'s own zip CRC32,
which is the main CPU cost of ``torch.save`` and is turned off by default.
"""
from __future__ import annotations

import crc32c

from tiers.base import Sink

READ_CHUNK = 16 << 20


class ChecksumSink(Sink):
    """Wraps a Sink, computing CRC32C and counting bytes of everything written."""

    def __init__(self, inner: Sink):
        self._inner = inner
        self.crc = 0
        self.bytes_written = 0

    def write(self, data) -> int:
        n = self._inner.write(data)
        self.crc = crc32c.crc32c(memoryview(data)[:n], self.crc)
        self.bytes_written += n
        return n

    def flush(self) -> None:
        self._inner.flush()

    def commit(self) -> None:
        self._inner.commit()

    def abort(self) -> None:
        self._inner.abort()

    @property
    def hexdigest(self) -> str:
        return format_crc(self.crc)


def format_crc(crc: int) -> str:
    return f"{crc:08x}"


def crc_of_stream(stream, buf: bytearray | None = None) -> tuple[str, int]:
    """CRC32C and length of a readable binary stream, read in large chunks."""
    buf = buf if buf is not None else bytearray(READ_CHUNK)
    view = memoryview(buf)
    crc, total = 0, 0
    readinto = getattr(stream, "readinto", None)
    while True:
        if readinto is not None:
            n = readinto(view)
            if not n:
                break
            crc = crc32c.crc32c(view[:n], crc)
        else:
            chunk = stream.read(len(buf))
            if not chunk:
                break
            n = len(chunk)
            crc = crc32c.crc32c(chunk, crc)
        total += n
    return format_crc(crc), total
