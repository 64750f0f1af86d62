"""S3's streaming doors, from and to memory: nothing touches the host's disk.

``S3Sink`` (``open_write``, what ``torch.save`` writes to) fills one part in
memory and sends it as a multipart part once the next byte arrives, at most
``IN_FLIGHT`` parts uploading while the next one fills; ``commit`` completes
the upload (a single PUT when everything fit one part), and ``abort`` or any
failure aborts it, so nothing is visible before commit and no part is left.

``S3Reader`` (``open_read``) is a seekable, read-only file over one version
of an object (``IfMatch`` pins it). Small reads away from the current stream
fetch the aligned ``BLOCK`` around them and keep the last few, so
``torch.load(map_location="meta")`` reads the zip directory and pickle in a
handful of GETs; a large read, or one that goes on where the last one ended
beyond the cached blocks, starts a sequential stream from there on: one
GET read straight from the socket into the caller's buffer (``tiers/s3_wire.py``)
for objects up to ``single_get_threshold``, parallel part-sized ranged GETs above
it. A restore, which reads the structure and then every byte, says so first
(``will_read_all``): the first and last blocks and the body's GET are then asked
for at once, so the structure's round trips and the body's first byte overlap.
Memory is bounded by the blocks and the ranges in flight, never the object.
"""
from __future__ import annotations

import concurrent.futures as cf
import io
import threading
from collections import OrderedDict, deque

from . import s3_wire
from .base import Sink, TierError
from .fileops import as_bytes
from .s3_errors import Cancelled
from .s3_transfer import MultipartUpload

MIB = 1 << 20
MAX_PART = 5 << 30          # S3's largest part
PARTS_PER_DOUBLING = 1_000  # a sink doubles its part size every 1,000 parts: 10,000 parts reach 5 TiB
IN_FLIGHT = 2               # parts a sink uploads at once (at most the tier's max_concurrency)
BLOCK = 256 << 10           # what a small read fetches: enough for the zip directory or pickle
CACHED_BLOCKS = 4
READ_AHEAD = 4              # ranged GETs in flight in a stream above single_get_threshold


