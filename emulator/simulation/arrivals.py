"""Failure arrivals: Poisson from the design's failure model, or a trace file.

The failure model is the design's (emulator/design/failures.py): the job's accelerators fail as
one Poisson process of rate accelerators / MTTF, each failure of one class (``process``, ``node``,
``group``) drawn by the classes' shares. A trace replaces the arrivals.

Trace: a CSV file, one failure per row, ``TIME[,KIND]``; TIME is seconds from the start or a
duration with units (``90s``, ``12.5m``, ``3h``, ``2d4h``), KIND a class (``process``, ``node``,
``group``; older traces' ``restart`` is ``process``, and ``node_loss`` is ``node``); a row without
one is drawn by the shares. Blank lines and ``#`` comments are skipped, and so is a first row
``time,kind``. Rows must be in time order.
"""
from __future__ import annotations

import csv
import random
from dataclasses import dataclass
from typing import Iterator

from emulator.design.failures import class_of
from emulator.errors import UserError
from emulator.units import parse_duration
from tiers.base import TierError
from tiers.fileops import read_regular


@dataclass(frozen=True)
class Failure:
    time_s: float
    kind: str | None  # a class (process, node, group); None: drawn by the shares


def read_trace(path: str) -> list[Failure]:
    """Parse a failure trace; any bad row is one UserError naming the file and line."""
    try:
        text = read_regular(path).decode()
    except OSError as exc:
        raise UserError(f"--failures {path}: cannot read: {exc.strerror}") from None
    except TierError:  # a FIFO, a device
        raise UserError(f"--failures {path}: cannot read: not a regular file") from None
    except UnicodeDecodeError:
        raise UserError(f"--failures {path}: not a text file") from None
    out: list[Failure] = []
    for lineno, row in enumerate(csv.reader(text.splitlines()), start=1):
        cells = [c.strip() for c in row]
        if not cells or not any(cells) or cells[0].startswith("#"):
            continue
        if not out and lineno == _first_row(text) and cells[0].lower() in ("time", "time_s", "t"):
            continue  # header
        out.append(_row(cells, f"--failures {path}: line {lineno}", out[-1].time_s if out else None))
    return out


def _first_row(text: str) -> int:
    for i, line in enumerate(text.splitlines(), start=1):
        if line.strip() and not line.strip().startswith("#"):
            return i
    return 0


def _row(cells: list[str], where: str, previous: float | None) -> Failure:
    if len(cells) > 2:
        raise UserError(f"{where}: expected TIME[,KIND], got {len(cells)} columns")
    t = parse_duration(cells[0], where, allow_zero=True)
    if previous is not None and t < previous:
        raise UserError(f"{where}: time {cells[0]} is before the previous row's (rows must be in time order)")
    kind = None
    if len(cells) == 2 and cells[1]:
        kind = class_of(cells[1])
        if kind is None:
            raise UserError(f"{where}: unknown kind {cells[1]!r} (use process, node or group; restart is process)")
    return Failure(t, kind)


class Arrivals:
    """The failures of one simulation, in time order, each with its class: of the design's failure
    model (``failures``), or of a ``trace`` (rows without a class drawn by the model's shares).
    Seeded, so every cell of a sweep sees the same failures."""

    def __init__(self, failures, *, trace: list[Failure] | None = None, seed: int = 0):
        self.failures, self.trace, self.seed = failures, trace, seed

    def __iter__(self) -> Iterator[tuple[float, str]]:
        """(absolute time in seconds, class) lazily (Poisson arrivals never end)."""
        rng = random.Random(self.seed)
        if self.trace is not None:
            for f in self.trace:
                yield f.time_s, f.kind or self.failures.draw(rng)
            return
        rate = self.failures.rate_per_s
        if rate <= 0:
            return
        t = 0.0
        while True:
            t += rng.expovariate(rate)
            yield t, self.failures.draw(rng)

    def rates(self, horizon_s: float | None = None) -> dict:
        """Failures per second of each class: the model's, or a trace's counts over its span."""
        if self.trace is None:
            return self.failures.rates()
        span = max((f.time_s for f in self.trace), default=0.0) or horizon_s or 1.0
        counts = {c.name: 0 for c in self.failures.classes}
        for _, cls in self:
            counts[cls] += 1
        return {c: n / span for c, n in counts.items()}
