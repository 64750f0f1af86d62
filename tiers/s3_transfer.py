"""S3's bulk transfers: multipart uploads that always clean up, and whole or ranged downloads.

A mixin of ``S3Tier`` (it uses the tier's ``_client``, ``bucket``, ``part_size``,
``single_get_threshold``, ``checksum``, ``_pool_get``, ``_call``,
``_get_object``, ``_head``, ``_put_bytes``, ``_reason``, ``_error``, ``_full`` and
``describe``), kept apart so each module stays one concern.

Uploads: one PUT up to one part, else a multipart upload (``MultipartUpload``,
which the streaming sink of ``tiers/s3_stream.py`` shares) whose parts run on the
tier's pool, each holding only its own bytes; any failure aborts the upload
(no orphaned parts keep costing storage). Each body carries its CRC32C. Every
request is made once: retrying a failed transfer is the caller's one retry
policy (``emulator.retry``), so requests never multiply across layers.
Downloads: one GET up to ``single_get_threshold``, else parallel ranged GETs
written in place with ``pwrite``; ``IfMatch`` pins every range to the version
that was sized, so a replaced object fails instead of mixing versions.
"""
from __future__ import annotations

import base64
import concurrent.futures as cf
import logging
import math
import os
import threading
from collections import Counter
from functools import partial
from pathlib import Path

import crc32c

from .base import TierError
from .fileops import make_dirs, partial_path, publish
from .s3_errors import Cancelled as _Cancelled
from .s3_errors import retryable


def _transient(exc: BaseException) -> bool:
    return exc.transient if isinstance(exc, TierError) else retryable(exc)

log = logging.getLogger(__name__)

MIB = 1 << 20
MAX_PARTS = 10_000  # S3's limit on parts per upload
STREAM_CHUNK = 8 * MIB  # how much of a GET body is held at once


def upload_part_size(size: int, part_size: int) -> int:
    """The part size a multipart upload of ``size`` bytes uses: ``part_size``, grown in whole MiB
    where it would need more than S3's 10,000 parts."""
    if math.ceil(size / part_size) > MAX_PARTS:
        return math.ceil(size / MAX_PARTS / MIB) * MIB
    return part_size


def upload_requests(size: int, part_size: int) -> Counter:
    """The requests that put one object of ``size`` bytes: one PUT up to a part, else
    CreateMultipartUpload, one UploadPart per part and CompleteMultipartUpload."""
    if size <= part_size:
        return Counter(PUT=1)
    parts = math.ceil(size / upload_part_size(size, part_size))
    return Counter(CreateMultipartUpload=1, UploadPart=parts, CompleteMultipartUpload=1)


def crc32c_b64(data) -> str:
    """The base64 big-endian CRC32C that S3's ``x-amz-checksum-crc32c`` header carries."""
    return base64.b64encode(crc32c.crc32c(data).to_bytes(4, "big")).decode()


def _pread_exact(fd: int, n: int, offset: int):
    """``n`` bytes at ``offset`` (Linux returns at most ~2 GiB per pread, parts may be larger)."""
    data = os.pread(fd, n, offset)
    if len(data) == n:
        return data
    buf = bytearray(data)
    while len(buf) < n:
        chunk = os.pread(fd, n - len(buf), offset + len(buf))
        if not chunk:
            break
        buf += chunk
    return buf


