"""A tier on any S3-compatible object store (AWS S3, MinIO, Ceph RGW, moto).

Everything is plain boto3, so the same code works against every endpoint;
credentials come only from boto3's own chain (environment, profile, instance
role) and never appear in ``describe()``, log lines or error messages.

Why the transfers are hand-written rather than boto3's transfer manager:

* ``put_file`` runs its own multipart upload so we control the part size, the
  concurrency, the per-part checksum and, above all, the cleanup: a failed
  upload is aborted, so no orphaned parts keep costing storage.
* ``get_file`` uses one GET for objects up to ``single_get_threshold`` and
  parallel ranged GETs above it. The default threshold is high (4 parts,
  256 MiB) because some servers re-read the whole object for every range
  (moto does), while ranges pay off on real S3 for the
  multi-GiB files checkpoints are made of.
* ``open_write`` and ``open_read`` (``tiers/s3_stream.py``) go from and to
  memory: a sink that sends parts as they fill, and a seekable reader that
  serves ``torch.load`` with a few small ranged GETs and streams the rest
  with the same single-GET threshold. Nothing touches the host's disk.

Integrity: each request body carries a CRC32C (``x-amz-checksum-crc32c``),
computed with the ``crc32c`` package because botocore only computes CRC32C
with the optional ``awscrt`` dependency. AWS and MinIO verify it and reject
corrupted bytes; moto 5.2.1 accepts and stores it but does not verify it;
Ceph RGW 16 accepts and ignores it, even a wrong one. So integrity rests on our
own CRC32C of the bytes a GET returns (the drain's read-back, the restore).
CRC32C is also what our manifests use, and it costs ~0.1 s of CPU per GiB
here, against ~2.3 s/GiB for Content-MD5 (docs/performance.md). Pass ``checksum=None`` for an old
server that rejects the header. botocore's own checksums follow ``checksum_mode``
(``when_required`` by default: RGW refuses boto3's aws-chunked uploads over HTTPS).

The blocking boto3 calls run in threads: ``asyncio.to_thread`` for single
requests, and a per-tier pool of ``max_concurrency`` workers for parts and
ranges. Each worker holds at most one part in memory, so a tier never holds
more than ``max_concurrency * part_size`` bytes however many files move at once.
"""
from __future__ import annotations

import asyncio
import concurrent.futures as cf
import logging
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import BinaryIO, Optional
from urllib.parse import urlsplit

import boto3
import botocore.loaders
import botocore.session
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from . import s3_errors, s3_wire
from .base import Claim, OptionError, Sink, Tier, TierError, TierScope, validate_key, validate_prefix
from .fileops import as_bytes
from .locking import Holder
from .s3_errors import is_not_found, retryable
from .s3_lease import S3Lease
from .s3_requests import ContextPool, RequestTally, count_requests
from .s3_stream import S3Reader, S3Sink
from .s3_transfer import Transfers, crc32c_b64

log = logging.getLogger(__name__)

MIB = 1 << 20
LIST_PAGE = 1000  # keys per LIST request: S3's maximum, asked for explicitly so every server pages alike
LEASE_KEY = ".ckpt-emu.lease"  # tiers/s3_lease.py: never listed as an object
CHECKSUM_MODES = ("when_required", "when_supported")  # botocore's two values
#: a delete re-reads the lease when it was last confirmed longer ago than a renewal period (each
#: renewal and each manifest's check confirm it), so retention costs no HEADs while all is well
LEASE_RECHECK_S = 20.0


_LOADER = None
_LOADER_LOCK = threading.Lock()


def _new_session() -> boto3.session.Session:
    """A fresh boto3 session (own credential resolution) sharing the parsed API models.

    Sessions are not thread-safe, so each tier gets its own, but parsing the S3
    model again for every tier costs ~0.1 s; the loader is read-only and safe to share.
    """
    global _LOADER
    with _LOADER_LOCK:
        if _LOADER is None:
            _LOADER = botocore.loaders.create_loader()
        core = botocore.session.get_session()
        core.register_component("data_loader", _LOADER)
    return boto3.session.Session(botocore_session=core)


