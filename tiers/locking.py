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
simply free: its record is shown nowhere and overwritten. A run whose launcher
(the CLI, named in the record) has ended is dying: a claim waits for its lock. The lock files are
opened without following links and only as regular files of this user's with
one name (``tiers.safepath``): a name another user planted is refused, never
truncated or written through. ``flock`` works on
local filesystems; on NFS it becomes a POSIX lock (NLM), and Lustre needs the
``flock`` mount option: where it does not work, say so in the config rather
than share the tier (docs/faults.md).
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import threading
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field

from .base import Claim, TierError
from .fileops import open_checked
from .safepath import Folder, reach

OWNER, USERS = ".ckpt-emu.owner", ".ckpt-emu.users"
INTERNAL_FILES = (OWNER, USERS)
#: the most of an owner record read (a record is about 100 bytes)
MAX_RECORD = 64 << 10
#: how long a claim waits for the processes of a run that ended (or whose launcher did) to exit
WAIT_FOR_ENDED_RUN_S = 20.0


class TierBusy(TierError):
    """Another run owns the tier (or its processes are still exiting)."""


@dataclass(frozen=True)
class Holder:
    """Who owns a tier: shown to a second run that finds it taken."""

    job: str
    pid: int = field(default_factory=os.getpid)
    host: str = field(default_factory=socket.gethostname)
    started: float = field(default_factory=time.time)
    #: the pid of the process that launched the run on this host (the CLI), 0 if not known
    launcher: int = 0

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        line = f"pid {self.pid} on {self.host} since {when} (run {self.job})"
        if self.ending():
            line += f"; its launcher (pid {self.launcher}) ended but its processes still hold the lock"
        return line

    def ending(self) -> bool:
        """Whether the run's launcher on this host has ended: its processes follow it within
        seconds (emulator/job/lifeline.py), so its lock is about to be free."""
        if self.launcher <= 0 or self.host != socket.gethostname():
            return False
        return not process_alive(self.launcher, self.started)  # (the launcher started before its ranks)


def process_alive(pid: int, started: float) -> bool:
    """Whether the process ``pid`` that started at ``started`` (unix time) still runs on this host."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        boot = next(float(line.split()[1]) for line in open("/proc/stat") if line.startswith("btime"))
    except (OSError, StopIteration, IndexError, ValueError):
        return False
    if fields[0] == "Z":
        return False
    began = boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    return began <= started + 2.0  # a later start: the pid was reused by another process


class FileClaim(Claim):
    """flocks held for a run's lifetime; ``release`` (or the process's death) frees them. The claim
    also holds its folder by descriptor: ``watch`` ends the run (``on_lost``) when the path stops
    naming that folder (deleted, moved, replaced), instead of letting a later write make it again."""

    def __init__(self, fds: list[int] = (), folder: Folder | None = None, what: str = ""):
        self._fds = list(fds)
        self.folder, self.what = folder, what
        self.on_lost = _warn  # called once, with one line, when the folder is gone
        self._stop = threading.Event()

    def release(self) -> None:
        self._stop.set()
        for fd in self._fds:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
            except OSError:
                pass
        self._fds = []
        if self.folder is not None:
            self.folder.close()
            self.folder = None

    def lost(self) -> str | None:
        """Why the claimed folder is no longer the one the path names, or None."""
        folder = self.folder
        if folder is None or folder.fd < 0:
            return None
        try:
            what = folder.still_there()
        except OSError:
            return None  # released meanwhile
        return None if what is None else f"{self.what} {what} during the run: the run ends (its lock and " \
                                         "checkpoints went with the folder; it is never made again under a run)"

    def watch(self, interval_s: float = 1.0) -> None:
        """Check the folder every ``interval_s`` in a daemon thread; ``on_lost(line)`` once if it went."""
        def loop():
            while not self._stop.wait(interval_s):
                line = self.lost()
                if line is not None:
                    self.on_lost(line)
                    return
        threading.Thread(target=loop, name="ckpt-emu-claim-watch", daemon=True).start()


def _warn(line: str) -> None:
    sys.stderr.write(f"ckpt-emu: warning: {line}\n")  # one write: a whole line in a log ranks share
    sys.stderr.flush()


def _open(folder: Folder, name: str, what: str) -> int:
    """The lock file ``name``: made or reused only as a regular file of this user's, never through a link."""
    return folder.open_own(name, os.O_RDWR | os.O_CREAT, 0o644, what=what)


