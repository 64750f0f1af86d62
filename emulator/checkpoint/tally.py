"""Fault counts of one process, for results.json, mirrored into Prometheus where it has the kind."""
from __future__ import annotations

from collections import Counter

from emulator.metrics import FAULT_KINDS


class Tally:
    """Per-process fault counts (results.json) mirrored into Prometheus where it has the kind."""

    def __init__(self, metrics=None):
        self.metrics = metrics
        self.counts: Counter = Counter()

    def count(self, kind: str, n: int = 1) -> None:
        self.counts[kind] += n
        if self.metrics is not None:
            if kind in FAULT_KINDS:
                for _ in range(n):
                    self.metrics.count_fault(kind)
