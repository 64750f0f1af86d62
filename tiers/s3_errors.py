"""S3 failures in one short line: classification (not found, worth a retry) and text.

Every message names what failed in words a user can act on ("access denied",
"bucket is in another region", "cannot reach endpoint ...: connection
refused") and never carries a credential: any access key, secret key or
session token the client holds is replaced by ``***``, and an endpoint URL is
shown without a ``user:password@`` part.

Throttling is the one error retried per request, inside the S3 tier
(``retry_throttled``): a 503 SlowDown (or 429, Throttling) means "the same
request, later", as every AWS SDK treats it, and a throttled part of a
multipart upload must not cost the whole file (the run's retry policy would
abort the upload and send every part again, which under a request limit only
adds requests). Up to ``THROTTLE_RETRIES`` retries, backing off from
``THROTTLE_BACKOFF_S``, doubling with jitter (0.5-1x), capped at
``THROTTLE_MAX_BACKOFF_S``; past that the error reaches the caller's retry
policy like any other transient one. Each such retry is counted
(``s3_limits.counts()``, ``slowdown_retry``).
"""
from __future__ import annotations

import random
from urllib.parse import urlsplit

from botocore.exceptions import (BotoCoreError, ClientError, ConnectTimeoutError, EndpointConnectionError,
                                 NoCredentialsError, ParamValidationError, ReadTimeoutError)

from . import s3_limits
from .base import TierError

NOT_FOUND = ("404", "NoSuchKey", "NotFound")
CREDENTIALS_REJECTED = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken",
                        "TokenRefreshRequired")

#: the codes S3 (and S3-compatible servers) answer when requests come too fast
THROTTLE_CODES = ("SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded",
                  "TooManyRequests", "TooManyRequestsException", "RequestThrottled")
THROTTLE_RETRIES = 10
THROTTLE_BACKOFF_S = 0.05
THROTTLE_MAX_BACKOFF_S = 5.0


class Cancelled(Exception):
    """Another part failed; this one stops without touching the server."""


def status(exc: ClientError) -> int:
    return exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", status(exc)))


def is_not_found(exc: BaseException) -> bool:
    return isinstance(exc, ClientError) and (_code(exc) in NOT_FOUND or status(exc) == 404) \
        and _code(exc) != "NoSuchBucket"


def retryable(exc: BaseException) -> bool:
    """Worth another try at our level (after botocore's own retries): 5xx, throttling, I/O."""
    if isinstance(exc, ClientError):
        return status(exc) >= 500 or status(exc) in (408, 429) or \
            _code(exc) in ("RequestTimeout", "SlowDown", "Throttling", "InternalError")
    return isinstance(exc, Exception) and not isinstance(
        exc, (TierError, Cancelled, NoCredentialsError, ParamValidationError, FileNotFoundError))


def throttled(response) -> bool:
    """Is botocore's (http response, parsed) a throttle: 429, a throttling code, or a 503 without
    a body (a HEAD: S3 sends no error code there, and its 503s all mean "reduce your request rate")?"""
    if response is None:
        return False
    http, parsed = response
    code = (parsed or {}).get("Error", {}).get("Code", "")
    return http.status_code == 429 or code in THROTTLE_CODES or (http.status_code == 503 and code in ("", "503"))


def throttle_delay(retry: int) -> float:
    """Seconds before the ``retry``-th retry of a throttled request."""
    return min(THROTTLE_MAX_BACKOFF_S, THROTTLE_BACKOFF_S * 2 ** (retry - 1)) * random.uniform(0.5, 1.0)


def retry_throttled(client) -> None:
    """Hook ``client`` so a throttled request is sent again after a backoff (botocore's
    ``needs-retry``: a number is the seconds it sleeps before the same request again)."""
    def needs_retry(response=None, attempts=1, **_):
        if attempts > THROTTLE_RETRIES or not throttled(response):
            return None
        s3_limits.count("slowdown_retry")
        return throttle_delay(attempts)

    client.meta.events.register("needs-retry.s3", needs_retry, unique_id="ckpt-emu-throttle-retry")


def endpoint_text(endpoint_url: str | None) -> str:
    """The endpoint as a user may see it: scheme, host and port, never user:password@."""
    if not endpoint_url:
        return "the AWS S3 endpoint"
    parts = urlsplit(endpoint_url)
    netloc = parts.hostname + (f":{parts.port}" if parts.port else "") if parts.hostname else ""
    return f"{parts.scheme}://{netloc}" if netloc else "the endpoint"


def reason(exc: BaseException, endpoint_url: str | None, secrets: list[str]) -> str:
    """One short line for an exception, with every one of ``secrets`` scrubbed out."""
    if isinstance(exc, ClientError):
        text = _client_error_text(exc)
    elif isinstance(exc, (EndpointConnectionError, ConnectTimeoutError)):
        text = f"cannot reach endpoint {endpoint_text(endpoint_url)}: {socket_reason(exc)}"
    elif isinstance(exc, ReadTimeoutError):
        text = f"endpoint {endpoint_text(endpoint_url)} did not answer in time (read timeout)"
    elif isinstance(exc, NoCredentialsError):
        text = "no credentials found (boto3 chain: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ...)"
    elif isinstance(exc, BotoCoreError):
        text = str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}"
    text = " ".join(text.split())
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def _client_error_text(exc: ClientError) -> str:
    code, http = _code(exc), status(exc)
    if code == "NoSuchBucket":
        return "bucket does not exist"
    if code in CREDENTIALS_REJECTED:
        return f"credentials rejected ({code})"
    if code in ("AccessDenied", "403", "Forbidden"):
        return "access denied (check credentials and bucket permissions)"
    if code in ("PermanentRedirect", "301", "AuthorizationHeaderMalformed"):
        region = exc.response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("x-amz-bucket-region")
        return f"bucket is in another region{f' ({region})' if region else ''}: set region"
    msg = exc.response.get("Error", {}).get("Message", "")
    return f"{code}: {msg}" if msg else f"{code} (HTTP {http})"


def socket_reason(exc: BaseException) -> str:
    seen, e = set(), exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, ConnectionRefusedError):
            return "connection refused"
        if isinstance(e, (TimeoutError, ConnectTimeoutError)):
            return "connection timed out"
        if type(e).__name__ == "gaierror" or "Name or service not known" in str(e):
            return "host name not found"
        e = getattr(e, "kwargs", {}).get("error") or e.__cause__ or e.__context__
    return "connection failed"
