"""An object store's request limits, emulated: a request rate per key prefix, 503 SlowDown beyond it.

AWS S3 documents 3,500 PUT/COPY/POST/DELETE and 5,500 GET/HEAD requests per
second per prefix, and answers 503 SlowDown beyond that; moto, Ceph RGW and
MinIO enforce no such limit, so a run against them cannot show whether a job's
drains or restores would be throttled on AWS. ``emulate:`` of an ``s3`` tier
applies these limits (``put_per_s_per_prefix``, ``get_per_s_per_prefix``,
``prefix_depth``); other backends have no requests to limit and ignore them.

Where: a botocore hook on the S3 tier's client (``before-send``) answers a
request over the rate with the response S3 itself sends (HTTP 503,
``<Code>SlowDown</Code>``) instead of sending it. Everything after is the real
path: botocore parses it into the ``ClientError`` it raises for AWS, the S3
tier backs off and retries that one request (``s3_errors.retry_throttled``),
and past that budget the run's retry policy takes over. Not an HTTP proxy in
front of the server (``tests/support/httpfaults.py``): a proxy is a test fixture, a
limit is part of a run's config, as ``emulate:``'s bandwidth is. Not a Tier
wrapper: one ``put_file`` is many requests (its parts), and a throttled part
must cost that part's retry, not the whole file's.

A prefix is the object's key (with the tier's ``prefix``) up to its last '/',
or its first ``prefix_depth`` folders; a LIST counts against the prefix it
lists. The rate is a GCRA per (prefix, class): a request is admitted while the
prefix's admitted requests are due within a burst of 1/100 s of the rate (at
least one request), and a refused request books nothing, so N requests to one
prefix take at least (N - burst) / rate seconds. With ``shared_dir`` every
process of the job shares each prefix's state (a small file under ``flock``,
as ``tiers/pacing.py``'s buckets); without it each process has its own.

A run of a design stands for a larger job (``TierScope.request_weights``: its files are smaller,
with fewer parts, and the job's other nodes share the prefix): there each request is paced, not
refused, booked as the ``RequestWeights`` the design gives its transfer (the phase it is made in)
and class, its wait reported as the phase's paced time, and the transfer ends when the job's
requests it stood for are done (``settle``), so the run's transfers take the job's requests over
the ceiling (emulator/design/requests.py).

``counts()`` says how often this process was throttled (``slowdown``) and
retried a throttled request (``slowdown_retry``): the run adds them to its
fault counts (results.json, the report).
"""
from __future__ import annotations

import fcntl
import hashlib
import math
import os
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from .base import OptionError, TierScope, unwrap
from .s3_requests import RequestTally
from .safepath import Folder, reach

#: AWS S3's documented per-prefix limits (requests per second)
AWS_PUT_PER_S = 3500
AWS_GET_PER_S = 5500
#: how much of a second's rate arrives at once without a refusal
BURST_S = 0.01
GET_CLASS = ("GET", "HEAD")  # everything else (PUT, POST, DELETE) is PUT-class

_counts = RequestTally()


def count(kind: str, n: int = 1) -> None:
    _counts.add(kind, n)


def counts() -> dict:
    """This process's throttling so far: ``slowdown`` (503s answered by the emulated limit) and
    ``slowdown_retry`` (requests the S3 tier retried after a throttle, emulated or the server's)."""
    return _counts.counts()


