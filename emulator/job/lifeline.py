"""Processes that die with their parent: a run cannot outlive its launcher.

torchrun starts every rank in a session of its own, so killing the ``ckpt-emu``
process or the torchrun agent (``kill -9``, an OOM kill, a closed terminal)
used to leave the ranks running as orphans, still checkpointing into tiers a
rerun then shared with them. Three links close that:

* the CLI starts torchrun with ``PR_SET_PDEATHSIG(SIGKILL)`` set between fork
  and exec (``die_with_parent`` as ``preexec_fn``): torchrun dies with the CLI;
* the fork server that forks the ranks (emulator/rank/agent.py) asks for SIGTERM, on which it
  removes its socket and exits, so it dies with torchrun;
* each rank sets ``PR_SET_PDEATHSIG(SIGKILL)`` on itself at start, so it dies with its parent.

``prctl`` cannot cover a parent that died before it was called, so
``watch_parent`` also starts a thread that checks once a second whether the
process was reparented, and ends the process if so (SIGKILL: a crash, which
the next run cleans up after, as after any crash). Ctrl-C and SIGTERM are
unchanged: the CLI asks the ranks to stop and they finish cleanly.

``end_run`` is the other way round: a process that must stop at once (it lost
its claim on a tier) prints one error line and exits; torchrun then ends the
other ranks and the CLI reports that line.
"""
from __future__ import annotations

import ctypes
import os
import signal
import threading
import time

from emulator.errors import EXIT_FAILED, say

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
#: the name (``/proc/PID/comm``, what ``ps -o comm`` and ``top`` show) of a run's rank processes
RANK_PROCESS_NAME = "ckpt-rank"
#: the name of the process that forks them (emulator/rank/agent.py)
FORK_SERVER_PROCESS_NAME = "ckpt-forkserver"


def _prctl(option: int, arg) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, arg, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux
        return False


def _prctl_pdeathsig(sig: int) -> bool:
    return _prctl(PR_SET_PDEATHSIG, sig)


def name_process(name: str) -> None:
    """Name this process (15 bytes at most): a process forked from torchrun's agent (its fork server,
    a rank) has the agent's command line, so ``ps``, the tests and the bench tell it by this name."""
    _prctl(PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]))


def name_rank_process(rank: str) -> None:
    """Name this process ``ckpt-rankN`` (a rank up to 999999), by which its rank is found."""
    name_process(f"{RANK_PROCESS_NAME}{rank}")


def rank_of_process(pid: int) -> int | None:
    """The rank of process ``pid`` if it is a rank (named by :func:`name_rank_process`), else None."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            name = f.read().strip()
    except OSError:
        return None
    suffix = name[len(RANK_PROCESS_NAME):]
    return int(suffix) if name.startswith(RANK_PROCESS_NAME) and suffix.isdigit() else None


def die_with_parent(parent_pid: int | None = None, sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send this process ``sig`` (SIGKILL) when its parent dies; if the parent is
    already gone (``parent_pid`` given and no longer the parent), die now. Safe as a ``preexec_fn``."""
    _prctl_pdeathsig(sig)
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)


def watch_parent(interval_s: float = 1.0) -> threading.Thread:
    """``die_with_parent`` for this process, plus a daemon thread that SIGKILLs it if it is
    ever reparented (the parent died before prctl, or prctl is unavailable)."""
    parent = os.getppid()
    die_with_parent()
    if parent == 1:  # already an orphan: the parent died before we could ask
        os.kill(os.getpid(), signal.SIGKILL)

    def watch():
        while True:
            if os.getppid() != parent:
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(interval_s)
    thread = threading.Thread(target=watch, name="ckpt-emu-lifeline", daemon=True)
    thread.start()
    return thread


#: the exit status of a process that ended its run (torchrun then ends the others): failed to run
END_RUN_STATUS = EXIT_FAILED


def end_run(line: str) -> None:
    """Print ``ckpt-emu: error: line`` (the line the CLI reports) and exit this process now, from
    any thread, without running anything more: no write after this point."""
    say(f"ckpt-emu: error: {line}")
    os._exit(END_RUN_STATUS)
