"""Checksums: CRC32C computed while bytes stream out, and verification of stored files.

CRC32C runs on a hardware instruction and releases the GIL, so
it costs the save path little; it replaces ``torch.save``'s own zip CRC32,
which is the main CPU cost of ``torch.save`` and is turned off by default.
A large write is passed on in ``CRC_CHUNK`` pieces, each checksummed right
after it is copied, while its bytes are still in the CPU's cache: about 60%
of the cost of a CRC over bytes fetched from memory again. A sink that can
checksum while it copies (``copy_with_crc``: a mapped memory tier) is handed
the bytes whole instead, and the two happen in one pass.
"""
from __future__ import annotations

import errno

import crc32c

from tiers.base import Sink
from tiers.fileops import as_bytes

READ_CHUNK = 16 << 20
#: fits the L2 cache with room to spare (a 512 KiB - 1 MiB piece measured fastest)
CRC_CHUNK = 512 << 10


class ChecksumSink(Sink):
    """Wraps a Sink, computing CRC32C and counting bytes of everything written.

    It counts what the caller asked to write, not what the inner sink says it
    took, and refuses a difference: ``torch.save`` ignores short writes, so a
    sink that silently took fewer bytes would otherwise yield a truncated file
    with a manifest that matches it.
    """

    def __init__(self, inner: Sink):
        self._inner = inner
        self.crc = 0
        self.bytes_written = 0

    def write(self, data) -> int:
        view = as_bytes(data)
        n = len(view)
        copy_with_crc = getattr(self._inner, "copy_with_crc", None)
        if copy_with_crc is not None:  # a sink that checksums what it copies (a mapped memory tier)
            taken, self.crc = copy_with_crc(view, self.crc)
            self.bytes_written += taken
            view = view[taken:]
        for start in range(0, len(view), CRC_CHUNK):
            self._write_piece(view[start:start + CRC_CHUNK])
        return n

    def _write_piece(self, piece: memoryview) -> None:
        n = self._inner.write(piece)
        if n != len(piece):
            raise OSError(errno.EIO, f"short write: the sink took {n} of {len(piece)} bytes")
        self.crc = crc32c.crc32c(piece, self.crc)  # the piece is still in cache
        self.bytes_written += n

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