@dataclass(frozen=True)
class RequestLimits:
    """Requests per second per prefix (None: unlimited) and what a prefix is."""

    put_per_s: float | None = AWS_PUT_PER_S
    get_per_s: float | None = AWS_GET_PER_S
    prefix_depth: int | None = None

    @classmethod
    def from_options(cls, opts) -> "RequestLimits":
        """From ``emulate:`` (``EmulateOptions``), checking each value (OptionError names the key)."""
        for name in ("put_per_s_per_prefix", "get_per_s_per_prefix"):
            value = getattr(opts, name)
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if value is not None and not (number and value > 0):
                raise OptionError(f"{name}: must be > 0 requests per second, or null for no limit")
        depth = opts.prefix_depth
        if depth is not None and not (isinstance(depth, int) and not isinstance(depth, bool) and depth >= 1):
            raise OptionError("prefix_depth: must be an integer >= 1, or null (the key up to its last '/')")
        return cls(opts.put_per_s_per_prefix, opts.get_per_s_per_prefix, depth)

    def describe(self) -> str:
        rate = lambda v: "no limit" if v is None else f"{v:g}/s"  # noqa: E731
        prefix = "prefix" if self.prefix_depth is None else f"{self.prefix_depth}-folder prefix"
        return f"{rate(self.put_per_s)} PUT, {rate(self.get_per_s)} GET per {prefix}"

    @property
    def unlimited(self) -> bool:
        return self.put_per_s is None and self.get_per_s is None

    def rate(self, method: str) -> float | None:
        return self.get_per_s if method in GET_CLASS else self.put_per_s


#: the phase a request is made in (tiers/emulated.py ``counted_as``) -> the transfer it is part of
TRANSFER_OF_PHASE = {"drain": "drain", "local_write": "write"}
#: each request kind's HTTP method, which the limits count by
METHOD_OF_KIND = {"PUT": "PUT", "COPY": "PUT", "UploadPart": "PUT", "CreateMultipartUpload": "POST",
                  "CompleteMultipartUpload": "POST", "LIST": "GET", "GET": "GET", "HEAD": "HEAD",
                  "DELETE": "DELETE", "AbortMultipartUpload": "DELETE"}


@dataclass(frozen=True)
class RequestWeights:
    """How many of the modelled job's requests each request of a run stands for, by the transfer it
    is part of and its class: a run at ``run.scale`` writes smaller files (fewer parts) for a few of
    the job's nodes, where the whole job's requests meet the step's prefix. ``by``: ((transfer, PUT-class
    weight, GET-class weight), ...); a request of any other transfer stands for itself."""

    by: tuple = ()

    def of(self, transfer: str, klass: str) -> float:
        for name, put, get in self.by:
            if name == transfer:
                return get if klass == "get" else put
        return 1.0


def prefix_of(key: str, depth: int | None = None) -> str:
    """The prefix a key's requests count against: up to its last '/', or its first ``depth`` folders."""
    folders = key.split("/")[:-1]
    if depth is not None:
        folders = folders[:depth]
    return "".join(f + "/" for f in folders)


class _Rates:
    """GCRA state per (class, prefix): in this process, or shared through files in ``folder``."""

    def __init__(self, folder: Path | None, clock=time.time):
        self.folder, self.clock = folder, clock
        self._tat: dict = {}
        self._lock = threading.Lock()
        self._held: Folder | None = None  # the folder, reached once per process (tiers.safepath)
        self._pid = -1

    @staticmethod
    def _next(tat: float, now: float, rate: float) -> float | None:
        """The new due time if a request may go now, else None (refused: nothing booked)."""
        interval = 1.0 / rate
        tolerance = (max(1.0, rate * BURST_S) - 1) * interval
        if tat - now > tolerance:
            return None
        return max(tat, now) + interval

    def admit(self, klass: str, prefix: str, rate: float) -> bool:
        """Admit a request now? The clock is read under the lock: a thread that waited for it must
        not judge with the time it had before (it would see the others' bookings as a burst)."""
        def step(tat, now):
            due = self._next(tat, now, rate)
            return due, due is not None
        return self._update(klass, prefix, step)

    def book(self, klass: str, prefix: str, rate: float, weight: float,
             since: float | None = None) -> tuple[float, float]:
        """Book a request that stands for ``weight`` requests (never refused): (now, when it may go).
        It goes once every request booked before it is done; the ``weight`` - 1 it stands for besides
        itself follow it. Its class's bookings are packed from ``since`` (its transfer's start; None:
        from now), not from when the class was last busy: the job's requests of a class that binds
        less (the drain's read-backs) flow through the whole transfer, where a scaled run makes
        them in a few bunches (as its few files' uploads end)."""
        def step(tat, now):
            base = max(tat, now if since is None else since)
            return base + weight / rate, (now, max(now, base))
        return self._update(klass, prefix, step)

    def due(self, klass: str, prefix: str) -> float:
        """When every request booked on (``klass``, ``prefix``) so far is done (-inf: none)."""
        return self._update(klass, prefix, lambda tat, now: (None, tat))

    def _update(self, klass: str, prefix: str, step):
        """``step(due, now)`` -> (the new due time or None to book nothing, the answer), under the lock."""
        with self._lock:
            if self.folder is None:
                due, answer = step(self._tat.get((klass, prefix), -math.inf), self.clock())
                if due is not None:
                    self._tat[(klass, prefix)] = due
                return answer
            return self._update_shared(klass, prefix, step)

    def _update_shared(self, klass: str, prefix: str, step):
        name = hashlib.sha1(f"{klass}|{prefix}".encode()).hexdigest()[:20]
        if self._held is None or self._pid != os.getpid():
            self._held, self._pid = reach(self.folder, create=True, what="S3 request ceilings"), os.getpid()
        fd = self._held.open_own(name, os.O_RDWR | os.O_CREAT, 0o644, what="S3 request ceilings")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.pread(fd, 8, 0)
            due, answer = step(struct.unpack("<d", raw)[0] if len(raw) == 8 else -math.inf, self.clock())
            if due is not None:
                os.pwrite(fd, struct.pack("<d", due), 0)
            return answer
        finally:
            os.close(fd)  # also drops the lock


