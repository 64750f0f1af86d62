"""Sync or async: what the training loop waits for of the pipelines in flight.

Sync waits for the whole pipeline of each checkpoint. Async waits only for the snapshot; before
staging the next checkpoint it waits for the previous one (``async_waits_for``): ``complete``, its
whole pipeline (the drain must beat the next checkpoint), or ``local_write``, only its file written
(the staging buffers are free then) and the one before it complete: the previous drain keeps
running, sharing the first tier's device with the next write."""
from __future__ import annotations

import concurrent.futures


class InFlight:
    def __init__(self, waits_for: str):
        self.waits_for = waits_for
        self._inflight: concurrent.futures.Future | None = None
        self._written: concurrent.futures.Future | None = None  # the in-flight checkpoint's write stage
        self._older: concurrent.futures.Future | None = None  # the checkpoint before it, still draining

    def started(self, mode: str, pipeline: concurrent.futures.Future, written: concurrent.futures.Future) -> None:
        """A checkpoint's pipeline began: a sync one is waited for at once, an async one later."""
        if mode == "sync":
            pipeline.result()
        else:
            self._inflight, self._written = pipeline, written

    def pending(self) -> bool:
        """Whether the previous async checkpoint is not over (the next one then misses its deadline)."""
        return self._inflight is not None and not self._inflight.done()

    def wait_for_previous(self) -> None:
        """Wait for what the next checkpoint needs of the one in flight (``async_waits_for``); raises
        what its pipeline raised (drain.on_failure)."""
        inflight, self._inflight = self._inflight, None
        if inflight is None:
            return
        if self.waits_for == "complete" or inflight.done():
            inflight.result()
            return
        self._written.result()  # the staging buffers are free: the drain may run on
        if self._older is not None:
            self._older.result()  # at most one drain behind the write
        self._older = inflight

    def any(self) -> bool:
        """Whether an async checkpoint's write, drain or commit is still running on this rank."""
        return any(f is not None and not f.done() for f in (self._inflight, self._older))

    def finish(self) -> None:
        """Wait for every checkpoint in flight (end of a mode)."""
        for name in ("_older", "_inflight"):
            future = getattr(self, name)
            setattr(self, name, None)
            if future is not None:
                future.result()
