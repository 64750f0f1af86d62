"""The run's clock: wall seconds here per second of the full-size design (docs/time-dilation.md).

A run moves ``run.scale`` of the design's bytes at its rates / D (``run.dilation``), so every paced
second here is a design second x the time factor k = scale x D. The design never sees the clock, as
SimPy's rt.py runs a model on wall-clock time without the model knowing: the pacing applies it
(:meth:`Clock.paced`: each rate / D, each latency x k), and so do the training's steps and the
snapshot; the results divide by it. D is decided by the ranks' probe where it is ``auto``
(emulator/rank/dilation.py): until then the clock runs at D = 1.
"""
from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Clock:
    """``scale``: the run's bytes factor (run.scale); ``dilation``: D, every rate paced at / D."""

    scale: float = 1.0
    dilation: float = 1.0

    @classmethod
    def of(cls, run) -> "Clock":
        """The clock of a config's ``run:`` section (D = 1 while ``auto`` is not yet decided)."""
        return cls(run.scale, run.dilation.factor or 1.0)

    def at(self, dilation: float) -> "Clock":
        """This clock at dilation D."""
        return replace(self, dilation=dilation)

    @property
    def time_factor(self) -> float:
        """Wall seconds here per second of the full-size design: scale x D."""
        return self.scale * self.dilation

    def wall(self, design_seconds: float) -> float:
        """A paced span of the design (a step, a latency) as it lasts here."""
        return design_seconds * self.time_factor

    def paced(self, emulate):
        """A tier's ``emulate`` (the design's, for this node) as this run paces it: every rate / D, every
        latency x the time factor, request ceilings per second in this run's time."""
        if emulate is None:
            return None
        d, k = self.dilation, self.time_factor
        rate = lambda v: None if v is None else v / d  # noqa: E731
        per_s = lambda v: None if v is None else v / k  # noqa: E731 - requests per second, in this run's time
        return replace(emulate, write_gib_s=rate(emulate.write_gib_s), read_gib_s=rate(emulate.read_gib_s),
                       nic_gib_s=rate(emulate.nic_gib_s), latency_ms=emulate.latency_ms * k,
                       jitter_ms=emulate.jitter_ms * k, put_per_s_per_prefix=per_s(emulate.put_per_s_per_prefix),
                       get_per_s_per_prefix=per_s(emulate.get_per_s_per_prefix))

    def snapshot_seconds(self, snapshot, nbytes: int) -> float | None:
        """A rank's snapshot of ``nbytes`` (at the run's scale) as the design's ``snapshot`` paces it
        here: its bytes at the copy rate / D, its other parts (emulator/design/snapshot.py) x the time
        factor; None without one."""
        if snapshot is None:
            return None
        return snapshot.scaled(1 / self.dilation, self.time_factor).seconds(nbytes)