@dataclass(frozen=True)
class S3Options:
    #: bucket, key prefix, endpoint (None: AWS), region; credentials come from boto3's chain only
    bucket: Optional[str] = None
    prefix: str = ""
    endpoint_url: Optional[str] = None
    region: Optional[str] = None
    #: multipart part size and parts/ranges in flight per process
    part_size_mib: int = 64
    max_concurrency: int = 8
    #: botocore's own checksums (request_checksum_calculation and response_checksum_validation):
    #: when_required (only where an API demands one; our CRC32C header is sent either way) or
    #: when_supported (boto3's default: aws-chunked uploads with a trailing checksum, which some
    #: servers refuse over HTTPS: Ceph RGW answers 411 MissingContentLength)
    checksum_mode: str = "when_required"

    def __post_init__(self):
        if not self.bucket:
            raise OptionError("bucket: an s3 tier needs a bucket")
        if not 5 <= self.part_size_mib <= 5120:
            raise OptionError("part_size_mib: must be between 5 and 5120 (S3 limits)")
        if not 1 <= self.max_concurrency <= 64:
            raise OptionError("max_concurrency: must be between 1 and 64")
        if self.checksum_mode not in CHECKSUM_MODES:
            raise OptionError(f"checksum_mode: must be {' or '.join(CHECKSUM_MODES)}, not {self.checksum_mode!r}")
        if self.endpoint_url:  # the resolved config is written to config.json and results.json
            parts = urlsplit(self.endpoint_url)
            if parts.username is not None or parts.password is not None:
                raise OptionError("endpoint_url: must not carry user:password@ "
                                  "(credentials come from the environment or a profile)")


