"""A rank's malloc arenas, capped at two: glibc gives each new thread an arena of its own (up to 8 a
core), and a freed block stays in its arena. A rank's short-lived threads (a drain's read-back, the
copies beside it) each kept a few MiB that way: rank 0 of a soak grew 70 MiB in its first seconds
before it levelled, memory the run's peak RSS counted as its own."""
from __future__ import annotations

import ctypes

#: mallopt's parameter for the most arenas a process may have (malloc.h)
M_ARENA_MAX = -8
ARENAS = 2


def cap_arenas(arenas: int = ARENAS) -> bool:
    """Cap this process's malloc arenas (glibc); False where the C library has no ``mallopt``."""
    try:
        return bool(ctypes.CDLL(None).mallopt(M_ARENA_MAX, arenas))
    except (AttributeError, OSError):
        return False
