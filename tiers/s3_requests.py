"""Every S3 request counted by kind, and charged to the checkpoint or restore that made it.

A botocore hook on the tier's client (``before-send.s3``) sees every HTTP
attempt, so botocore's own retries count, and a retry by the caller's policy
is a new request anyway: the counts are what the server saw, and what it bills.

Attribution needs no bookkeeping in the tier: the code that runs a phase opens
a ``Bill`` with ``charged_to(bill)`` (a context variable), and every request
made under it, in a coroutine, a thread of ``asyncio.to_thread`` or the tier's
part pool (a ``ContextPool``, which carries the caller's context into its
threads), is added to that bill. Requests outside any bill (the lease's
renewals, start-up clean-up) still count in the tier's own ``RequestTally``.

Kinds are the S3 API's names, shortened where the brief's are common:
PUT, GET, HEAD, LIST, DELETE, COPY, and the multipart requests by name.
``PRICE_CLASS`` is how AWS bills them: PUT, COPY, POST and LIST at the
PUT-class rate, DELETE and the abort of an upload free, everything else
(GET, HEAD) at the GET-class rate.
"""
from __future__ import annotations

import concurrent.futures as cf
import contextvars
import threading
from collections import Counter
from contextlib import contextmanager

#: the S3 operation (botocore's name) -> the kind it is counted as
KIND_OF = {
    "PutObject": "PUT", "GetObject": "GET", "HeadObject": "HEAD", "HeadBucket": "HEAD",
    "ListObjectsV2": "LIST", "ListObjects": "LIST", "ListMultipartUploads": "LIST", "ListParts": "LIST",
    "DeleteObject": "DELETE", "DeleteObjects": "DELETE", "CopyObject": "COPY",
}
#: every kind this module counts under its own name; anything else is "other"
KINDS = ("PUT", "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload", "AbortMultipartUpload",
         "GET", "HEAD", "LIST", "DELETE", "COPY", "other")
MULTIPART = ("CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload", "AbortMultipartUpload")
#: how AWS S3 bills each kind: "put" (per 1,000 PUT-class), "get" (per 1,000 GET-class) or "free"
PRICE_CLASS = {
    "PUT": "put", "COPY": "put", "LIST": "put",
    "CreateMultipartUpload": "put", "UploadPart": "put", "CompleteMultipartUpload": "put",
    "DELETE": "free", "AbortMultipartUpload": "free",
    "GET": "get", "HEAD": "get", "other": "get",
}


def kind_of(operation: str) -> str:
    """The kind an S3 operation counts as (``PutObject`` -> ``PUT``, ``UploadPart`` as is)."""
    kind = KIND_OF.get(operation, operation)
    return kind if kind in KINDS else "other"


class RequestTally:
    """Counts by kind, safe to add to from any thread; ``counts()`` is a plain dict."""

    def __init__(self):
        self._lock = threading.Lock()
        self._counts: Counter = Counter()

    def add(self, kind: str, n: int = 1) -> None:
        with self._lock:
            self._counts[kind] += n

    def counts(self) -> dict:
        with self._lock:
            return dict(self._counts)


class Bill(RequestTally):
    """The requests charged to one phase (``phase``: "checkpoint", "restore"); ``on_request(kind,
    phase)`` is told of each as it is made (live metrics)."""

    def __init__(self, phase: str, on_request=None):
        super().__init__()
        self.phase, self._on_request = phase, on_request

    def add(self, kind: str, n: int = 1) -> None:
        super().add(kind, n)
        if self._on_request is not None:
            self._on_request(kind, self.phase)


_BILL: contextvars.ContextVar = contextvars.ContextVar("ckpt_emu_s3_bill", default=None)


@contextmanager
def charged_to(bill: Bill):
    """Charge every S3 request made in this context (and the tasks and threads it starts) to ``bill``."""
    token = _BILL.set(bill)
    try:
        yield bill
    finally:
        _BILL.reset(token)


def charge_task_to(bill: Bill) -> Bill:
    """Charge the rest of the running asyncio task (and what it starts) to ``bill``: for a
    coroutine run as a task of its own, whose context ends with it."""
    _BILL.set(bill)
    return bill


def count_requests(client, tally: RequestTally) -> None:
    """Hook ``client`` so each HTTP attempt it sends is added to ``tally`` and to the current bill."""
    def before_send(event_name: str, **_):
        kind = kind_of(event_name.rsplit(".", 1)[-1])
        tally.add(kind)
        bill = _BILL.get()
        if bill is not None:
            bill.add(kind)
        # returns None: a value here would stand in for the server's response

    client.meta.events.register("before-send.s3", before_send, unique_id=f"ckpt-emu-requests-{id(tally)}")


class ContextPool(cf.ThreadPoolExecutor):
    """A thread pool whose tasks run in the submitter's context, so their requests reach its bill."""

    def submit(self, fn, /, *args, **kwargs):
        return super().submit(contextvars.copy_context().run, fn, *args, **kwargs)
