"""The soak mode (``ckpt-emu run --soak DURATION``): a proof of concept's hours of async checkpoints.

Only the async mode runs, for the whole duration (no baseline, no sync). The failures the run is
given come on a schedule and the run survives each, as a job restarted by its scheduler would: a
local-tier loss or a node loss every N checkpoints (``failures.lose_local_after``,
``failures.lose_nodes``: emulator/checkpoint/node_loss.py), a global outage every N checkpoints
(``failures.global_fault``). After a node failure every rank restores the newest checkpoint from
what survived (the recovery measured, kept for the report and served as ``ckpt_emu_recovery_seconds``),
and training goes on from it. After every checkpoint each rank notes what a soak must keep flat:
its resident memory, and (node leaders) the files its node's tiers hold; the report compares the
soak's last samples with its first ones once it is warm: every tier holding as many checkpoints as it
keeps, and its first recovery over (``warm_checkpoints``: a restore's buffers are allocated once).
"""
from __future__ import annotations

import os
import time

from emulator.checkpoint.layout import MANIFEST, step_of
from emulator.host import proc_bytes
from emulator.rank.training import MAX_EVENTS
from tiers.base import unwrap

#: samples kept between the first and the last (a soak of hours must not grow its results)
MAX_SAMPLES = 240


class Soak:
    """The soak's loop over a rank's ``RankRun`` (``run``): train, fail, recover, train on."""

    def __init__(self, run, duration_s: float):
        self.run, self.duration_s = run, duration_s
        self.warm = 1  # after this many checkpoints every tier holds what it keeps (train() knows)
        self.samples: list[dict] = []  # after each checkpoint: {checkpoints, time, rss_bytes, files}
        self._seen = 0

    def train(self, loop, step: int) -> int:
        """The async mode for the soak's duration, a recovery after each failure due; the next step."""
        run = self.run
        self.keep_warm = max(run.schedule.keep.values(), default=1) + 1  # and one more in flight
        self.warm = self.keep_warm
        start = time.time()
        deadline = start + self.duration_s
        spans = []
        loop.after_checkpoint = self.sample
        loop.progress_span = (start, self.duration_s)  # the soak's, across its recoveries
        while True:
            step, span = loop.run("async", step, max(0.0, deadline - time.time()))
            spans.append(span)
            over = run.comm.all_max(1.0 if time.time() >= deadline else 0.0) > 0  # every rank's same decision
            if over or not run.node_failed or run._stop_requested():
                break
            run.last_step = step - 1
            survive(run)
            if self.warm <= self.keep_warm:  # warm once the first recovery is over too
                self.warm = len(run.ckpt.records) + self.keep_warm
        run.node_loss.due = None  # the soak is over: a failure that came due with its end never comes
        run.modes["async"] = merged(spans)
        return step

    def sample(self, checkpoints: int) -> None:
        """After a checkpoint: this rank's resident memory and (node leaders) its node's tier files;
        the first sample, then at most MAX_SAMPLES more spread over the soak, the newest always last."""
        self._seen += 1
        point = {"checkpoints": checkpoints, "time": time.time(),
                 "rss_bytes": proc_bytes("/proc/self/status", "VmRSS") or 0,
                 "files": tier_files(self.run.node_tiers + [("global", self.run.global_)])
                 if self.run.comm.is_node_leader else {}}
        self.run.metrics.set_soak_sample("async", point["rss_bytes"], point["files"])
        if len(self.samples) > MAX_SAMPLES:  # every other one but the warm one: spread over the whole soak
            keep = [p for p in self.samples if p["checkpoints"] <= self.warm]
            self.samples = keep + self.samples[len(keep) + 1::2]
        self.samples.append(point)

    def describe(self) -> dict:
        return {"duration_s": self.duration_s, "warm_checkpoints": self.warm, "samples": self.samples}


def survive(run) -> None:
    """A failure that came due: what it loses, the recovery from what survived (after a local loss
    too, as a restarted job restores), the state at the restored step; training goes on."""
    run._lose_nodes(recover_local=True)
    if run.comm.node in run.node_loss.nodes:
        run.ckpt.forget_node_steps()  # what its lost tiers held is gone; retention lists them anew
    rec = run.recoveries[-1]["load"]
    if rec["ok"]:
        lineage = run.ckpt.lineage(run.last_step)
        run.ckpt.continue_lineage(first_step=run.last_step + 1,
                                  base=[[a, min(b, rec["step"])] for a, b in lineage if a <= rec["step"]])
    run.node_loss.recovered()


def tier_files(tiers: list) -> dict:
    """Files each directory tier holds at rest: every file but those of checkpoints in flight (step
    folders newer than the tier's newest complete one: the next checkpoint, not a leak). Garbage of
    an older step and strays outside step folders count. A tier without a folder, an object store,
    is left out: listing it would be requests of its own."""
    out = {}
    for name, tier in tiers:
        root = getattr(unwrap(tier), "root", None) if tier is not None else None
        if root is not None:
            out[name] = _files_at_rest(str(root))
    return out


def _files_at_rest(root: str) -> int:
    per_step: dict = {}  # step (None: outside step folders) -> [files, complete]
    for folder, _, files in os.walk(root):
        step = step_of(os.path.relpath(folder, root) + "/")
        entry = per_step.setdefault(step, [0, False])
        entry[0] += len(files)
        entry[1] = entry[1] or (step is not None and MANIFEST in files)
    newest = max((s for s, (_, done) in per_step.items() if done), default=-1)
    return sum(n for s, (n, _) in per_step.items() if s is None or s <= newest)


def merged(spans: list[dict]) -> dict:
    """The soak's segments (training between failures) as one span of the mode: from the first start
    to the last end, their recoveries inside it, as a job's wall time has them."""
    first, last = spans[0], spans[-1]
    return {"start": first["start"], "train_end": last["train_end"], "end": last["end"],
            "steps": sum(s["steps"] for s in spans), "flush_s": sum(s["flush_s"] for s in spans),
            "compute": [c for s in spans for c in s["compute"]][-MAX_EVENTS:],
            "at_risk": last["at_risk"], "update_cpu_s": sum(s["update_cpu_s"] for s in spans),
            "segments": len(spans)}
