"""One run owns a directory: an exclusive owner lock plus a shared users lock, both ``flock``.

Two runs writing into the same tier delete each other's files (retention,
crash clean-up), so a run takes the tier for its lifetime:

* ``.ckpt-emu.owner``: one process of the run (the claimer) holds it
  exclusively and writes who it is into it (job, pid, host, start), so a
  second run fails at once with one line naming the holder.
* ``.ckpt-emu.users``: every process of the run that writes there holds it
  shared. A new claimer, once it owns the tier, waits for the users lock to be
  free: the processes of an earlier run that are still exiting (they die
  within seconds of their launcher) cannot write under the new one.

The kernel releases both when a process dies, so a lock left by a dead run is
simply free: its record is shown nowhere and overwritten. ``flock`` works on
local filesystems; on NFS it becomes a POSIX lock (NLM), and Lustre needs the
``flock`` mount option: where it does not work, say so in the config rather
than share the tier (docs/faults.md).
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .base import Claim, TierError

OWNER, USERS = ".ckpt-emu.owner", ".ckpt-emu.users"
INTERNAL_FILES = (OWNER, USERS)


class TierBusy(TierError):
    """Another run owns the tier (or its processes are still exiting)."""


@dataclass(frozen=True)
class Holder:
    """Who owns a tier: shown to a second run that finds it taken."""

    job: str
    pid: int = field(default_factory=os.getpid)
    host: str = field(default_factory=socket.gethostname)
    started: float = field(default_factory=time.time)

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        return f"pid {self.pid} on {self.host} since {when} (run {self.job})"


class FileClaim(Claim):
    """flocks held for a run's lifetime; ``release`` (or the process's death) frees them."""

    def __init__(self, fds: list[int] = ()):
        self._fds = list(fds)

    def release(self) -> None:
        for fd in self._fds:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
            except OSError:
                pass
        self._fds = []


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)


def _try(fd: int, op: int) -> bool:
    try:
        fcntl.flock(fd, op | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def read_holder(folder: Path) -> Holder | None:
    try:
        return Holder(**json.loads((Path(folder) / OWNER).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def claim_dir(folder: Path, holder: Holder, *, what: str, wait_users_s: float = 20.0) -> Claim:
    """Own ``folder`` for this run; TierBusy with one line naming the holder if another run does."""
    folder = Path(folder)
    owner = _open(folder / OWNER)
    if not _try(owner, fcntl.LOCK_EX):
        os.close(owner)
        held = read_holder(folder)
        raise TierBusy(f"{what} is in use by another run: {held.describe() if held else 'unknown holder'}")
    users = _open(folder / USERS)
    deadline = time.monotonic() + wait_users_s
    while not _try(users, fcntl.LOCK_EX):  # an earlier run's processes, still exiting
        if time.monotonic() > deadline:
            for fd in (users, owner):
                os.close(fd)
            raise TierBusy(f"{what} is still used by processes of an earlier run ({folder / USERS} is "
                           f"locked {wait_users_s:.0f} s after its owner ended); stop them and retry")
        time.sleep(0.1)
    fcntl.flock(users, fcntl.LOCK_SH)  # from exclusive to shared: this run is a user too
    os.ftruncate(owner, 0)
    os.pwrite(owner, json.dumps(asdict(holder)).encode(), 0)
    os.fsync(owner)
    return FileClaim([owner, users])


def join_dir(folder: Path, *, what: str, wait_s: float = 60.0) -> Claim:
    """Use ``folder`` as a process of the run that claimed it (a shared users lock)."""
    users = _open(Path(folder) / USERS)
    deadline = time.monotonic() + wait_s
    while not _try(users, fcntl.LOCK_SH):  # the claimer holds it exclusively for a moment
        if time.monotonic() > deadline:
            os.close(users)
            raise TierBusy(f"{what}: could not join the run's lock ({Path(folder) / USERS})")
        time.sleep(0.05)
    return FileClaim([users])
