"""The ``design:`` config section: a storage design in the terms an architect uses.

    design:
      job: {nodes: 2048, accelerators_per_node: 8}
      node:
        memory: {capacity: 512GiB, write: 20GB/s, read: 20GB/s}
        local: {write: 7GB/s, read: 7GB/s, capacity: 3.84TB, latency_ms: 0.1, duplex: false}
        nic: 400Gb/s
        fabric: 3.2Tb/s                            # optional: the compute fabric peer copies use
        snapshot: {staging: pinned, fixed_ms: 140} # per accelerator: device-to-host (or host) copy
      global: {write: 400GB/s, read: 400GB/s, latency_ms: 1}
      failures:
        mttf_hours: 50000                          # per accelerator
        node_loss_fraction: 0.78                   # the rest are process crashes, but for
        group_loss_fraction: 0.01                  # ... whole replica groups lost at once
        process: {detect: 30s, restart: 150s}      # per class: detection, restart or replacement
        node: {detect: 60s, restart: 540s}
        group: {detect: 60s, restart: 840s}

Rates and sizes take the units vendors quote (emulator/units.py): bytes or
bits, decimal or binary prefixes; a bare number is refused as ambiguous. The
local device is the node's: its ranks share it, and its reads (a drain) and
writes (the next checkpoint) share it unless ``duplex``. The global storage's
rates are the aggregate of the whole job; each node reaches it through its NIC
(emulator/design/links.py). The node's host memory (the memory tier) is the
share of it a checkpoint may use, and the rate a copy into it runs at; a peer
copy travels over the node's NIC, or over its compute fabric where the design
states one (``fabric``: the accelerators' scale-out network, e.g. 8 x 400 Gb/s
InfiniBand, which the storage traffic does not use). The snapshot is each accelerator's copy of
its state to host memory (device-to-host on a GPU). ``failures`` is the failure
model (emulator/design/failures.py). The spec keeps the user's text, so a config
written back (results.json, ``tune``'s runs) reads the same.
"""
from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Optional

from emulator.errors import ConfigError, UserError
from emulator.units import parse_duration, parse_rate, parse_size

#: the NIC when the design names none: a 400 Gb/s link, as on current H100/H200 nodes; always stated
DEFAULT_NIC = "400Gb/s"
#: each accelerator's copy of its state to host memory without a design's figure: device-to-host
#: into reused pinned buffers on one H100, measured at 48.6 GiB/s (the project's measurement notes)
DEFAULT_SNAPSHOT = "48GiB/s"
#: the copy rate of each kind of staging buffer, one H100, measured (the project's measurement notes):
#: reused pinned buffers; reused pageable ones (a shared-memory segment CUDA did not register); fresh
#: host memory each time (``.cpu()``, DCP's stager without a cache)
STAGING_RATES = {"pinned": DEFAULT_SNAPSHOT, "pageable": "8.8GiB/s", "fresh": "0.9GiB/s"}
_SECTIONS = {"job": ("nodes", "accelerators_per_node"), "node": ("memory", "local", "nic", "fabric", "snapshot"),
             "global": ("write", "read", "latency_ms"),
             "failures": ("mttf_hours", "node_loss_fraction", "group_loss_fraction", "process", "node", "group")}
_SNAPSHOT = ("rate", "staging", "fixed_ms", "per_tensor_us", "pin_rate", "plan_hop_ms", "plan_item_us")
_RECOVERY = ("detect", "restart")
_LOCAL = ("write", "read", "capacity", "latency_ms", "duplex")
_MEMORY = ("capacity", "write", "read")


@dataclass(frozen=True)
class HostMemory:
    capacity_bytes: int               # what the memory tier may hold (its own and peers' copies)
    write_bps: float
    read_bps: float


@dataclass(frozen=True)
class LocalDevice:
    write_bps: float
    read_bps: float
    capacity_bytes: Optional[int] = None
    latency_s: float = 0.0
    duplex: bool = False              # reads and writes share the device unless it says otherwise


@dataclass(frozen=True)
class GlobalStorage:
    write_bps: float
    read_bps: float
    latency_s: float = 0.0


