"""One run owns an S3 prefix: a lease object with an owner and an expiry, renewed while the run lives.

An object store has no lock that dies with a process, so the owner writes
``<prefix>/.ckpt-emu.lease`` ({job, pid, host, started, expires}) with a
conditional create (``If-None-Match: *``), renews it every ``ttl/3`` with a
conditional replace (``If-Match`` its own ETag) and deletes it at the end. A
second run finds a live lease and fails with one line naming the holder; a
lease may be taken over (again with ``If-Match``, so two takers cannot both
win) once it has expired, or at once when its holder ran on this host and
that process is gone.

Limits (docs/faults.md): it needs conditional writes (AWS S3 since 2024,
MinIO, Ceph RGW, moto); a store that ignores them (a second create of the
lease is accepted) or rejects them (501) fails the claim with one line;
expiry compares the holder's clock with the reader's, so clocks must agree to
well within ``ttl``; after a crash on another host a rerun waits up to ``ttl``;
and a holder that stalls longer than ``ttl`` loses the lease.

A lost lease (a renewal refused, or the object found replaced) stops the holder's writes: the
tier asks ``check`` before every write and delete, re-reading the lease (one HEAD) before a small
object (a manifest) and before a delete when no renewal or check confirmed it for a renewal period, so a checkpoint is never
published, nor one deleted, under another run's lease. ``on_lost`` is called once with one line;
a run (emulator/job/ownership.py) ends there.
"""
from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import asdict

from botocore.exceptions import BotoCoreError, ClientError

from .base import Claim, TierError
from .locking import Holder, TierBusy, process_alive

LEASE_KEY = ".ckpt-emu.lease"
TTL_S = 60.0
_CONFLICT = ("PreconditionFailed", "ConditionalRequestConflict", "412", "409")
_MISSING = ("NoSuchKey", "404")
_UNSUPPORTED = ("NotImplemented", "501")


