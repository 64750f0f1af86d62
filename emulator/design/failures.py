"""The failure model: one vocabulary of failure classes, their rates, and what recovering costs.

Synchronous training stops when any accelerator fails, so N accelerators of MTTF m fail as one
Poisson process of rate N/m (50,000 h reproduces Llama 3's 419 interruptions in 54 days on
16,384 GPUs). Each failure is of one class, which sets what survives it:

- ``process``: a crash or hang; the job's processes restart on the same nodes, host memory and
  the NVMe survive;
- ``node``: a host is lost and replaced; its memory and NVMe are gone, its peers' copies survive;
- ``group``: a replica group is lost at once (a rack, a switch); only global storage survives.

A class's recovery is detection (a timeout, a heartbeat), then a restart in place or a
replacement (scheduling, container start, communicators, warm-up), then the restore from the
nearest tier that survived it (each rung kind's ``survives``, emulator/design/ladder.py), then the work since that checkpoint.
The times are the design's (``design.failures``); their defaults are assumptions, stated.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, replace

CLASSES = ("process", "node", "group")
HOUR = 3600.0
#: Meta's Llama 3 405B run: 419 unexpected interruptions in 54 days on 16,384 GPUs
DEFAULT_MTTF_HOURS = 50_000.0
#: the share of Llama 3's interruptions attributed to hardware (a host taken out of the job)
DEFAULT_NODE_LOSS_FRACTION = 0.78
#: losing a whole replica group at once: an assumption (the published tables attribute almost all
#: interruptions to single hosts)
DEFAULT_GROUP_LOSS_FRACTION = 0.01
#: (detection, restart or replacement) seconds per class: assumptions, stated in every report. A
#: process restart reuses its nodes (tens of seconds to re-launch and re-initialise communicators,
#: plus warm-up); a node replacement schedules a spare and starts its container; a group, several.
DEFAULT_RECOVERY = {"process": (30.0, 150.0), "node": (60.0, 540.0), "group": (60.0, 840.0)}
#: what the trace files and older configs called the classes
ALIASES = {"restart": "process", "process_restart": "process", "node_loss": "node", "node-loss": "node"}


@dataclass(frozen=True)
class FailureClass:
    """One class: its share of failures, its detection and restart (or replacement) seconds."""

    name: str
    share: float
    detect_s: float
    restart_s: float

    @property
    def before_restore_s(self) -> float:
        """What the class costs before the checkpoint is read: detection, then restart or replacement."""
        return self.detect_s + self.restart_s


@dataclass(frozen=True)
class FailureModel:
    """Failures of a job of ``accelerators``: Poisson at accelerators / MTTF, split by class."""

    accelerators: int
    mttf_hours: float
    classes: tuple

    @property
    def rate_per_s(self) -> float:
        return self.accelerators / (self.mttf_hours * HOUR)

    @property
    def cluster_mttf_s(self) -> float:
        return self.mttf_hours * HOUR / self.accelerators

    def rate(self, name: str) -> float:
        return self.rate_per_s * self.of(name).share

    def rates(self) -> dict:
        return {c.name: self.rate_per_s * c.share for c in self.classes}

    def of(self, name: str) -> FailureClass:
        return next(c for c in self.classes if c.name == name)

    def at_rates(self, rates: dict) -> "FailureModel":
        """The same classes and costs failing at ``rates`` (per second, by class; a trace's)."""
        total = sum(rates.values())
        if total <= 0:
            return self
        classes = tuple(replace(c, share=rates.get(c.name, 0.0) / total) for c in self.classes)
        return FailureModel(self.accelerators, self.accelerators / (total * HOUR), classes)

    def draw(self, rng: random.Random) -> str:
        """A failure's class, drawn by the shares."""
        u, total = rng.random(), 0.0
        for c in self.classes:
            total += c.share
            if u < total:
                return c.name
        return self.classes[0].name


def failure_model(spec, accelerators: int, *, mttf_hours: float | None = None,
                  node_loss_fraction: float | None = None, group_loss_fraction: float | None = None,
                  restart_s: float | dict | None = None) -> FailureModel:
    """The model from ``design.failures`` (``spec``, or None for the defaults), overridden by flags;
    ``restart_s`` replaces every class's restart (a number), or the restarts of the classes it names
    (``{"node": 300.0}``, ``simulate --restart node=5m``); detection stays the design's."""
    def pick(flag, key, default):
        given = getattr(spec, key, None)
        return flag if flag is not None else given if given is not None else default
    mttf = pick(mttf_hours, "mttf_hours", DEFAULT_MTTF_HOURS)
    node = pick(node_loss_fraction, "node_loss_fraction", DEFAULT_NODE_LOSS_FRACTION)
    group = pick(group_loss_fraction, "group_loss_fraction", DEFAULT_GROUP_LOSS_FRACTION)
    recovery = dict(DEFAULT_RECOVERY, **(getattr(spec, "recovery", None) or {}))
    shares = {"process": 1 - node - group, "node": node, "group": group}
    restarts = restart_s if isinstance(restart_s, dict) else \
        {c: restart_s for c in CLASSES} if restart_s is not None else {}
    classes = tuple(FailureClass(c, shares[c], recovery[c][0], restarts.get(c, recovery[c][1])) for c in CLASSES)
    return FailureModel(accelerators, mttf, classes)


def class_of(kind: str | None) -> str | None:
    """A trace's kind in the one vocabulary (``restart`` -> ``process``); None stays None (drawn)."""
    if kind is None:
        return None
    kind = ALIASES.get(kind.lower(), kind.lower())
    return kind if kind in CLASSES else None