class S3Sink(Sink):
    """Streams to S3 a part at a time from memory; visible only on ``commit``."""

    def __init__(self, tier, key: str):
        self._tier, self._key, self._full = tier, key, tier._full(key)
        self._buf, self._filled = bytearray(tier.part_size), 0
        self._spare: list[bytearray] = []  # buffers of parts already sent, reused
        self._upload: MultipartUpload | None = None  # started when a second part begins
        self._parts = 0
        self.bytes_written = 0
        self._done = False

    def _part_size(self, number: int) -> int:
        return min(self._tier.part_size << ((number - 1) // PARTS_PER_DOUBLING), MAX_PART)

    def write(self, data) -> int:
        if self._done:
            raise ValueError(f"write to s3 sink of {self._key} after commit or abort")
        view = as_bytes(data)
        total = len(view)
        try:
            while view:
                if self._filled == len(self._buf):  # full, and more is coming: send it
                    self._send_part()
                n = min(len(view), len(self._buf) - self._filled)
                self._buf[self._filled:self._filled + n] = view[:n]
                self._filled, view = self._filled + n, view[n:]
                self.bytes_written += n
        except BaseException as exc:
            self._fail(exc)
        return total

    def _send_part(self) -> None:
        """Hand the full buffer to the upload (waiting while IN_FLIGHT parts are uploading)."""
        if self._upload is None:
            self._upload = MultipartUpload(self._tier, self._full, self._key)
        self._wait_for_room()
        self._parts += 1
        buf = self._buf
        self._upload.submit(self._parts, lambda: buf, len(buf)).add_done_callback(
            lambda fut: not fut.cancelled() and fut.exception() is None and self._spare.append(buf))
        size = self._part_size(self._parts + 1)
        spare = self._spare.pop() if self._spare else None
        self._buf = spare if spare is not None and len(spare) == size else bytearray(size)
        self._filled = 0

    def _wait_for_room(self) -> None:
        """Block while IN_FLIGHT parts (at most the tier's max_concurrency) are uploading."""
        self._upload.wait_below(min(IN_FLIGHT, self._tier.max_concurrency))

    def commit(self) -> None:
        if self._done:
            return
        try:
            full = self._filled == len(self._buf)
            last = self._buf if full else bytes(memoryview(self._buf)[:self._filled])
            if self._upload is None:  # it all fit one part: one PUT
                self._tier._put_bytes(self._full, last, self._key)
            else:
                self._wait_for_room()
                self._parts += 1
                self._upload.submit(self._parts, lambda: last, len(last))
                self._upload.complete()
        except BaseException as exc:
            self._fail(exc)
        self._release()

    def abort(self) -> None:
        if self._done:
            return
        if self._upload is not None:
            self._upload.stop()
        self._release()

    def _fail(self, exc: BaseException):
        """Abort the upload and raise one clear line; the sink is done."""
        upload = self._upload
        self._release()
        if upload is None:
            raise exc
        upload.fail(exc)

    def _release(self) -> None:
        self._done = True
        self._buf, self._spare, self._upload = bytearray(), [], None


class S3Reader(io.RawIOBase):
    """A seekable, read-only file over one version of an object, read with ranged GETs on demand."""

    def __init__(self, tier, key: str):
        super().__init__()
        self._tier, self._key, self._full = tier, key, tier._full(key)
        head = tier._head(self._full, key)
        if head is None:
            raise FileNotFoundError(key)
        self.size, self._etag = head["ContentLength"], head.get("ETag")
        self._pos, self._read_up_to = 0, -1  # where the last read ended: reading on from there is sequential
        self._blocks: OrderedDict[int, bytes] = OrderedDict()  # start -> bytes, least recent first
        self._ahead: dict[int, tuple] = {}  # start -> (end, future): a block asked for ahead (will_read_all)
        self._stream: _Body | _Ranges | None = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer) -> int:
        """Fill ``buffer`` up to the end of the object (never short before it)."""
        view, got = as_bytes(buffer), 0
        try:
            while got < len(view) and self._pos < self.size:
                n = self._read_some(view[got:])
                got, self._pos = got + n, self._pos + n
                self._read_up_to = self._pos
        except (TierError, FileNotFoundError):
            raise
        except Exception as exc:  # noqa: BLE001 - a broken connection is one clear line
            raise self._tier._error(f"read of {self._key}", exc) from exc
        return got

    def readall(self) -> bytes:
        """The rest of the object in one go (not in small reads, each of which could be a GET)."""
        buf = bytearray(max(0, self.size - self._pos))
        return bytes(buf[:self.readinto(buf)])

    def _read_some(self, view: memoryview) -> int:
        if self._stream is not None and self._stream.pos == self._pos:
            return self._stream.readinto(view)
        block = self._block_at(self._pos)
        if block is not None:
            return _copy(view, block[1], self._pos - block[0])
        if len(view) >= BLOCK or self._pos == self._read_up_to:  # large or sequential: stream on
            self._start_stream()
            return self._stream.readinto(view)
        start = self._pos - self._pos % BLOCK
        self._blocks[start] = self._get(start, min(start + BLOCK, self.size)).read()
        if len(self._blocks) > CACHED_BLOCKS:
            self._blocks.popitem(last=False)
        return _copy(view, self._blocks[start], self._pos - start)

    def will_read_all(self, *, structure: bool = True) -> None:
        """The caller reads every byte from here on, in order: at once (``structure`` False), or after
        a few small reads of the structure from the start (``torch.load``). So the bytes are asked
        for now, where one GET serves the object (up to ``single_get_threshold``; above it the
        part-sized ranges begin at the first read): one GET from here, or with ``structure`` one
        from the end of the first ``BLOCK``, in parallel with the first and the last ``BLOCK`` (a
        zip's records begin at the start, its directory is at the end). The body's bytes are on the
        way while the caller prepares or parses, and its reads take them straight into its buffers."""
        if self._blocks or self._ahead or self._stream is not None or self._pos >= self.size:
            return
        pool, one_get = self._tier._pool_get(), self.size <= self._tier.single_get_threshold
        if not structure:
            self._read_up_to = self._pos  # what comes is sequential: the first read streams on from here
            if one_get:
                self._stream = _Body(self, self._pos, pool)
            return
        for start in sorted({0, max(0, self.size - BLOCK)}):
            end = min(start + BLOCK, self.size)
            self._ahead[start] = (end, pool.submit(lambda a, b: self._get(a, b).read(), start, end))
        if one_get and self.size > BLOCK:
            self._stream = _Body(self, BLOCK, pool)

    def _block_at(self, pos: int):
        for start, (end, asked) in list(self._ahead.items()):
            if start <= pos < end:  # asked for ahead: a cached block once it is here
                del self._ahead[start]
                self._blocks[start] = asked.result()
        for start, data in self._blocks.items():
            if start <= pos < start + len(data):
                self._blocks.move_to_end(start)
                return start, data
        return None

    def _start_stream(self) -> None:
        self._close_stream()
        ranged = self.size > self._tier.single_get_threshold
        self._stream = _Ranges(self, self._pos) if ranged else _Body(self, self._pos)

    def _get(self, start: int, end: int):
        """The body of a GET of bytes [start, end) of the version this reader opened (the whole object
        without a Range: a server may read the whole object for any range, moto does)."""
        extra = {"IfMatch": self._etag} if self._etag else {}
        if (start, end) != (0, self.size):
            extra["Range"] = f"bytes={start}-{end - 1}"
        return self._tier._get_object(self._full, self._key, **extra)

    def _close_stream(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()

    def close(self) -> None:
        if not self.closed:
            self._close_stream()
            self._blocks.clear()
            asked = [fut for _, fut in self._ahead.values()]
            for fut in asked:
                fut.cancel()
            cf.wait(asked)
            self._ahead.clear()
        super().close()


def _copy(view: memoryview, data, offset: int) -> int:
    n = min(len(view), len(data) - offset)
    view[:n] = memoryview(data)[offset:offset + n]
    return n


class _Body:
    """One GET from ``start`` to the end, read straight into the caller's buffers; asked for on
    ``pool`` (in the background, read when first needed) if one is given, else at once."""

    def __init__(self, reader: S3Reader, start: int, pool=None):
        self.pos, self._key = start, reader._key
        self._asked = pool.submit(reader._get, start, reader.size) if pool is not None else None
        self._body = None if pool is not None else reader._get(start, reader.size)

    def readinto(self, view: memoryview) -> int:
        if self._body is None:
            self._body = self._asked.result()
        n = s3_wire.readinto(self._body, view)  # straight from the socket into the caller's buffer
        if not n:
            raise IOError(f"short read of {self._key} at byte {self.pos}")
        self.pos += n
        return n

    def close(self) -> None:
        if self._body is None and (self._asked.cancel() or self._asked.exception() is not None):
            return
        if self._body is None:
            self._body = self._asked.result()
        s3_wire.finish(self._body)


class _Ranges:
    """Part-sized ranged GETs from ``start`` on, ``READ_AHEAD`` (at most max_concurrency) in flight
    on the tier's pool, each read into a buffer that is reused once consumed."""

    def __init__(self, reader: S3Reader, start: int):
        self._reader, self.pos, self._next = reader, start, start
        self._part = reader._tier.part_size
        self._cancel = threading.Event()
        self._queue: deque = deque()  # (offset, length, buffer, future)
        self._spare: list[bytearray] = []
        for _ in range(max(1, min(READ_AHEAD, reader._tier.max_concurrency))):
            self._schedule()

    def _schedule(self) -> None:
        if self._next >= self._reader.size:
            return
        length = min(self._part, self._reader.size - self._next)
        buf = self._spare.pop() if self._spare else bytearray(self._part)
        fut = self._reader._tier._pool_get().submit(self._fetch, buf, self._next, length)
        self._queue.append((self._next, length, buf, fut))
        self._next += length

    def _fetch(self, buf: bytearray, offset: int, length: int) -> None:
        if self._cancel.is_set():
            raise Cancelled()
        view, got = memoryview(buf)[:length], 0
        body = self._reader._get(offset, offset + length)
        try:
            while got < length:
                n = s3_wire.readinto(body, view[got:])
                if not n or self._cancel.is_set():
                    break
                got += n
        finally:
            s3_wire.finish(body)
        if got != length and not self._cancel.is_set():
            raise IOError(f"short read of {self._reader._key}: {got} of {length} bytes at {offset}")

    def readinto(self, view: memoryview) -> int:
        offset, length, buf, fut = self._queue[0]
        fut.result()
        n = _copy(view, memoryview(buf)[:length], self.pos - offset)
        self.pos += n
        if self.pos == offset + length:  # this range is consumed: its buffer fetches the next
            self._queue.popleft()
            self._spare.append(buf)
            self._schedule()
        return n

    def close(self) -> None:
        self._cancel.set()
        futures = [fut for *_, fut in self._queue]
        for fut in futures:
            fut.cancel()
        cf.wait(futures)
        self._queue.clear()
