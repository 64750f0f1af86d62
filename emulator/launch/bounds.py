"""What a run may ask of this host and its network, checked before anything is launched or written.

- node counts: ``--nnodes`` and ``--nproc-per-node`` of at least 1;
- ranks on this host: at most ``limits.ranks_per_cpu`` x its CPUs (never fewer than 8);
- host memory, for every run: the ranks' state and staging copies, their processes, what the
  memory tier and any tier on tmpfs will hold, against the host's available memory, or what the
  memory cgroup of this process (a container's limit, v2 or v1) leaves, when that is less;
- addresses: the rendezvous endpoint is HOST:PORT with a host that resolves; the metrics endpoint
  is an address of this host, with ports that exist and are free; a node's own address
  (``--node-addr``) is an IPv4 address of this host, the first of its interface.

Each failure is one ``UserError`` line naming the flag or key (docs/security.md#limits).
"""
from __future__ import annotations

import errno
import ipaddress
import os
import socket
from pathlib import Path

from emulator.design import ladder, run_emulation
from emulator.errors import UserError, shown
from emulator.host import interface_of, proc_bytes
from emulator.units import GIB
from tiers.directory import DirOptions
from tiers.fileops import fs_type
from tiers.safepath import check_reach

#: a rank's process beyond its state (Python, torch, gloo): 0.28-0.38 GiB peak RSS measured (README)
RANK_PROCESS_BYTES = 256 << 20
#: where this process's cgroups are listed and mounted (tests point these elsewhere)
PROC_CGROUP, CGROUP_ROOT = Path("/proc/self/cgroup"), Path("/sys/fs/cgroup")
#: a cgroup v1 memory limit at or above this is "no limit" (the kernel's 9223372036854771712)
_V1_UNLIMITED = 1 << 62


def check_node_counts(nnodes: int, nproc_per_node: int | None) -> None:
    if nnodes < 1:
        raise UserError(f"--nnodes {nnodes}: must be 1 or more")
    if nproc_per_node is not None and nproc_per_node < 1:
        raise UserError(f"--nproc-per-node {nproc_per_node}: must be 1 or more")


def check_ranks_per_host(cfg, nproc: int) -> None:
    cpus = os.cpu_count() or 1
    most = cfg.limits.ranks_per_host(cpus)
    if nproc > most:
        raise UserError(f"{nproc} ranks on this host of {cpus} CPU(s): more than limits.ranks_per_cpu "
                        f"({cfg.limits.ranks_per_cpu:g} per CPU, at least 8) allows ({most}); raise it "
                        "(--set limits.ranks_per_cpu=N) to run them anyway")


