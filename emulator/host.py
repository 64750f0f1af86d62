"""What this host says of itself: ``key: value`` files of /proc (meminfo, cpuinfo, a process's status),
and its network interfaces' addresses.

One reader for the places that ask: the memory tier's check against the available memory
(launch), a rank's peak RSS, the host description MLPerf's DLIO folder keeps, and the interface a
node's address is on (gloo binds an interface's address: launch).
"""
from __future__ import annotations

import fcntl
import socket
import struct
from pathlib import Path

#: ioctl: an interface's (first) IPv4 address
_SIOCGIFADDR = 0x8915


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


def interface_of(addr: str) -> str | None:
    """The network interface whose IPv4 address (its first: the one the kernel gives for it) is
    ``addr``; None where no interface has it first."""
    for _, name in socket.if_nameindex():
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                packed = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, struct.pack("256s", name[:15].encode()))
        except OSError:  # no IPv4 address
            continue
        if socket.inet_ntoa(packed[20:24]) == addr:
            return name
    return None
