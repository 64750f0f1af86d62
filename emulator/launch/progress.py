"""Progress on long work: a live bar with an ETA on a terminal, a plain line about every 10 s where
stderr is not one (so the log of a two-hour soak shows the run is alive), nothing with --quiet.

``RunProgress`` follows one run through the progress file rank 0 rewrites about every second
(emulator/rank/training.py); ``Counted`` counts the items of longer work: a sweep's cells, the
bench's benchmarks, ``tune``'s runs. Both draw through ``Display``, which picks rich or plain
lines once, from the stream it writes to.
"""
from __future__ import annotations

import json
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

#: seconds between two plain progress lines (stderr not a terminal)
PLAIN_EVERY_S = 10.0


def clock_text(seconds: float | None) -> str:
    """1:05, 1:02:03; '?' when unknown."""
    if seconds is None or seconds != seconds or seconds == float("inf"):
        return "?"
    s = int(round(max(0.0, seconds)))
    h, rest = divmod(s, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def _on_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Display:
    """One line of progress: rich's bar where ``stream`` is a terminal, else a plain line every
    ``every_s`` seconds (the first ``every_s`` after the start)."""

    def __init__(self, stream=None, *, clock=time.monotonic, every_s: float | None = None,
                 rich: bool | None = None):
        self.stream = stream or sys.stderr
        self.clock, self.every_s = clock, PLAIN_EVERY_S if every_s is None else every_s
        self.started = clock()
        self._next_plain = self.started + self.every_s
        self._bar = self._task = None
        if _on_terminal(self.stream) if rich is None else rich:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn
            self._bar = Progress(TextColumn("{task.description}"), BarColumn(bar_width=24), TaskProgressColumn(),
                                 TextColumn("elapsed {task.fields[elapsed]}  ETA {task.fields[eta]}"),
                                 console=Console(file=self.stream), transient=True, refresh_per_second=4)
            self._task = self._bar.add_task("", total=100, elapsed="0:00", eta="?")
            self._bar.start()

    @property
    def elapsed(self) -> float:
        return self.clock() - self.started

    def show(self, fraction: float | None, text: str, eta_s: float | None) -> None:
        """``fraction`` done (None: not known yet), what is going on, and the seconds left."""
        if self._bar is not None:
            self._bar.update(self._task, completed=100 * (fraction or 0.0), description=text,
                             elapsed=clock_text(self.elapsed), eta=clock_text(eta_s))
            return
        now = self.clock()
        if now < self._next_plain:
            return
        self._next_plain = now + self.every_s
        done = f"[{100 * fraction:3.0f}%] " if fraction is not None else ""
        print(f"ckpt-emu: {done}{text}; elapsed {clock_text(self.elapsed)}, ETA {clock_text(eta_s)}",
              file=self.stream, flush=True)

    def say(self, line: str) -> None:
        """A line of its own (a stage begins), above a live bar or in the plain log."""
        if self._bar is not None:
            self._bar.console.print(line)
        else:
            print(line, file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def eta(elapsed_s: float, fraction: float, since_fraction: float = 0.0) -> float | None:
    """Seconds left at the rate so far: ``elapsed_s`` took the fraction from ``since_fraction``
    to ``fraction``."""
    gained = fraction - since_fraction
    if gained <= 0 or elapsed_s <= 0:
        return None
    return elapsed_s * (1.0 - fraction) / gained


class Counted:
    """Progress over ``total`` items (``what``: "cells", "benchmarks"); ``advance`` after each."""

    def __init__(self, total: int, what: str, label: str = "", display: Display | None = None):
        self.total, self.what, self.label = max(1, total), what, label
        self.done = 0
        self.display = display or Display()

    def advance(self, note: str = "") -> None:
        self.done += 1
        self._show(note)

    def _show(self, note: str) -> None:
        fraction = min(1.0, self.done / self.total)
        text = f"{self.label}{self.done}/{self.total} {self.what}" + (f" ({note})" if note else "")
        self.display.show(fraction, text, eta(self.display.elapsed, fraction))

    @contextmanager
    def running(self, note: str, every_s: float = 1.0):
        """While one long item runs (a benchmark of minutes): the display stays alive, its plain
        line still comes every 10 s."""
        stop = threading.Event()

        def beat():
            while not stop.wait(every_s):
                self._show(f"{note} running")
        thread = threading.Thread(target=beat, name="ckpt-emu-progress", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def close(self) -> None:
        self.display.close()


def run_fraction(p: dict) -> float:
    """How much of a run's training is done: modes done, and the current mode's steps (or seconds
    of its budget under --duration)."""
    if p.get("budget_s"):
        within = p["mode_elapsed_s"] / p["budget_s"]
    else:
        within = p["steps_done"] / max(1, p["steps_per_mode"])
    return min(1.0, (p["mode_index"] + min(1.0, within)) / max(1, p["modes"]))


class RunProgress:
    """One run's progress from rank 0's progress file: the mode, its steps, the checkpoints and the
    misses so far, and when training will end at the rate so far."""

    def __init__(self, ranks: int, label: str = "", display: Display | None = None):
        self.ranks, self.label = ranks, label
        self.display = display or Display()
        self._first = None  # (time, fraction) of the first progress seen: the ETA's start

    def update(self, progress_path: Path) -> None:
        try:
            p = json.loads(Path(progress_path).read_text())
        except (OSError, ValueError):
            self.display.show(None, f"{self.label}starting {self.ranks} rank(s)", None)
            return
        fraction, now = run_fraction(p), self.display.elapsed
        if self._first is None:
            self._first = (now, fraction)
        left = eta(now - self._first[0], fraction, self._first[1])
        self.display.show(fraction, self.label + self._text(p, fraction), left)

    @staticmethod
    def _text(p: dict, fraction: float) -> str:
        if fraction >= 1.0:
            return "training done; the last drains, the loads and the report"
        steps = f"step {p['steps_done']}/{p['steps_per_mode']}" if not p.get("budget_s") else \
            f"{clock_text(p['mode_elapsed_s'])} of {clock_text(p['budget_s'])}"
        mode = "baseline (no checkpoints)" if p["mode"] == "none" else p["mode"]
        stall = f", last stall {p['last_stall_s'] * 1000:.0f} ms" if p.get("last_stall_s") is not None else ""
        return (f"{mode} {steps} (mode {p['mode_index'] + 1}/{p['modes']}): {p['checkpoints']} checkpoint(s)"
                f"{stall}, {p['misses']} deadline miss(es)")

    def close(self) -> None:
        self.display.close()
