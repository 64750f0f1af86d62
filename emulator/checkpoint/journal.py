"""The rank's journal of its checkpoints (its records file): the emulator's own bookkeeping, so
that what an attempt did survives a kill, and never part of a checkpoint's stall.

A checkpoint's "started" line is written on the training loop's thread before the stall's clock
starts and before any of its writes; its "finished" line on a thread of the journal's own, as soon
as the pipeline is over, so neither a sync checkpoint nor the next async one waits for it."""
from __future__ import annotations

import concurrent.futures
import copy
import threading


class Journal:
    """``write(record, event)`` appends one line (None: no journal); ``close`` waits for the lines
    not yet written and raises the first error of any."""

    def __init__(self, write=None):
        self._write = write
        self._thread: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending: list[concurrent.futures.Future] = []
        self._lock = threading.Lock()  # started: the training loop's thread; finished: the pipeline's

    def started(self, rec) -> None:
        if self._write is not None:
            self._raise_errors()
            self._write(rec, "started")

    def finished(self, rec) -> None:
        """Journal the checkpoint as it is now (the pipeline's housekeeping may still add to it)."""
        if self._write is None:
            return
        with self._lock:
            if self._thread is None:
                self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ckpt-journal")
            self._pending.append(self._thread.submit(self._write, copy.deepcopy(rec), "finished"))

    def _raise_errors(self) -> None:
        with self._lock:
            done = [f for f in self._pending if f.done()]
            self._pending = [f for f in self._pending if not f.done()]  # bounded in soak runs
        for future in done:
            future.result()

    def close(self) -> None:
        with self._lock:
            pending, self._pending, thread = self._pending, [], self._thread
            self._thread = None
        try:
            for future in pending:
                future.result()
        finally:
            if thread is not None:
                thread.shutdown(wait=True)