class PrefixLimiter:
    """The botocore ``before-send`` hook: a 503 SlowDown for a request over its prefix's rate; with
    ``weights`` (a run standing for a larger job), each request waits for its turn instead, booked
    as the requests it stands for (``phase()``: the phase it is made in; ``on_wait(phase, start,
    end)``: told of each wait, on the wall clock)."""

    def __init__(self, bucket: str, limits: RequestLimits, folder: Path | None = None, *,
                 weights: RequestWeights | None = None, phase=lambda: "other", on_wait=None,
                 clock=time.time, sleep=time.sleep):
        self.bucket, self.limits, self.weights = bucket, limits, weights
        self._rates = _Rates(folder, clock)
        self._phase, self._on_wait, self._sleep = phase, on_wait, sleep
        self._booked: dict = {}  # phase -> the (class, prefix) its paced requests were booked on
        self._since: dict = {}  # phase -> when its transfer's first request was booked
        self._lock = threading.Lock()

    def key_of(self, url: str) -> str:
        """The object key a request addresses (path-style or virtual-hosted), or a LIST's prefix."""
        parts = urlsplit(url)
        path = unquote(parts.path)
        if not (parts.hostname or "").startswith(self.bucket + "."):  # path-style: /bucket/key
            if path == "/" + self.bucket or path.startswith(f"/{self.bucket}/"):
                path = path[len(self.bucket) + 1:]
        key = path[1:] if path.startswith("/") else path
        if not key:  # a request on the bucket: a LIST counts against the prefix it lists
            key = parse_qs(parts.query).get("prefix", [""])[0]
            return key if key.endswith("/") else prefix_of(key)
        return key

    def admit(self, method: str, url: str) -> bool:
        rate = self.limits.rate(method)
        if rate is None:
            return True
        klass = "get" if method in GET_CLASS else "put"
        return self._rates.admit(klass, prefix_of(self.key_of(url), self.limits.prefix_depth), rate)

    def pace(self, method: str, url: str) -> float:
        """Wait until the request's turn at its prefix's rate, booked at its weight; the seconds waited."""
        rate = self.limits.rate(method)
        if rate is None:
            return 0.0
        klass, phase = "get" if method in GET_CLASS else "put", self._phase()
        weight = self.weights.of(TRANSFER_OF_PHASE.get(phase, ""), klass)
        prefix = prefix_of(self.key_of(url), self.limits.prefix_depth)
        since = None
        if phase in TRANSFER_OF_PHASE:  # a transfer starts with its first request, ends at settle()
            with self._lock:
                booked = self._booked.setdefault(phase, set())
                if not booked:
                    self._since[phase] = self._rates.clock()
                booked.add((klass, prefix))
                since = self._since[phase]
        now, go = self._rates.book(klass, prefix, rate, weight, since)
        return self._wait(phase, now, go)

    def settle(self, phase: str) -> float:
        """Wait until the requests this process booked in ``phase`` (and every one booked before them on
        their prefixes, by any process) are done: the job's requests a transfer's stood for are done
        when their last is; the seconds waited."""
        with self._lock:
            booked = self._booked.pop(phase, set())
        if not booked:
            return 0.0
        return self._wait(phase, self._rates.clock(), max(self._rates.due(k, p) for k, p in booked))

    def _wait(self, phase: str, now: float, until: float) -> float:
        if until <= now:
            return 0.0
        if self._on_wait is not None:
            self._on_wait(phase, now, until)
        self._sleep(until - now)
        return until - now

    def floor_seconds(self, counts: dict, phase: str) -> float:
        """The least time ``counts`` requests (by kind, tiers/s3_requests.py) to one prefix take here,
        made in ``phase``: each class's, at its weight, over its rate."""
        by_class = {"put": 0, "get": 0}
        for kind, n in counts.items():
            by_class["get" if METHOD_OF_KIND.get(kind, "GET") in GET_CLASS else "put"] += n
        weights = self.weights or RequestWeights()
        transfer = TRANSFER_OF_PHASE.get(phase, "")
        return max((n * weights.of(transfer, klass) / rate for klass, n in by_class.items()
                    if n and (rate := self.limits.rate("GET" if klass == "get" else "PUT")) is not None),
                   default=0.0)

    def before_send(self, request, **_):
        """botocore's ``before-send``: None lets the request go; a response stands in for the server's."""
        if self.weights is not None:
            self.pace(request.method, request.url)
            return None
        if self.admit(request.method, request.url):
            return None
        count("slowdown")
        return slow_down_response(request)