class S3Tier(Transfers, Tier):
    backend = "s3"
    Options = S3Options

    @classmethod
    def from_options(cls, options: S3Options, *, scope: TierScope) -> "S3Tier":
        return cls(options.bucket, prefix=options.prefix or "", endpoint_url=options.endpoint_url,
                   region=options.region, part_size=options.part_size_mib * MIB,
                   max_concurrency=options.max_concurrency, checksum_mode=options.checksum_mode)

    @classmethod
    def preflight(cls, options: S3Options, *, need_bytes: int) -> None:
        """The bucket answers a HEAD with these credentials (an object store has no free-space figure)."""
        import asyncio as _asyncio
        tier = cls.from_options(options, scope=TierScope())
        try:
            _asyncio.run(tier.check())
        finally:
            _asyncio.run(tier.close())

    @classmethod
    def busy(cls, options: S3Options, node: int = 0) -> str | None:
        """Who holds the prefix now (its lease read, nothing written), or None."""
        tier = cls.from_options(options, scope=TierScope())
        try:
            return S3Lease(tier, Holder(job="")).held_by_another()
        finally:
            asyncio.run(tier.close())

    def claim(self, holder) -> Claim:
        self._lease = S3Lease(self, holder).acquire()
        return self._lease

    def _owned(self, max_age_s: float = float("inf")) -> None:
        """Raise TierError if this tier's lease (held by the process that claimed it) was lost;
        ``max_age_s``: re-read the lease first when it was confirmed longer ago (s3_lease.py)."""
        if self._lease is not None:
            self._lease.check(max_age_s)

    async def recover_after_crash(self) -> str:
        count = await self.abort_stale_uploads()
        return f"aborted {count} multipart upload(s) left by a crash" if count else ""

    async def clean_up_after_run(self) -> str:
        count = await self.abort_stale_uploads()
        return f"aborted {count} multipart upload(s) whose abort had failed" if count else ""

    def __init__(self, bucket: str, prefix: str = "", endpoint_url: str | None = None,
                 region: str | None = None, part_size: int = 64 * MIB, max_concurrency: int = 8,
                 client=None, *, single_get_threshold: int | None = None,
                 checksum: str | None = "crc32c", checksum_mode: str = "when_required",
                 max_attempts: int = 1,
                 connect_timeout: float = 10.0, read_timeout: float = 120.0):
        if part_size < 5 * MIB:
            raise TierError(f"s3 tier s3://{bucket}: part size must be at least 5 MiB (S3 limit)")
        if checksum not in ("crc32c", None):
            raise TierError(f"s3 tier s3://{bucket}: unsupported checksum {checksum!r} (use 'crc32c' or None)")
        self.bucket = bucket
        self.prefix = self._normalise_prefix(prefix)
        self.endpoint_url = endpoint_url
        self.region = region
        self.part_size = part_size
        self.max_concurrency = max(1, max_concurrency)
        self.single_get_threshold = 4 * part_size if single_get_threshold is None else single_get_threshold
        self.checksum = checksum
        self.checksum_mode = checksum_mode
        self._timeouts = (connect_timeout, read_timeout)
        self._session = None
        self.requests = RequestTally()  # every request by kind (tiers/s3_requests.py)
        if client is None:
            self._session = _new_session()
            client = self._make_client(max_attempts)
        else:  # an injected client is counted too
            count_requests(client, self.requests)
        self._client = client
        self._probe_client = None if self._session else client
        self._pool: cf.ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._lease: S3Lease | None = None  # set in the one process that claimed the prefix

    # ------------------------------------------------------------------ plumbing

    @staticmethod
    def _normalise_prefix(prefix: str) -> str:
        prefix = (prefix or "").strip("/")
        if not prefix:
            return ""
        validate_prefix(prefix)
        return prefix + "/"

    def _make_client(self, max_attempts: int):
        # path-style addressing for custom endpoints: MinIO/Ceph/moto hosts rarely
        # resolve bucket.host names. Checksums: we send our own CRC32C, so by default
        # (checksum_mode) botocore need not hash every body too (and some servers reject that).
        cfg = Config(
            # one attempt per request by default: the caller's retry policy (emulator.retry) is the
            # only layer that retries, so a persistent 5xx costs (retries + 1) requests per part
            retries={"total_max_attempts": max_attempts, "mode": "standard"},
            connect_timeout=self._timeouts[0], read_timeout=self._timeouts[1],
            max_pool_connections=self.max_concurrency + 16,
            s3={"addressing_style": "path"} if self.endpoint_url else None,
            request_checksum_calculation=self.checksum_mode,
            response_checksum_validation=self.checksum_mode,
        )
        client = self._session.client("s3", endpoint_url=self.endpoint_url, region_name=self.region, config=cfg)
        s3_errors.retry_throttled(client)  # SlowDown: the same request again, after a backoff
        count_requests(client, self.requests)
        s3_wire.quick_acks(client)  # a small response is not held 40 ms by the server's Nagle
        return client

    def on_request(self, handler) -> None:
        """``handler(request)`` runs before each HTTP request; a response it returns stands in for
        the server's (botocore's ``before-send``; tiers/s3_limits.py's emulated request limits)."""
        self._client.meta.events.register("before-send.s3", handler)

    def off_request(self, handler) -> None:
        """``handler`` no longer runs before each request (:meth:`on_request`)."""
        self._client.meta.events.unregister("before-send.s3", handler)

    def _pool_get(self) -> cf.ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ContextPool(self.max_concurrency, thread_name_prefix="s3-xfer")
            return self._pool

    def _full(self, key: str) -> str:
        return self.prefix + validate_key(key)

    def describe(self) -> str:
        where = f"s3://{self.bucket}/{self.prefix}"
        if self.endpoint_url:
            parts = urlsplit(self.endpoint_url)
            host = parts.hostname or self.endpoint_url
            where += f" at {host}:{parts.port}" if parts.port else f" at {host}"
        return where

    def _secrets(self) -> list[str]:
        try:
            creds = self._session.get_credentials() if self._session else \
                self._client._request_signer._credentials  # injected client: best effort
            frozen = creds.get_frozen_credentials() if creds else None
        except Exception:  # noqa: BLE001 - scrubbing must never fail the error path
            return []
        if frozen is None:
            return []
        return [s for s in (frozen.access_key, frozen.secret_key, frozen.token) if s and len(s) >= 4]

    def _reason(self, exc: BaseException) -> str:
        """One short line for an exception, with any credential scrubbed out."""
        return s3_errors.reason(exc, self.endpoint_url, self._secrets())

    def _error(self, what: str, exc: BaseException) -> TierError:
        return TierError(f"s3 tier {self.describe()}: {what}: {self._reason(exc)}", transient=retryable(exc))

    def _call(self, what: str, fn, /, *args, **kwargs):
        """Run one boto3 call, mapping failures to TierError (FileNotFoundError passes through)."""
        try:
            return fn(*args, **kwargs)
        except (TierError, FileNotFoundError):
            raise
        except Exception as exc:  # noqa: BLE001 - boto3 and I/O failures become one clear line
            raise self._error(what, exc) from exc

    # ------------------------------------------------------------------ small objects

    async def put(self, key, data) -> None:
        full = self._full(key)
        view = as_bytes(data)
        await asyncio.to_thread(self._owned, 0.0)  # a manifest: never published under another's lease
        if len(view) <= self.part_size:
            await asyncio.to_thread(self._put_bytes, full, bytes(view), key)
        else:  # parts straight from the caller's buffer: no second copy of a large object
            await asyncio.to_thread(self._multipart, lambda off, n: bytes(view[off:off + n]), len(view), full, key)

    def _put_bytes(self, full: str, data: bytes, key: str) -> None:
        # one request: botocore's own retries (it rewinds a bytes body) are enough
        extra = {"ChecksumCRC32C": crc32c_b64(data)} if self.checksum else {}
        self._call(f"put {key}", self._client.put_object, Bucket=self.bucket, Key=full, Body=data, **extra)

    async def get(self, key) -> bytes:
        full = self._full(key)
        return await asyncio.to_thread(self._call, f"get {key}", self._get_bytes, full, key)

    def _get_bytes(self, full: str, key: str) -> bytes:
        body = self._get_object(full, key)
        with body:
            return body.read()

    def _get_object(self, full: str, key: str, **kwargs):
        try:
            return self._client.get_object(Bucket=self.bucket, Key=full, **kwargs)["Body"]
        except ClientError as exc:
            if is_not_found(exc):
                raise FileNotFoundError(key) from None
            raise self._error(f"get {key}", exc) from exc
        except BotoCoreError as exc:
            raise self._error(f"get {key}", exc) from exc

    async def size(self, key) -> int | None:
        full = self._full(key)
        head = await asyncio.to_thread(self._head, full, key)
        return None if head is None else head["ContentLength"]

    def _head(self, full: str, key: str) -> dict | None:
        try:
            return self._client.head_object(Bucket=self.bucket, Key=full)
        except ClientError as exc:
            # HEAD has no body, so a missing bucket also reads as 404: check() tells them apart
            if is_not_found(exc):
                return None
            raise self._error(f"head {key}", exc) from exc
        except BotoCoreError as exc:
            raise self._error(f"head {key}", exc) from exc

    async def list(self, prefix: str = "") -> list[str]:
        validate_prefix(prefix)
        return await asyncio.to_thread(self._list_sync, prefix)

    def _list_sync(self, prefix: str) -> list[str]:
        def pages():
            paginator = self._client.get_paginator("list_objects_v2")
            keys = []
            for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix + prefix,
                                           PaginationConfig={"PageSize": LIST_PAGE}):
                keys.extend(obj["Key"][len(self.prefix):] for obj in page.get("Contents", ())
                            if obj["Key"] != self.prefix + LEASE_KEY)
            return keys
        return sorted(self._call(f"list {prefix or '(all)'}", pages))

    async def delete(self, key) -> None:
        full = self._full(key)
        await asyncio.to_thread(self._owned, LEASE_RECHECK_S)  # retention: never under another's lease
        await asyncio.to_thread(self._call, f"delete {key}", self._client.delete_object,
                                Bucket=self.bucket, Key=full)

    # ------------------------------------------------------------------ uploads

    async def put_file(self, key, src) -> None:
        validate_key(key)
        self._owned()
        await asyncio.to_thread(self._upload_file, key, Path(src))

    def open_write(self, key) -> Sink:
        self._owned()
        return S3Sink(self, validate_key(key))

    # ------------------------------------------------------------------ downloads

    async def get_file(self, key, dest) -> None:
        full = self._full(key)
        await asyncio.to_thread(self._download_file, full, key, Path(dest))

    def open_read(self, key) -> BinaryIO:
        """A seekable reader over the object (tiers/s3_stream.py): ranged GETs, nothing on disk."""
        return S3Reader(self, validate_key(key))

    # ------------------------------------------------------------------ housekeeping

    async def check(self) -> None:
        """Cheap startup probe (HEAD bucket); raises TierError with one clear line."""
        await asyncio.to_thread(self._check_sync)

    def _check_sync(self) -> None:
        if self._probe_client is None:  # few retries: a wrong endpoint should fail fast
            self._probe_client = self._make_client(max_attempts=2)
        try:
            self._probe_client.head_bucket(Bucket=self.bucket)
        except ClientError as exc:  # HEAD answers have no body: the status says it all
            reason = "bucket does not exist" if s3_errors.status(exc) == 404 else self._reason(exc)
            raise TierError(f"s3 tier {self.describe()}: {reason}") from None
        except BotoCoreError as exc:
            raise TierError(f"s3 tier {self.describe()}: {self._reason(exc)}") from None

    async def list_multipart_uploads(self) -> list[dict]:
        """In-progress multipart uploads under the prefix: ``key`` (relative), ``upload_id``, ``initiated``."""
        return await asyncio.to_thread(self._call, "list uploads", self._list_uploads_sync)

    def _list_uploads_sync(self) -> list[dict]:
        out = []
        paginator = self._client.get_paginator("list_multipart_uploads")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix):
            for up in page.get("Uploads", ()):
                out.append({"key": up["Key"][len(self.prefix):], "upload_id": up["UploadId"],
                            "initiated": up.get("Initiated")})
        return out

    async def abort_stale_uploads(self, older_than_s: float | None = None) -> int:
        """Abort in-progress multipart uploads under the prefix (left by a crash); returns the count.

        ``older_than_s`` spares uploads started more recently, e.g. by another node right now.
        """
        uploads = await self.list_multipart_uploads()
        cutoff = None if older_than_s is None else datetime.now(timezone.utc) - timedelta(seconds=older_than_s)
        count = 0
        for up in uploads:
            if cutoff is not None and up["initiated"] is not None and up["initiated"] > cutoff:
                continue
            if await asyncio.to_thread(self._abort_upload, self.prefix + up["key"], up["upload_id"]):
                count += 1
        return count

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await asyncio.to_thread(pool.shutdown, True)
        for client in {id(c): c for c in (self._client, self._probe_client) if c is not None}.values():
            close = getattr(client, "close", None)
            if close is not None:
                close()
