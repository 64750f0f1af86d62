"""The snapshot: a rank's state copied into its staging buffers (on a GPU, device to host: ``d2h``) by
the run's engine (``dcp`` async: DCP's own staging), held to the design's snapshot where the run paces
it, on the run's clock."""
from __future__ import annotations

import time

from emulator.checkpoint.rank_file import DEFAULT
from emulator.checkpoint.records import CkptRecord, Event
from emulator.checkpoint.schedule import Schedule
from tiers import paced


class Snapshotter:
    """Takes a rank's snapshot for a checkpoint's record (``seconds``: its paced time; None: the host's
    own copy, unpaced)."""

    def __init__(self, ctx, seconds: float | None, engine=None):
        self.ctx, self.seconds, self.engine = ctx, seconds, engine or DEFAULT

    def take(self, rec: CkptRecord) -> None:
        t = time.time()
        staged = self.engine.stage(self.ctx.state, rec, paced=self.seconds is not None,
                                   tier=self.ctx.tier(Schedule.first(rec.due)))
        self._pace(rec, t)
        rec.snapshot_s = time.time() - t
        if staged.device_s > 0:  # a device's copy to host: the part of the stall the report calls d2h
            rec.d2h_s, rec.d2h_bytes = staged.device_s, staged.bytes
            self.ctx.events.append(Event(self.ctx.comm.rank, "d2h", t, t + staged.device_s))

    def _pace(self, rec: CkptRecord, start: float) -> None:
        """Hold the snapshot to the design's copy rate (and fixed cost), as the time factor says."""
        if self.seconds is None:
            return
        paced.record("snapshot", start, start + self.seconds)
        rec.paced["snapshot"] = self.seconds
        left = start + self.seconds - time.time()
        if left > 0:
            time.sleep(left)