class S3Lease(Claim):
    def __init__(self, tier, holder: Holder, ttl_s: float = TTL_S):
        self._tier, self.holder, self.ttl_s = tier, holder, ttl_s
        self._key = tier.prefix + LEASE_KEY
        self._etag: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # a renewal and a check never interleave (the ETag changes)
        self._confirmed = time.monotonic()  # when the lease was last known to be ours
        self.lost: str | None = None  # why it is not ours any more
        self.on_lost = _warn  # called once, with one line, when the lease is lost

    # ------------------------------------------------------------------ requests

    def _body(self) -> bytes:
        return json.dumps({**asdict(self.holder), "expires": time.time() + self.ttl_s}).encode()

    def _put(self, **condition) -> str:
        c = self._tier._client
        return c.put_object(Bucket=self._tier.bucket, Key=self._key, Body=self._body(), **condition)["ETag"]

    def _put_if_match(self, etag: str) -> str:
        """Replace the lease object only if it is still the version ``etag`` names.

        AWS and moto take the ETag as HTTP quotes it; Ceph RGW answers 412 to the quoted form and
        accepts it bare. A 412 to the quoted form is tried once bare: another run's version has
        another ETag, so a real takeover still fails both ways."""
        try:
            return self._put(IfMatch=etag)
        except ClientError as exc:
            bare = etag.strip('"')
            if _code(exc) not in _CONFLICT or bare == etag:
                raise
        return self._put(IfMatch=bare)

    def _read(self) -> tuple[dict, str] | None:
        try:
            resp = self._tier._client.get_object(Bucket=self._tier.bucket, Key=self._key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise
        with resp["Body"] as body:
            return json.loads(body.read()), resp["ETag"]

    # ------------------------------------------------------------------ taking it

    def acquire(self) -> "S3Lease":
        try:
            self._etag = self._create_or_take()
            self._refuse_unconditional_store()
        except ClientError as exc:
            if _code(exc) in _UNSUPPORTED:
                raise TierError(self._no_conditions(f"it answered {_code(exc)}")) from None
            raise TierError(f"s3 tier {self._tier.describe()}: lease: {self._tier._reason(exc)}") from None
        self._thread = threading.Thread(target=self._renew, name="ckpt-emu-s3-lease", daemon=True)
        self._thread.start()
        return self

    def _create_or_take(self) -> str:
        for _ in range(3):  # a lease that vanished between our create and read: try again
            try:
                return self._put(IfNoneMatch="*")
            except ClientError as exc:
                if _code(exc) not in _CONFLICT:
                    raise
            found = self._read()
            if found is None:
                continue
            record, etag = found
            self._check_takeover(record)
            try:
                return self._put_if_match(etag)
            except ClientError as exc:
                if _code(exc) in _CONFLICT:
                    raise TierBusy(f"{self._where()} was just taken by another run") from None
                raise
        raise TierBusy(f"{self._where()}: could not create its lease object")

    def _refuse_unconditional_store(self) -> None:
        """Probe once that the store honours a conditional write: a second create of the lease
        just written must be refused (412). A store that ignores the condition would let two runs
        take one prefix, so the claim fails (and the probe's object is removed)."""
        try:
            etag = self._put(IfNoneMatch="*")
        except ClientError as exc:
            if _code(exc) in _CONFLICT:
                return
            raise
        self._etag = etag
        try:
            self._tier._client.delete_object(Bucket=self._tier.bucket, Key=self._key)
        except ClientError:
            pass  # best effort: the refusal is the news
        raise TierError(self._no_conditions("it accepted a create of an object that exists"))

    def _no_conditions(self, evidence: str) -> str:
        return (f"{self._where()}: the server ignores conditional writes ({evidence}); ckpt-emu needs "
                "If-None-Match/If-Match to keep two runs off one prefix (AWS S3 since 2024, MinIO, Ceph RGW, "
                "moto have them)")

    def _check_takeover(self, record: dict) -> None:
        """Raise TierBusy unless the lease in ``record`` has expired or its holder is gone."""
        line = live_holder(record, self.holder.host)
        if line is not None:
            raise TierBusy(f"{self._where()} is in use by another run: {line}")

    def held_by_another(self) -> str | None:
        """Who holds the prefix now (one GET of its lease, nothing written), in words, or None: what a
        second run is refused with before it writes anything anywhere (emulator/launch/runner.py)."""
        try:
            found = self._read()
        except ClientError as exc:
            raise TierError(f"{self._where()}: lease: {self._tier._reason(exc)}") from None
        return None if found is None else live_holder(found[0], self.holder.host)

    def _where(self) -> str:
        return f"s3 tier {self._tier.describe()}"

    # ------------------------------------------------------------------ keeping and giving back

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                with self._lock:
                    if self.lost:
                        return
                    self._etag, self._confirmed = self._put_if_match(self._etag), time.monotonic()
            except ClientError as exc:
                if _code(exc) in _CONFLICT + _MISSING:
                    self._lose(f"another run replaced it (this one had not renewed it for {self.ttl_s:.0f} s, "
                               "or someone wrote over it)")
                    return
            except Exception:  # noqa: BLE001 - a blip: the next renewal (ttl/3 later) tries again
                pass

    def check(self, max_age_s: float = float("inf")) -> None:
        """Raise TierError if the lease is lost; re-read it (a HEAD) when it was last confirmed more
        than ``max_age_s`` ago (0: now), so a replaced lease is found before the write, not after."""
        if self._stop.is_set():  # released: the run is over, nothing to guard
            return
        if not self.lost and time.monotonic() - self._confirmed > max_age_s:
            with self._lock:
                if not self.lost:
                    self._confirm()
        if self.lost:
            raise TierError(f"{self._where()}: lost its lease: {self.lost}", transient=False)

    def _confirm(self) -> None:
        """HEAD the lease object: ours if its ETag is the one our last write got back."""
        try:
            etag = self._tier._client.head_object(Bucket=self._tier.bucket, Key=self._key)["ETag"]
        except ClientError as exc:
            if _code(exc) not in _MISSING:
                raise self._tier._error("lease", exc) from exc  # a 5xx: the write is retried
            self._lose("its lease object was deleted")
            return
        except BotoCoreError as exc:
            raise self._tier._error("lease", exc) from exc
        if etag.strip('"') != (self._etag or "").strip('"'):
            self._lose("another run replaced it")
            return
        self._confirmed = time.monotonic()

    def _lose(self, why: str) -> None:
        if self.lost:
            return
        found = self._read_quietly()
        self.lost = f"{why}{f' ({found})' if found else ''}; stopped writing so two runs never share the prefix"
        self.on_lost(f"{self._where()}: lost its lease: {self.lost}")

    def _read_quietly(self) -> str:
        """Who holds the lease now, best effort."""
        try:
            found = self._read()
            record = found[0] if found else {}
            return "now held by " + Holder(**{k: record[k] for k in ("job", "pid", "host", "started") if k in record}).describe()
        except Exception:  # noqa: BLE001 - the loss is the news, the new holder a detail
            return ""

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        try:
            found = self._read()
            if found is not None and found[1] == self._etag:
                self._tier._client.delete_object(Bucket=self._tier.bucket, Key=self._key)
        except Exception:  # noqa: BLE001 - an expired lease frees the prefix anyway
            pass


def live_holder(record: dict, host: str) -> str | None:
    """The holder of the lease ``record`` in words while it holds the prefix (not expired, and not a
    process of ``host`` that is gone), else None."""
    expires = float(record.get("expires", 0))
    holder = Holder(**{k: record[k] for k in ("job", "pid", "host", "started") if k in record})
    if expires < time.time() or (holder.host == host and not process_alive(holder.pid, holder.started)):
        return None
    return f"{holder.describe()} (its lease expires in {expires - time.time():.0f} s)"


def _warn(line: str) -> None:
    sys.stderr.write(f"ckpt-emu: warning: {line}\n")  # one write: a whole line in a log ranks share
    sys.stderr.flush()


def _code(exc: ClientError) -> str:
    err = exc.response.get("Error", {})
    return str(err.get("Code") or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
