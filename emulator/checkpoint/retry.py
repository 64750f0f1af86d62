"""One retry policy for global-tier work, and the classification of errors it relies on.

Transient errors (a tier error, a timeout, a reset) are worth another attempt;
a full disk, a bad key, a lost source or a permission error are not. Retries
back off exponentially with jitter (0.5-1x), capped, for a bounded number of
attempts; then the work is ``Abandoned`` with the last reason.
"""
from __future__ import annotations

import asyncio
import errno
import random
from dataclasses import dataclass

from emulator.errors import UserError
from tiers.base import InvalidKey, TierError

PERMANENT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT}


def is_no_space(exc: BaseException) -> bool:
    """ENOSPC/EDQUOT anywhere in the chain (torch.save wraps the sink's OSError in a RuntimeError)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def transient(exc: BaseException) -> bool:
    """Worth another attempt: tier errors, timeouts, resets; not a full disk, a bad key, a lost source."""
    if isinstance(exc, (InvalidKey, UserError, FileNotFoundError)) or not isinstance(exc, Exception):
        return False
    if is_no_space(exc):
        return False
    if isinstance(exc, OSError) and exc.errno in PERMANENT_ERRNOS:
        return False
    return getattr(exc, "transient", True)  # a TierError says whether another try may succeed


class Abandoned(Exception):
    """Every attempt failed; the message says how many and the last reason."""


@dataclass
class RetryPolicy:
    retries: int = 3
    backoff_s: float = 1.0
    max_backoff_s: float = 60.0

    @classmethod
    def from_config(cls, drain_cfg) -> "RetryPolicy":
        return cls(drain_cfg.retries, drain_cfg.retry_backoff_s)

    def delay(self, attempt: int) -> float:
        return min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)


async def retrying(policy: RetryPolicy, what: str, fn, on_retry=None):
    """``await fn()`` up to 1 + retries times; raises Abandoned (or the error if not transient).

    ``on_retry(exc)`` is called before each backoff (to count retries)."""
    attempts = policy.retries + 1
    for attempt in range(1, attempts + 1):
        try:
            return await fn()
        except Exception as exc:  # noqa: BLE001 - classified by transient()
            if not transient(exc):
                raise
            if attempt == attempts:
                raise Abandoned(f"{what}: abandoned after {attempts} attempt(s): {describe_error(exc)}") from exc
            if on_retry is not None:
                on_retry(exc)
            await asyncio.sleep(policy.delay(attempt))


def describe_error(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if isinstance(exc, (TierError, Abandoned)) else f"{type(exc).__name__}: {text}"
