"""A design as JSON and back, losslessly: the ``design.json`` a run's launcher writes beside its
``config.json`` and its ranks read.

Each of the design's dataclasses is an object with its ``_type``; tuples are lists (read back as
tuples: the design holds no list), an infinite rate is the string ``"inf"`` (JSON has no
infinity), and every float is written as Python reads it back, bit for bit.
"""
from __future__ import annotations

import dataclasses
import math

from emulator.config import ParallelismConfig
from emulator.design.emulation import Emulation, NodePacing
from emulator.design.failures import FailureClass, FailureModel
from emulator.design.job import Job, NodeGroup
from emulator.design.ladder import Rung
from emulator.design.links import LinkLimits, NodeLinks, TierLinks
from emulator.design.model import Design, Snapshot
from emulator.design.requests import Store
from tiers.emulated import EmulateOptions
from tiers.s3_limits import RequestWeights

#: every type a design holds, by the name its objects carry
TYPES = {t.__name__: t for t in (Design, Job, NodeGroup, ParallelismConfig, NodeLinks, TierLinks, LinkLimits,
                                 FailureModel, FailureClass, Snapshot, Rung, Emulation, NodePacing, EmulateOptions,
                                 Store, RequestWeights)}
_INFINITE = {"inf": math.inf, "-inf": -math.inf}


def to_json(value):
    """``value`` (a :class:`Design`, or any part of one) as plain JSON values."""
    if dataclasses.is_dataclass(value):
        if type(value).__name__ not in TYPES:
            raise TypeError(f"a design holds no {type(value).__name__}")
        return {"_type": type(value).__name__,
                **{f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    if isinstance(value, (tuple, list)):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def from_json(value):
    """What :func:`to_json` wrote, as it was."""
    if isinstance(value, dict):
        kind = value.get("_type")
        fields = {k: from_json(v) for k, v in value.items() if k != "_type"}
        return TYPES[kind](**fields) if kind is not None else fields
    if isinstance(value, list):
        return tuple(from_json(v) for v in value)
    if isinstance(value, str) and value in _INFINITE:
        return _INFINITE[value]
    return value
