"""What this host says of itself in /proc: ``key: value`` files (meminfo, cpuinfo, a process's status).

One reader for the places that ask: the memory tier's check against the available memory
(launch), a rank's peak RSS, and the host description MLPerf's DLIO folder keeps.
"""
from __future__ import annotations

from pathlib import Path


def proc_fields(path: str) -> dict:
    """``key: value`` lines of a /proc file, the first of each key; {} where it cannot be read."""
    out = {}
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        if line.count(":") == 1:
            k, v = (x.strip() for x in line.split(":"))
            out.setdefault(k, v)
    return out


def proc_bytes(path: str, key: str) -> int | None:
    """A ``key: N kB`` field of a /proc file in bytes; None where it is missing or unreadable."""
    kib = proc_fields(path).get(key, "").split()
    return int(kib[0]) * 1024 if kib and kib[0].isdigit() else None
