"""A tier that fails or slows down on demand: the injected global-tier outage.

While ``activate``'s window is open every request (calls, opening a stream,
committing a sink) fails like an S3 503 or a refused connection
(``TransientFault``), or waits ``delay_s`` first. The window is per process:
each rank opens it when it starts the checkpoint the config names, so ranks
agree to within milliseconds without talking to each other.
"""
from __future__ import annotations

import time

from .base import Tier, TierError, TierWrapper


class TransientFault(TierError):
    """An injected outage: what an S3 503 or a refused connection looks like to the caller."""


class FaultyTier(TierWrapper):
    def __init__(self, inner: Tier, kind: str = "error", delay_s: float = 0.5):
        if kind not in ("error", "slow"):
            raise ValueError(f"kind must be 'error' or 'slow', got {kind!r}")
        super().__init__(inner)
        self.kind, self.delay_s = kind, delay_s
        self._until = 0.0

    def activate(self, seconds: float) -> None:
        self._until = time.monotonic() + seconds

    @property
    def active(self) -> bool:
        return time.monotonic() < self._until

    def request_error(self, what: str) -> BaseException | None:
        if self.active and self.kind == "error":
            return TransientFault(f"injected global tier outage (failures.global_fault): {what}: "
                                  "503 Service Unavailable")
        return None

    def request_delay(self, what: str) -> float:
        return self.delay_s if self.active and self.kind == "slow" else 0.0
