"""The training loop of one mode: emulated steps, the per-step all-reduce, a checkpoint every N steps.

A step is the optimizer's update of the state (``RankState.mutate``, inside
the step's time) plus emulated compute for the rest of ``step_seconds``:
``sleep`` (GPU work leaves the host CPU free) or ``cpu`` (burn a core, to
study interference). Every step ends with an all-reduce, like a real
data-parallel step, which also carries the stop flag (Ctrl-C, the time
budget, the step count, a node failure), so every rank stops at the same step.
"""
from __future__ import annotations

import json
import os
import time
from collections import deque

from . import outdir

MAX_EVENTS = 4000  # timeline events kept per rank and kind of source


def compute(seconds: float, kind: str) -> None:
    if seconds <= 0:
        return
    if kind == "sleep":
        time.sleep(seconds)
        return
    end = time.perf_counter() + seconds  # "cpu": keep one core busy, to study interference
    x = 1.0001
    while time.perf_counter() < end:
        for _ in range(2000):
            x = x * 1.0000001 % 7.0


class ModeLoop:
    """Trains one mode on a rank; ``run`` returns the next step and the mode's span for the report."""

    def __init__(self, cfg, state, ckpt, comm, metrics, out: outdir.OutDir, node_failure):
        self.cfg, self.state, self.ckpt, self.comm = cfg, state, ckpt, comm
        self.metrics, self.out, self.node_failure = metrics, out, node_failure

    def _should_stop(self, mode_start: float, budget: float | None, step_in_mode: int) -> bool:
        if self.node_failure.happened(len(self.ckpt.records)):
            return True  # every rank counts the same checkpoints: a consistent decision
        stop = 0.0
        if self.comm.rank == 0:
            stop = float((self.out / outdir.STOP).exists()
                         or (budget is not None and time.time() - mode_start >= budget)
                         or (budget is None and step_in_mode >= self.cfg.steps_per_mode))
        return self.comm.all_max(stop) > 0  # the per-step all-reduce of data-parallel training

    def run(self, mode: str, first_step: int, budget: float | None) -> tuple[int, dict]:
        cfg, m = self.cfg, self.metrics
        interval = cfg.checkpoint.interval_steps
        m.set_interval(mode, interval * cfg.training.step_seconds)
        self.comm.barrier()
        start = last = time.time()  # training seconds are added per step so rate() works live
        step, n = first_step, 0
        compute_events = deque(maxlen=MAX_EVENTS)  # bounded: soak runs must not grow
        while not self._should_stop(start, budget, n):
            t = time.time()
            self.state.mutate(step)  # the optimizer update: part of the step's time, not added to it
            compute(cfg.training.step_seconds - (time.time() - t), cfg.training.compute)
            t_end = time.time()
            compute_events.append((t, t_end))
            m.observe_step(mode, t_end - t)
            if (n + 1) % interval == 0:
                self._checkpoint(mode, step, start)
            now = time.time()
            m.add_training_seconds(mode, now - last)
            step, n, last = step + 1, n + 1, now
        train_end = time.time()
        flush = self.ckpt.finish()
        m.add_training_seconds(mode, train_end - last)
        return step, {"start": start, "train_end": train_end, "end": time.time(), "steps": n,
                      "flush_s": flush, "compute": list(compute_events)}

    def _checkpoint(self, mode: str, step: int, mode_start: float) -> None:
        self.ckpt.checkpoint(step, mode)
        self._write_status(mode, step, mode_start)
        if self.comm.is_node_leader:
            busy = sum(r.drain_s for r in self.ckpt.records if r.mode == mode)
            self.metrics.set_drain_overlap(mode, min(1.0, busy / max(time.time() - mode_start, 1e-9)))

    def _write_status(self, mode: str, step: int, start: float) -> None:
        """Rank 0's progress for the CLI's live display (replaced atomically)."""
        if self.comm.rank != 0:
            return
        recs = self.ckpt.records
        status = {"mode": mode, "step": step, "elapsed_s": time.time() - start, "last_stall_s": recs[-1].stall_s,
                  "checkpoints": len(recs), "misses": sum(r.missed for r in recs),
                  "interval_s": self.cfg.checkpoint.interval_steps * self.cfg.training.step_seconds,
                  "time": time.time()}
        tmp = self.out / (outdir.STATUS + ".tmp")
        tmp.write_text(json.dumps(status))
        os.replace(tmp, self.out / outdir.STATUS)
