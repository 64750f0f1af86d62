"""Emulated capacity: bytes stored plus being written on a tier, against a limit (ENOSPC past it)."""
from __future__ import annotations

import errno
import fcntl
import os
import struct
import threading
from pathlib import Path

from .base import Tier
from .runsync import run_sync
from .safepath import open_own_file


def _enospc(what: str) -> OSError:
    return OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (emulated capacity): {what}")


class Capacity:
    """Bytes used on the inner tier (stored plus being written) against a limit.

    With a ``shared_dir`` the count is one integer in a file under ``flock``,
    keyed by the inner tier's location, so every process writing to the same
    storage (a node's ranks on its NVMe, all ranks on global storage) sees the
    others' bytes. Otherwise it is this process's own view. The first user
    counts what the inner tier already holds.
    """

    def __init__(self, limit: int, inner: Tier, path: Path | None = None):
        self.limit, self._inner, self._path = limit, inner, path
        self._lock = threading.Lock()
        self._used: int | None = None  # in-process count, once scanned
        self._fd, self._pid = None, -1

    def _scan(self) -> int:
        async def scan():
            return sum([(await self._inner.size(k)) or 0 for k in await self._inner.list()])
        return run_sync(scan())

    def _update(self, fn, scan: bool = True):
        """Apply ``fn(used) -> (new_used, result)`` atomically across threads (and processes).

        Before the first count exists, ``scan=False`` does nothing: the scan
        that creates the count will see the change anyway.
        """
        with self._lock:
            if self._path is None:
                if self._used is None:
                    if not scan:
                        return None
                    self._used = self._scan()
                self._used, result = fn(self._used)
                return result
            if self._fd is None or self._pid != os.getpid():
                self._fd = open_own_file(self._path, os.O_RDWR | os.O_CREAT, what="emulated capacity")
                self._pid = os.getpid()
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                raw = os.pread(self._fd, 8, 0)
                if len(raw) != 8 and not scan:
                    return None
                used = struct.unpack("<q", raw)[0] if len(raw) == 8 else self._scan()
                used, result = fn(used)
                os.pwrite(self._fd, struct.pack("<q", used), 0)
                return result
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def reserve(self, n: int, what: str) -> None:
        """Claim ``n`` bytes or raise ENOSPC (claiming nothing)."""
        def claim(used):
            if used + n > self.limit:
                raise _enospc(f"{what} needs {n} bytes, {max(0, self.limit - used)} free")
            return used + n, None
        self._update(claim)

    def free(self, n: int | None) -> None:
        """Give back ``n`` bytes: an aborted write, a deleted or replaced object."""
        if n:
            self._update(lambda used: (max(0, used - n), None), scan=False)