def parse_endpoint(text: str, what: str = "--rdzv-endpoint") -> tuple[str, int]:
    """HOST:PORT (an IPv6 host in brackets) with a port from 1 to 65535 and a host that resolves."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"{what} {shown(text)}: expected HOST:PORT with a port from 1 to 65535")
    _resolve(host, int(port), f"{what} {shown(text)}")
    return host, int(port)


def check_node_addr(addr: str | None, rdzv_endpoint: str | None) -> str | None:
    """``--node-addr``: for a node of a job with a rendezvous endpoint, an IPv4 address that is the
    first of one of this host's interfaces (gloo listens on an interface's first address); returns
    that interface (None without an address)."""
    if addr is None:
        return None
    if not rdzv_endpoint:
        raise UserError(f"--node-addr {shown(addr)}: a node's address in a multi-node job: give --rdzv-endpoint too")
    try:
        ipaddress.IPv4Address(addr)
    except ValueError:
        raise UserError(f"--node-addr {shown(addr)}: expected an IPv4 address of this host") from None
    iface = interface_of(addr)
    if iface is None:
        raise UserError(f"--node-addr {addr}: not the (first) IPv4 address of any of this host's interfaces")
    return iface


def _resolve(host: str, port: int, where: str) -> list:
    try:
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, ValueError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        raise UserError(f"{where}: cannot resolve {shown(host)} ({why})") from None


def check_metrics(cfg, nnodes: int, node_rank: int | None) -> None:
    """``metrics.addr`` is an address of this host and the node's port (``port + node``) is free;
    every node's port exists. Checked by binding it for a moment."""
    port = cfg.metrics.port
    if port is None:
        return
    if port + nnodes - 1 > 65535:
        raise UserError(f"metrics.port {port}: node {nnodes - 1} would serve on port {port + nnodes - 1}, "
                        "past 65535")
    addr = cfg.metrics.addr
    mine = port + (node_rank or 0)
    family, kind, proto, _, address = _resolve(addr, mine, f"metrics.addr {shown(addr)}")[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise UserError(f"metrics.port {mine}: in use on {addr} (another run or server)") from None
            if exc.errno == errno.EADDRNOTAVAIL:
                raise UserError(f"metrics.addr {shown(addr)}: not an address of this host") from None
            raise UserError(f"metrics {addr}:{mine}: cannot listen there ({exc.strerror})") from None


def _on_tmpfs(options) -> bool:
    """Whether a dir tier's folder (node 0's, or the deepest folder on its way that exists) is on tmpfs."""
    if not isinstance(options, DirOptions):
        return False
    try:
        there, _ = check_reach(Path(options.for_node(0)).expanduser())
        return fs_type(os.stat(there).st_dev) == "tmpfs"
    except Exception:  # noqa: BLE001 - the tier's own preflight says what is wrong with it
        return False


def _read_int(path: Path, key: str | None = None) -> int | None:
    """The number in ``path`` (a cgroup file), or the value of its line ``key N``; None if none."""
    try:
        text = path.read_text()
    except OSError:
        return None
    if key is not None:
        text = next((line.split()[1] for line in text.splitlines() if line.startswith(key + " ")), "")
    text = text.strip()
    return int(text) if text.isdigit() else None


def cgroup_memory(proc_cgroup: Path | None = None, root: Path | None = None) -> tuple[int, int] | None:
    """(limit, what it leaves free) of the tightest memory cgroup this process is in, from its own
    folder up to the hierarchy's root, v2 (``memory.max``) or v1 (``memory.limit_in_bytes``); None
    where no limit is set. What is left counts the cgroup's inactive file cache as free (the
    kernel reclaims it first), as MemAvailable does."""
    proc_cgroup, root = proc_cgroup or PROC_CGROUP, root or CGROUP_ROOT
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    best = None
    for line in lines:
        ident, _, rest = line.partition(":")
        controllers, _, where = rest.partition(":")
        if ident == "0" and controllers == "":  # v2: the unified hierarchy
            mount = root if (root / "cgroup.controllers").exists() else root / "unified"
            files = ("memory.max", "memory.current", "inactive_file")
        elif "memory" in controllers.split(","):  # v1
            mount, files = root / "memory", ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
        else:
            continue
        folder = mount / where.lstrip("/")
        while True:
            limit = _read_int(folder / files[0])
            if limit is not None and limit < _V1_UNLIMITED:
                used = (_read_int(folder / files[1]) or 0) - (_read_int(folder / "memory.stat", files[2]) or 0)
                left = max(0, limit - max(0, used))
                if best is None or left < best[1]:
                    best = (limit, left)
            if folder == mount or mount not in folder.parents:
                break
            folder = folder.parent
    return best


def check_host_memory(cfg, node_bytes: float, nproc: int, copies: int) -> None:
    """Every run: the host's available memory (or what this process's memory cgroup leaves, when
    less: a container's limit) holds the ranks' state and staging copy, their processes, the
    memory tier (its capacity, or keep + 1 of its checkpoints and its peers') and the
    checkpoints kept on any other tier on tmpfs."""
    free = proc_bytes("/proc/meminfo", "MemAvailable")
    limited = cgroup_memory()
    where = "this host's"
    if limited is not None and (free is None or limited[1] < free):
        free, where = limited[1], f"this process's memory cgroup's (limit {limited[0] / GIB:.1f} GiB)"
    if free is None:
        return
    state = 2 * node_bytes  # every rank's live state and its staging copy
    parts = {f"{nproc} ranks' state and staging": state, "their processes": nproc * RANK_PROCESS_BYTES}
    memory = cfg.tiers.memory
    if memory is not None:
        emulate = run_emulation(cfg, "memory")  # the design's memory tier, or the config's knobs
        capacity = emulate.capacity_gib * GIB if emulate is not None and emulate.capacity_gib else None
        if capacity is not None and capacity + state > free:
            raise UserError(f"tiers.memory: a capacity of {capacity / GIB:.1f} GiB (plus {state / GIB:.1f} GiB of "
                            f"state and staging) exceeds {where} {free / GIB:.1f} GiB of available memory")
        parts["the memory tier (keep + 1, peer copies included)"] = \
            node_bytes * cfg.tiers.host_memory_copies(cfg.checkpoint.keep)
    on_tmpfs = [n for n in ladder.lasting_file_tiers()
                if cfg.tiers.entry(n) is not None and _on_tmpfs(cfg.tiers.entry(n).options)]
    if on_tmpfs:
        parts[f"tiers on tmpfs ({', '.join(on_tmpfs)})"] = node_bytes * copies * len(on_tmpfs)
    need = sum(parts.values())
    if need > free:
        said = ", ".join(f"{k} {v / GIB:.1f} GiB" for k, v in parts.items())
        raise UserError(f"this run needs about {need / GIB:.1f} GiB of host memory ({said}), more than "
                        f"{where} {free / GIB:.1f} GiB available; lower --scale or run fewer ranks")