class _Body:
    def __init__(self, data: bytes):
        self._data = data

    def stream(self, **_):
        yield self._data


def slow_down_response(request):
    """What S3 answers a request over its prefix's rate: 503 with an XML SlowDown error (no body
    for a HEAD)."""
    from botocore.awsrequest import AWSResponse

    xml = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SlowDown</Code>"
           b"<Message>Please reduce your request rate.</Message><RequestId>ckpt-emu</RequestId></Error>")
    body = b"" if request.method == "HEAD" else xml
    headers = {"Content-Type": "application/xml", "Content-Length": str(len(body))}
    return AWSResponse(request.url, 503, headers, _Body(body))


def limit_requests(tier, limits: RequestLimits, scope: TierScope | None = None, *, phase=lambda: "other",
                   on_wait=None) -> PrefixLimiter | None:
    """Apply ``limits`` to ``tier``'s requests if its backend makes any (``on_request``: the S3
    tier), weighed as ``scope.request_weights`` says (paced, not refused); the limiter, or None
    where there is nothing to limit. One limiter a client: a second wrapper of the same tier with
    the same limits shares the first's (each request is booked once), one with other limits (the
    loads' own clock) replaces it."""
    inner = unwrap(tier)
    on_request = getattr(inner, "on_request", None)
    if on_request is None or limits.unlimited:
        return None
    folder = None
    if scope is not None and scope.shared_dir:
        store = hashlib.sha1(f"{inner.endpoint_url}|{inner.bucket}".encode()).hexdigest()[:16]
        folder = Path(scope.shared_dir) / f"requests-{store}"
    weights = scope.request_weights if scope is not None else None
    key = (limits, folder, weights)
    hooked = getattr(inner, "_request_limiter", None)
    if hooked is not None and hooked[0] == key:
        return hooked[1]
    if hooked is not None and hasattr(inner, "off_request"):
        inner.off_request(hooked[1].before_send)
    limiter = PrefixLimiter(inner.bucket, limits, folder, weights=weights, phase=phase, on_wait=on_wait)
    on_request(limiter.before_send)
    inner._request_limiter = (key, limiter)
    return limiter