def _try(fd: int, op: int) -> bool:
    try:
        fcntl.flock(fd, op | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _reached(folder, what: str) -> Folder:
    """A Folder of its own for ``folder``: a path reached safely, or a held Folder's descriptor again."""
    return Folder(os.dup(folder.fd), folder.path) if isinstance(folder, Folder) else reach(folder, what=what)


def read_holder(folder) -> Holder | None:
    """The record of the run that claimed ``folder`` (a path or a Folder), if it can be read."""
    try:
        with _reached(folder, "lock") as held:
            fd = open_checked(OWNER, os.O_RDONLY, dir_fd=held.fd)
            try:
                raw = os.read(fd, MAX_RECORD)
            finally:
                os.close(fd)
        return Holder(**json.loads(raw))
    except (OSError, ValueError, TypeError, TierError):
        return None


def busy_holder(folder, *, wait_ending_s: float = 0.0) -> Holder | None:
    """Whether a run holds ``folder`` now (its owner lock is taken), checked without making or
    writing anything; that run's record (or an unnamed one) if so, else None. A run whose launcher
    has ended is waited for, up to ``wait_ending_s``."""
    deadline = time.monotonic() + wait_ending_s
    while True:
        holder = _holder_now(folder)
        if holder is None or not holder.ending() or time.monotonic() > deadline:
            return holder
        time.sleep(0.1)


def _holder_now(folder) -> Holder | None:
    try:
        with _reached(folder, "lock") as held:
            fd = open_checked(OWNER, os.O_RDONLY, dir_fd=held.fd)
    except (OSError, TierError):
        return None
    try:
        if _try(fd, fcntl.LOCK_SH):
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
    finally:
        os.close(fd)
    return read_holder(folder) or Holder(job="?", pid=0, host="?", started=0.0)


def _wait_lock(fd: int, op: int, wait_s: float, interval_s: float, error) -> None:
    """Take the flock ``op`` on ``fd``, trying every ``interval_s`` for ``wait_s``; raise ``error()``."""
    deadline = time.monotonic() + wait_s
    while not _try(fd, op):
        if time.monotonic() > deadline:
            raise error()
        time.sleep(interval_s)


def claim_dir(folder, holder: Holder, *, what: str, wait_users_s: float = WAIT_FOR_ENDED_RUN_S) -> FileClaim:
    """Own ``folder`` (a path or a Folder) for this run; TierBusy with one line naming the holder
    if another run does, UnsafePath if its lock files are not the tool's own."""
    with ExitStack() as undo:  # closes what was opened if the claim fails
        held = undo.enter_context(_reached(folder, what))
        owner = _open(held, OWNER, what)
        undo.callback(os.close, owner)
        if not _try(owner, fcntl.LOCK_EX):
            _wait_for_ending_run(held, owner, wait_users_s, what)
        users = _open(held, USERS, what)
        undo.callback(os.close, users)
        _wait_lock(users, fcntl.LOCK_EX, wait_users_s, 0.1, lambda: TierBusy(  # an earlier run's, exiting
            f"{what} is still used by processes of an earlier run ({held.path}/{USERS} is locked "
            f"{wait_users_s:.0f} s after its owner ended); stop them and retry"))
        fcntl.flock(users, fcntl.LOCK_SH)  # from exclusive to shared: this run is a user too
        os.ftruncate(owner, 0)
        os.pwrite(owner, json.dumps(asdict(holder)).encode(), 0)
        os.fsync(owner)
        undo.pop_all()
        return FileClaim([owner, users], held, what)


def _wait_for_ending_run(held: Folder, owner: int, wait_s: float, what: str) -> None:
    """The owner lock, once the run that holds it ends, if its launcher has ended already (up to
    ``wait_s``); else TierBusy at once, naming the holder."""
    def busy():
        holder = read_holder(held)
        return TierBusy(f"{what} is in use by another run: {holder.describe() if holder else 'unknown holder'}")
    holder = read_holder(held)
    if holder is None or not holder.ending():
        raise busy()
    _wait_lock(owner, fcntl.LOCK_EX, wait_s, 0.1, busy)


def join_dir(folder, *, what: str, wait_s: float = 60.0, job: str | None = None) -> FileClaim:
    """Use ``folder`` as a process of the run that claimed it (a shared users lock). With ``job``,
    the folder must be the one that run claimed (its owner record names the job): a folder that
    was replaced between the claim and the join is refused."""
    with ExitStack() as undo:
        held = undo.enter_context(_reached(folder, what))
        users = _open(held, USERS, what)
        undo.callback(os.close, users)
        _wait_lock(users, fcntl.LOCK_SH, wait_s, 0.05, lambda: TierBusy(  # the claimer holds it for a moment
            f"{what}: could not join the run's lock ({held.path}/{USERS})"))
        record = read_holder(held) if job is not None else None
        if job is not None and (record is None or record.job != job):
            raise TierBusy(f"{what} is not the folder this run claimed (its lock names "
                           f"{'no run' if record is None else 'run ' + record.job}); it was replaced during the start")
        undo.pop_all()
        return FileClaim([users], held, what)