@dataclass(frozen=True)
class Snapshot:
    """What the design says of the snapshot (emulator/design/snapshot.py): None where it says nothing
    (the model's default is used, and reports say so)."""

    rate_bps: float                   # per accelerator: as given, else the staging's (STAGING_RATES)
    fixed_s: Optional[float] = None   # per checkpoint, whatever its bytes
    stated: bool = False              # False: the rate is the staging's assumed default (reports say so)
    staging: str = "pinned"           # the staging buffers: pinned, pageable or fresh
    per_tensor_s: Optional[float] = None
    pin_bps: Optional[float] = None   # the first save's pinning of its buffers (inf: none)
    plan_hop_s: Optional[float] = None
    plan_item_s: Optional[float] = None


@dataclass(frozen=True)
class FailuresSpec:
    mttf_hours: Optional[float] = None
    node_loss_fraction: Optional[float] = None
    group_loss_fraction: Optional[float] = None
    recovery: Optional[dict] = None   # class -> (detect_s, restart_s), for the classes given


@dataclass(frozen=True)
class DesignSpec:
    """A design: the modelled job, one node's local device and NIC, the shared global storage."""

    nodes: Optional[int]              # None: the preset's ranks / accelerators_per_node
    accelerators_per_node: int
    local: Optional[LocalDevice]
    memory: Optional[HostMemory]
    nic_bps: float
    nic_stated: bool                  # False: DEFAULT_NIC was assumed (reports say so)
    global_: Optional[GlobalStorage]
    text: dict                        # the section as the user wrote it
    snapshot: Snapshot = None
    failures: Optional[FailuresSpec] = None
    fabric_bps: Optional[float] = None  # the compute fabric peer copies use (None: they use the NIC)

    def job_nodes(self, world_size: int) -> int:
        """The modelled job's nodes: as given, else the preset's ranks over accelerators per node."""
        return self.nodes if self.nodes is not None else max(1, -(-world_size // self.accelerators_per_node))


def _mapping(value, key: str, known: tuple) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__}")
    for k in value:
        if k not in known:
            raise ConfigError(f"{key}.{k}: unknown key (known: {', '.join(known)})")
    return value


def _user(fn, value, key: str):
    try:
        return fn(value, key)
    except UserError as exc:
        raise ConfigError(str(exc)) from None


def _count(value, key: str, default=None) -> Optional[int]:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{key}: must be a whole number >= 1, got {value!r}")
    return value


def _flag(value, key: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    return value


def _latency(value, key: str) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise ConfigError(f"{key}: must be a finite number of milliseconds >= 0, got {value!r}")
    return value / 1000


def _local(d: dict) -> Optional[LocalDevice]:
    d = _mapping(d, "design.node.local", _LOCAL)
    if not d:
        return None
    for k in ("write", "read"):
        if k not in d:
            raise ConfigError(f"design.node.local.{k}: needed (the device's {k} rate, e.g. 7GB/s)")
    cap = d.get("capacity")
    return LocalDevice(_user(parse_rate, d["write"], "design.node.local.write"),
                       _user(parse_rate, d["read"], "design.node.local.read"),
                       _user(parse_size, cap, "design.node.local.capacity") if cap is not None else None,
                       _latency(d.get("latency_ms"), "design.node.local.latency_ms"),
                       _flag(d.get("duplex", False), "design.node.local.duplex"))


def _memory(d: dict) -> Optional[HostMemory]:
    d = _mapping(d, "design.node.memory", _MEMORY)
    if not d:
        return None
    for k, what in (("capacity", "the host memory checkpoints may use, e.g. 512GiB"),
                    ("write", "the rate of a copy into it, e.g. 20GB/s")):
        if k not in d:
            raise ConfigError(f"design.node.memory.{k}: needed ({what})")
    write = _user(parse_rate, d["write"], "design.node.memory.write")
    return HostMemory(_user(parse_size, d["capacity"], "design.node.memory.capacity"), write,
                      _user(parse_rate, d["read"], "design.node.memory.read") if "read" in d else write)


def _global(d: dict) -> Optional[GlobalStorage]:
    d = _mapping(d, "design.global", _SECTIONS["global"])
    if not d:
        return None
    if "write" not in d:
        raise ConfigError("design.global.write: needed (the job's aggregate write bandwidth, e.g. 400GB/s)")
    write = _user(parse_rate, d["write"], "design.global.write")
    read = _user(parse_rate, d["read"], "design.global.read") if "read" in d else write
    return GlobalStorage(write, read, _latency(d.get("latency_ms"), "design.global.latency_ms"))


def _snapshot(d) -> Snapshot:
    d = _mapping(d, "design.node.snapshot", _SNAPSHOT)
    staging = d.get("staging", "pinned")
    if staging not in STAGING_RATES:
        raise ConfigError(f"design.node.snapshot.staging: must be {', '.join(STAGING_RATES)}, got {staging!r}")
    rate = _user(parse_rate, d.get("rate", STAGING_RATES[staging]), "design.node.snapshot.rate")
    pin = d.get("pin_rate")
    pin_bps = None if pin is None else math.inf if pin == "none" else \
        _user(parse_rate, pin, "design.node.snapshot.pin_rate")

    def seconds(key: str, unit: float):  # fixed_ms, per_tensor_us, ...: a finite number >= 0 of its unit
        value = d.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
            raise ConfigError(f"design.node.snapshot.{key}: must be a finite number >= 0, got {value!r}")
        return value * unit
    return Snapshot(rate, seconds("fixed_ms", 1e-3), "rate" in d, staging, seconds("per_tensor_us", 1e-6),
                    pin_bps, seconds("plan_hop_ms", 1e-3), seconds("plan_item_us", 1e-6))


def _fraction(value, key: str) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ConfigError(f"{key}: must be a fraction between 0 and 1, got {value!r}")
    return float(value)


def _failures(d) -> Optional[FailuresSpec]:
    d = _mapping(d, "design.failures", _SECTIONS["failures"])
    if not d:
        return None
    mttf = d.get("mttf_hours")
    if mttf is not None and (isinstance(mttf, bool) or not isinstance(mttf, (int, float))
                             or not 0 < mttf < float("inf")):
        raise ConfigError(f"design.failures.mttf_hours: must be a number of hours > 0, got {mttf!r}")
    node = _fraction(d.get("node_loss_fraction"), "design.failures.node_loss_fraction")
    group = _fraction(d.get("group_loss_fraction"), "design.failures.group_loss_fraction")
    if (node or 0) + (group or 0) > 1:
        raise ConfigError("design.failures: node_loss_fraction + group_loss_fraction is above 1")
    recovery = {}
    for cls in ("process", "node", "group"):
        c = _mapping(d.get(cls), f"design.failures.{cls}", _RECOVERY)
        if c:
            for k in _RECOVERY:
                if k not in c:
                    raise ConfigError(f"design.failures.{cls}.{k}: needed (e.g. {cls}: {{detect: 60s, restart: 600s}})")
            recovery[cls] = tuple(_user(lambda v, w: parse_duration(v, w, allow_zero=True), c[k],
                                        f"design.failures.{cls}.{k}") for k in _RECOVERY)
    return FailuresSpec(mttf, node, group, recovery or None)


def parse_design(data, key: str = "design") -> DesignSpec:
    """The ``design:`` mapping -> DesignSpec; ConfigError naming the key on bad input."""
    data = _mapping(data, key, tuple(_SECTIONS))
    job = _mapping(data.get("job"), "design.job", _SECTIONS["job"])
    node = _mapping(data.get("node"), "design.node", _SECTIONS["node"])
    nic = node.get("nic")
    return DesignSpec(
        nodes=_count(job.get("nodes"), "design.job.nodes"),
        accelerators_per_node=_count(job.get("accelerators_per_node"), "design.job.accelerators_per_node", 8),
        local=_local(node.get("local")),
        memory=_memory(node.get("memory")),
        nic_bps=_user(parse_rate, nic if nic is not None else DEFAULT_NIC, "design.node.nic"),
        nic_stated=nic is not None,
        global_=_global(data.get("global")),
        text=dict(data),
        snapshot=_snapshot(node.get("snapshot")),
        failures=_failures(data.get("failures")),
        fabric_bps=_user(parse_rate, node["fabric"], "design.node.fabric") if node.get("fabric") is not None
        else None)
