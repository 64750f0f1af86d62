"""The training loop of one mode: emulated steps, the per-step all-reduce, a checkpoint every N steps.

A step is the optimizer's update of the state (``RankState.mutate``, inside
the step's time) plus emulated compute for the rest of the step's wall time
(``training.step_seconds``, a full-size time, times ``run.scale``): ``sleep``
(GPU work leaves the host CPU free) or ``cpu`` (burn a core, to study
interference). Every step ends with an all-reduce, like a real data-parallel
step, which also carries the stop flag (Ctrl-C, the time budget, the step
count, a node failure), so every rank stops at the same step.

Mode ``none`` trains the same steps without checkpoints: the baseline that
slowdown, interference and goodput are measured against.
"""
from __future__ import annotations

import json
import os
import struct
import time
from collections import deque

from emulator.job import outdir
from tiers.safepath import open_own_file, write_file

MAX_EVENTS = 4000  # timeline events kept per rank and kind of source
PROGRESS_EVERY_S = 1.0  # rank 0 rewrites the progress file at most this often (and at each checkpoint)
#: votes of the per-step stop all-reduce (the largest wins): stop now > a checkpoint in flight > steps done
_STEPS_DONE, _IN_FLIGHT, _STOP_NOW = 1.0, 2.0, 4.0


def compute(seconds: float, kind: str) -> None:
    """``sleep``: wait ``seconds``. ``cpu``: spend ``seconds`` of this thread's CPU time, so a
    step that shares its core with background work (a drain, torch.save) takes longer, as a
    CPU-bound step would: that is the interference a run should show."""
    if seconds <= 0:
        return
    if kind == "sleep":
        time.sleep(seconds)
        return
    end = time.thread_time() + seconds
    x = 1.0001
    while time.thread_time() < end:
        for _ in range(2000):
            x = x * 1.0000001 % 7.0