class Transfers:
    def _upload_file(self, key: str, src: Path) -> None:
        """Upload a local file: one PUT up to one part, else a multipart upload."""
        full = self._full(key)
        fd = os.open(src, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            if size <= self.part_size:
                self._put_bytes(full, _pread_exact(fd, size, 0) if size else b"", key)
            else:
                self._multipart(lambda off, n: _pread_exact(fd, n, off), size, full, key)
        finally:
            os.close(fd)

    def _multipart(self, read_part, size: int, full: str, key: str) -> None:
        """Multipart upload of ``size`` bytes; ``read_part(offset, length)`` gives one part's bytes."""
        part_size = upload_part_size(size, self.part_size)
        upload = MultipartUpload(self, full, key)
        try:
            for n, off in enumerate(range(0, size, part_size), 1):
                length = min(part_size, size - off)
                upload.submit(n, partial(read_part, off, length), length)
            upload.complete()
        except BaseException as exc:
            upload.fail(exc)

    def _upload_part(self, read_part, full: str, upload_id: str, number: int, length: int,
                     cancel: threading.Event) -> dict:
        if cancel.is_set():
            raise _Cancelled()
        data = read_part()  # only this part in memory, not the object
        if len(data) != length:
            raise TierError(f"source file shrank while uploading part {number}")
        extra = {"ChecksumCRC32C": crc32c_b64(data)} if self.checksum else {}
        resp = self._client.upload_part(Bucket=self.bucket, Key=full, UploadId=upload_id,
                                        PartNumber=number, Body=data, **extra)
        return {"PartNumber": number, "ETag": resp["ETag"], **extra}

    def _abort_upload(self, full: str, upload_id: str) -> bool:
        try:
            self._client.abort_multipart_upload(Bucket=self.bucket, Key=full, UploadId=upload_id)
            return True
        except Exception as exc:  # noqa: BLE001 - reported by the caller's message
            log.warning("s3 abort of upload to %s failed: %s", full, self._reason(exc))
            return False

    def _download_file(self, full: str, key: str, dest: Path) -> None:
        head = self._head(full, key)
        if head is None:
            raise FileNotFoundError(key)
        size, etag = head["ContentLength"], head.get("ETag")
        make_dirs(dest.parent)
        tmp = partial_path(dest)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            if size <= self.single_get_threshold:
                self._get_range(fd, full, key, 0, size, etag)
            else:
                self._ranged_download(fd, full, key, size, etag)
            publish(tmp, dest, fd)
        except BaseException as exc:
            tmp.unlink(missing_ok=True)
            if isinstance(exc, (TierError, FileNotFoundError)) or not isinstance(exc, Exception):
                raise
            raise self._error(f"download of {key}", exc) from exc
        finally:
            os.close(fd)

    def _ranged_download(self, fd: int, full: str, key: str, size: int, etag: str | None) -> None:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError:  # filesystems without fallocate: a sparse file is fine
            os.ftruncate(fd, size)
        cancel = threading.Event()

        def fetch(off: int, length: int):
            if cancel.is_set():
                raise _Cancelled()
            return self._get_range(fd, full, key, off, length, etag, ranged=True)
        pool = self._pool_get()
        futures = [pool.submit(fetch, off, min(self.part_size, size - off))
                   for off in range(0, size, self.part_size)]
        done, _ = cf.wait(futures, return_when=cf.FIRST_EXCEPTION)
        failed = next((f for f in done if f.exception() is not None), None)
        if failed is not None:
            cancel.set()
            for fut in futures:
                fut.cancel()
            cf.wait(futures)
            failed.result()  # re-raise the first failure

    def _get_range(self, fd: int, full: str, key: str, offset: int, length: int,
                   etag: str | None, ranged: bool = False) -> None:
        """GET bytes [offset, offset+length) into ``fd`` at ``offset``, a chunk at a time.

        ``IfMatch`` pins every range to the version we sized, so an object
        replaced mid-download fails instead of mixing two versions.
        """
        extra = {"IfMatch": etag} if etag else {}
        if ranged:
            extra["Range"] = f"bytes={offset}-{offset + length - 1}"
        body = self._get_object(full, key, **extra)
        pos = offset
        with body:
            for chunk in body.iter_chunks(STREAM_CHUNK):
                view = memoryview(chunk)
                while view:
                    n = os.pwrite(fd, view, pos)
                    view, pos = view[n:], pos + n
        if pos - offset != length:
            raise IOError(f"short read of {key}: {pos - offset} of {length} bytes")


class MultipartUpload:
    """One multipart upload: parts run on the tier's pool, each sent once (the caller's retry
    policy owns retries) with its CRC32C; ``complete`` publishes the object, and ``fail`` aborts
    it once every part has stopped, so no part lands after the abort and none is left behind."""

    def __init__(self, tier, full: str, key: str):
        self._tier, self._full, self._key = tier, full, key
        extra = {"ChecksumAlgorithm": "CRC32C"} if tier.checksum else {}
        self.upload_id = tier._call(f"upload {key}", tier._client.create_multipart_upload,
                                    Bucket=tier.bucket, Key=full, **extra)["UploadId"]
        self._cancel = threading.Event()
        self._futures: dict[cf.Future, int] = {}

    def submit(self, number: int, read_part, length: int) -> cf.Future:
        """Upload part ``number`` on the pool; ``read_part()`` gives its ``length`` bytes when it runs."""
        fut = self._tier._pool_get().submit(self._tier._upload_part, read_part, self._full,
                                            self.upload_id, number, length, self._cancel)
        self._futures[fut] = number
        return fut

    def wait_below(self, limit: int) -> None:
        """Block until fewer than ``limit`` parts are unfinished; raises if a part failed."""
        while True:
            self._raise_failed([f for f in self._futures if f.done()])
            running = [f for f in self._futures if not f.done()]
            if len(running) < limit:
                return
            cf.wait(running, return_when=cf.FIRST_COMPLETED)

    def complete(self) -> None:
        """Wait for every part (the first failure raises), then publish the object.

        The answer's ETag is not used: Ceph RGW sends it empty. Whatever pins a read to one version
        takes the ETag from a HEAD (``_download_file``, ``S3Reader``), right on every server."""
        done, _ = cf.wait(self._futures, return_when=cf.FIRST_EXCEPTION)
        self._raise_failed(done)
        parts = sorted((f.result() for f in self._futures), key=lambda p: p["PartNumber"])
        t = self._tier
        t._call(f"upload {self._key}", t._client.complete_multipart_upload, Bucket=t.bucket,
                Key=self._full, UploadId=self.upload_id, MultipartUpload={"Parts": parts})

    def _raise_failed(self, done) -> None:
        for fut in done:
            if fut.exception() is not None:
                raise _PartFailed(self._futures[fut], len(self._futures), fut.exception())

    def stop(self) -> bool:
        """Cancel and wait for every part, then abort the upload; False if the abort failed."""
        self._cancel.set()
        for fut in self._futures:
            fut.cancel()
        cf.wait(self._futures)  # no part may land after the abort
        return self._tier._abort_upload(self._full, self.upload_id)

    def fail(self, exc: BaseException):
        """Abort the upload and raise ``exc`` as one clear TierError line (a KeyboardInterrupt as is)."""
        aborted = self.stop()
        if not isinstance(exc, Exception):
            raise exc
        t, key = self._tier, self._key
        note = "upload aborted" if aborted else "abort failed too: run abort_stale_uploads()"
        if isinstance(exc, _PartFailed):
            raise TierError(f"s3 tier {t.describe()}: upload of {key} failed on part "
                            f"{exc.number} of {exc.total}: {t._reason(exc.cause)}; {note}",
                            transient=_transient(exc.cause)) from exc.cause
        if isinstance(exc, TierError):
            raise TierError(f"{exc}; {note}", transient=exc.transient) from exc
        raise TierError(f"s3 tier {t.describe()}: upload of {key} failed: "
                        f"{t._reason(exc)}; {note}", transient=_transient(exc)) from exc


class _PartFailed(Exception):
    def __init__(self, number: int, total: int, cause: BaseException):
        super().__init__(number, total)
        self.number, self.total, self.cause = number, total, cause
