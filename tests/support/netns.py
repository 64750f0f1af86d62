"""Machines that are really apart, on one host: network namespaces joined by a bridge.

``Network(names)`` (a context manager) makes one network namespace per name, each with its own
address on a private /24, joined through a veth pair each to a bridge of its own, which also gives
the test's own namespace an address there (so a Prometheus in it can scrape the others). Every
name it makes is unique to it; it removes what it made whatever happens (the namespaces, with them
their veth ends and whatever still runs there is cut off; the bridge). ``run_in(name, ...)``
starts a process inside one; ``listeners(name)`` is what listens there (``ss -ltnp``).

It needs ``ip`` (iproute2) and the right to make namespaces (root, or CAP_SYS_ADMIN and
CAP_NET_ADMIN): ``available()`` says why not, for a skip.
"""
from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field


def _ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + ["ip", *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=30)


def available() -> str | None:
    """None where namespaces can be made here, else why not."""
    if shutil.which("ip") is None or shutil.which("ss") is None:
        return "iproute2 (ip, ss) is not installed"
    probe = f"ckemu-probe-{uuid.uuid4().hex[:6]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot make a network namespace here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of 10.0.0.0/8 that no address or route of this host's namespace overlaps."""
    taken = subprocess.run(["ip", "-o", "route", "show", "table", "all"], capture_output=True, text=True).stdout
    taken += subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout
    for _ in range(200):
        net = ipaddress.ip_network(f"10.{int.from_bytes(os.urandom(1), 'big')}.{int.from_bytes(os.urandom(1), 'big')}.0/24")
        if f"{net.network_address}".rsplit(".", 1)[0] + "." not in taken:
            return net
    raise RuntimeError("no free /24 in 10.0.0.0/8 for the test network")


@dataclass
class Network:
    names: list[str]
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    addrs: dict = field(default_factory=dict)  # name -> its address
    host_addr: str = ""  # this (the test's) namespace's address on the bridge
    _made: list = field(default_factory=list)

    def ns(self, name: str) -> str:
        return f"ckemu-{self.tag}-{name}"

    def __enter__(self) -> Network:
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _build(self) -> None:
        net = _free_subnet()
        hosts = list(net.hosts())
        bridge = f"ckbr{self.tag}"
        _ip("link", "add", bridge, "type", "bridge")
        self._made.append(("link", bridge))
        self.host_addr = str(hosts[-1])
        _ip("addr", "add", f"{self.host_addr}/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        for i, name in enumerate(self.names):
            ns, outer, inner = self.ns(name), f"ckv{self.tag}{i}", f"ckn{self.tag}{i}"
            subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True)
            self._made.append(("netns", ns))
            _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            self._made.append(("link", outer))
            _ip("link", "set", inner, "netns", ns)
            _ip("link", "set", outer, "master", bridge)
            _ip("link", "set", outer, "up")
            self.addrs[name] = str(hosts[i])
            _ip("addr", "add", f"{hosts[i]}/24", "dev", inner, ns=ns)
            _ip("link", "set", inner, "up", ns=ns)
            _ip("link", "set", "lo", "up", ns=ns)

    def close(self) -> None:
        """Remove what was made, newest first; each removal is tried whatever the others did."""
        for kind, name in reversed(self._made):
            if kind == "netns":
                self._kill_inside(name)
                subprocess.run(["ip", "netns", "del", name], capture_output=True)
            else:
                subprocess.run(["ip", "link", "del", name], capture_output=True)
        self._made.clear()

    @staticmethod
    def _kill_inside(ns: str) -> None:
        """End what still runs in the namespace (a test's process it could not stop)."""
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), 9)
            except (OSError, ValueError):
                pass

    def popen(self, name: str, cmd: list[str], **kwargs) -> subprocess.Popen:
        """``cmd`` started inside namespace ``name``."""
        return subprocess.Popen(["ip", "netns", "exec", self.ns(name), *cmd], **kwargs)

    def listeners(self, name: str) -> set[tuple[str, str]]:
        """(local address:port, process) of every TCP socket listening in namespace ``name``."""
        out = subprocess.run(["ip", "netns", "exec", self.ns(name), "ss", "-ltnpH"], capture_output=True,
                             text=True, timeout=30).stdout
        found = set()
        for line in out.splitlines():
            parts = line.split()
            if len(parts) >= 4:
                found.add((parts[3], " ".join(parts[5:])))
        return found