class TrainedMark:
    """The last step this rank trained, overwritten in place in a small file of the results folder
    every step. After a restart the work lost counts up to it, not only up to the last checkpoint
    started. No fsync: it must outlive the rank, which the page cache does, not the machine (a lost
    node's survivors hold the job's mark)."""

    def __init__(self, path) -> None:
        self._fd = open_own_file(path, os.O_WRONLY | os.O_CREAT, what="results folder")

    def mark(self, step: int) -> None:
        os.pwrite(self._fd, struct.pack("<q", step), 0)

    def close(self) -> None:
        os.close(self._fd)

    @staticmethod
    def read(path) -> int:
        """The step marked (0: no mark, e.g. a replacement node's new results folder)."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return 0
        return struct.unpack("<q", data[:8])[0] if len(data) >= 8 else 0


class ModeLoop:
    """Trains one mode on a rank; ``run`` returns the next step and the mode's span for the report."""

    def __init__(self, cfg, design, clock, state, ckpt, comm, metrics, out: outdir.OutDir, node_loss):
        """``cfg``: the run's modes and steps; ``design``: its checkpoint interval and step time, which
        ``clock`` paces."""
        self.cfg, self.state, self.ckpt, self.comm = cfg, state, ckpt, comm
        self.interval_steps, self.step_wall = design.interval_steps, clock.wall(design.step_seconds)
        self.step_s = design.step_seconds
        self.metrics, self.out, self.node_loss = metrics, out, node_loss
        self.baseline_step_s = 0.0  # the baseline mode's time per step on the design's clock, once it ran
        self.trained_s = 0.0  # the mode's training time so far on the design's clock (the metrics')
        self.trained = TrainedMark(out.trained(comm.rank))
        self.after_checkpoint = None  # called with the checkpoints taken so far, after each (a soak's samples)
        self.progress_span = None  # (start, seconds) the progress shown is of, where not the mode's (a soak's)

    def _should_stop(self, mode_start: float, budget: float | None, step_in_mode: int) -> bool:
        """Every rank's same decision, from one all-reduce (the per-step one of data-parallel training).

        Ctrl-C, the time budget or a node loss stop at once. Reaching the step count stops only
        once no rank has a checkpoint in flight: the last async checkpoint's write and drain
        overlap training steps, as every other checkpoint's do, instead of a loop that has ended.
        """
        if self.node_loss.happened(len(self.ckpt.records)):
            return True  # every rank counts the same checkpoints: a consistent decision
        vote = _IN_FLIGHT if self.ckpt.in_flight() else 0.0
        if self.comm.rank == 0:
            if (self.out / outdir.STOP).exists() or (budget is not None and time.time() - mode_start >= budget):
                vote = _STOP_NOW
            elif budget is None and step_in_mode >= self.cfg.steps_per_mode:
                vote = max(vote, _STEPS_DONE)
        decision = self.comm.all_max(vote)
        return decision == _STOP_NOW or decision == _STEPS_DONE

    def run(self, mode: str, first_step: int, budget: float | None) -> tuple[int, dict]:
        cfg, m = self.cfg, self.metrics
        interval, step_wall = self.interval_steps, self.step_wall
        m.set_interval(mode, interval * self.step_s if mode != "none" else 0.0)
        self.comm.barrier()
        start = last = time.time()  # training seconds are added per step so rate() works live
        self.trained_s = 0.0
        step, n, update_cpu = first_step, 0, 0.0
        compute_events = deque(maxlen=MAX_EVENTS)  # bounded: soak runs must not grow
        last_step = cfg.steps_per_mode if budget is None else float("inf")  # steps past it only wait for a drain
        progress_at = -float("inf")
        while not self._should_stop(start, budget, n):
            t, cpu0 = time.time(), time.thread_time()
            self.state.mutate(step)  # the optimizer update: part of the step's time, not added to it
            update_cpu += time.thread_time() - cpu0
            compute(step_wall - (time.time() - t), cfg.training.compute)
            t_end = time.time()
            compute_events.append((t, t_end))
            self.trained.mark(step)
            m.observe_step(mode, m.clock.steps(t_end - t, 1))
            checkpointed = mode != "none" and (n + 1) % interval == 0 and n < last_step
            rec = self._checkpoint(mode, step, start) if checkpointed else None
            if checkpointed and self.after_checkpoint is not None:
                self.after_checkpoint(len(self.ckpt.records))
            now = time.time()
            if self.comm.rank == 0 and (checkpointed or now - progress_at >= PROGRESS_EVERY_S):
                self._write_progress(mode, n + 1, *(self.progress_span or (start, budget)))
                progress_at = now
            self._add_training(mode, now - last, 1, rec)
            if checkpointed:
                self._publish_ratios(mode, start, n + 1)
            step, n, last = step + 1, n + 1, now
        train_end = time.time()
        at_risk = sum(1 for r in self.ckpt.records
                      if r.mode == mode and r.global_due and not (0 < r.durable_at <= train_end))
        flush = self.ckpt.finish()
        self._add_training(mode, train_end - last, 0)
        if mode == "none":
            self.baseline_step_s = self.trained_s / max(1, n)
            m.set_baseline_step(self.baseline_step_s)
        else:
            m.set_at_risk(mode, at_risk)
            if n:  # the mode's whole time, its last drains (after training) included, as the report's
                self._publish_ratios(mode, start, n, after_s=time.time() - train_end)
        return step, {"start": start, "train_end": train_end, "end": time.time(), "steps": n,
                      "flush_s": flush, "compute": list(compute_events), "at_risk": at_risk,
                      "update_cpu_s": update_cpu}

    def _checkpoint(self, mode: str, step: int, mode_start: float):
        rec = self.ckpt.checkpoint(step, mode)
        self._write_status(mode, step, mode_start)
        return rec

    def _add_training(self, mode: str, wall: float, steps: int, rec=None) -> None:
        """Training time for the metrics, on the design's clock (as the report's figures in brackets):
        ``steps`` steps of ``wall`` at their paced time / the time factor and this host's time past it
        once, and the stall of the checkpoint ``rec`` taken among them at full size."""
        clock = self.metrics.clock
        if rec is None:
            seconds = clock.steps(wall, steps)
        else:
            seconds = clock.steps(wall - rec.stall_s, steps) + clock.record(rec)["stall_s"]
        self.trained_s += seconds
        self.metrics.add_training_seconds(mode, seconds)

    def _publish_ratios(self, mode: str, mode_start: float, steps_done: int, *, after_s: float = 0.0) -> None:
        """The mode's slowdown against the baseline and its drain overlap so far, on the design's clock
        (``after_s``: the wall time since training stopped, waiting for the last drains)."""
        clock = self.metrics.clock
        if self.baseline_step_s:
            self.metrics.set_slowdown(mode, self.trained_s / steps_done / self.baseline_step_s - 1)
        if self.comm.is_node_leader:  # the drain in flight counts too, and nothing caps it at 1
            busy = sum(clock.phase(r.drain_s, r.paced.get("drain")) for r in self.ckpt.records if r.mode == mode)
            since = self.ckpt.drain_in_flight_since()
            if since is not None:
                busy += clock.span(time.time() - max(since, mode_start))
            self.metrics.set_drain_overlap(mode, busy / max(self.trained_s + clock.span(after_s), 1e-9))

    def _write_status(self, mode: str, step: int, start: float) -> None:
        """Rank 0's progress for the CLI's live display (replaced atomically)."""
        if self.comm.rank != 0:
            return
        recs = self.ckpt.records
        status = {"mode": mode, "step": step, "elapsed_s": time.time() - start, "last_stall_s": recs[-1].stall_s,
                  "checkpoints": len(recs), "misses": sum(r.missed for r in recs),
                  "interval_s": self.interval_steps * self.step_wall,
                  "time": time.time()}
        write_file(self.out / outdir.STATUS, json.dumps(status), durable=False)

    def _write_progress(self, mode: str, steps_done: int, start: float, budget: float | None) -> None:
        """Rank 0's progress through the modes, for the CLI's progress display (replaced atomically)."""
        recs, modes = self.ckpt.records, list(self.cfg.run_modes)
        write_file(self.out / outdir.PROGRESS, json.dumps({
            "mode": mode, "mode_index": modes.index(mode), "modes": len(modes), "steps_done": steps_done,
            "steps_per_mode": self.cfg.steps_per_mode, "budget_s": budget, "mode_elapsed_s": time.time() - start,
            "checkpoints": len(recs), "misses": sum(r.missed for r in recs),
            "last_stall_s": recs[-1].stall_s if recs else None}), durable=False)
