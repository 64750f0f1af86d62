"""Failure arrivals: Poisson from an MTTF per accelerator, or a trace file.

Synchronous training stops when any accelerator fails, so N accelerators
with MTTF m fail as one Poisson process of rate N/m (the planner's model,
emulator/planner.py). Each failure is a process restart (the job restores
from the node-local tier) or a node loss (the node is replaced, its local
tier is gone, the job restores from the global tier). Without a kind, a
failure is a node loss with probability ``node_loss_fraction``: by default
0.78, the share of Llama 3's 419 unexpected interruptions that Meta
attributed to hardware (a host with faulty hardware is taken out of the job).

Trace: a CSV file, one failure per row, ``TIME[,KIND]``; TIME is seconds
from the start or a duration with units (``90s``, ``12.5m``, ``3h``,
``2d4h``), KIND is ``restart`` or ``node`` (aliases ``process``,
``node_loss``) or ``group`` (a whole replica group lost: multi-level plans,
emulator/simulation/level_design.py; the two-tier model counts it as a node loss). Blank lines and ``#`` comments are skipped, and so is a first
row ``time,kind``. Rows must be in time order.
"""
from __future__ import annotations

import csv
import random
from dataclasses import dataclass
from typing import Iterator

from emulator.errors import UserError
from emulator.units import parse_duration
from tiers.base import TierError
from tiers.fileops import read_regular

HOUR = 3600.0
RESTART, NODE, GROUP = "restart", "node", "group"
_KINDS = {"restart": RESTART, "process": RESTART, "process_restart": RESTART,
          "node": NODE, "node_loss": NODE, "node-loss": NODE, "group": GROUP}
DEFAULT_NODE_LOSS_FRACTION = 0.78


@dataclass(frozen=True)
class Failure:
    time_s: float
    kind: str | None  # None: drawn with the node-loss fraction


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
        kind = _KINDS.get(cells[1].lower())
        if kind is None:
            raise UserError(f"{where}: unknown kind {cells[1]!r} (use restart, node or group)")
    return Failure(t, kind)


class Arrivals:
    """The failures of one simulation, in time order, with their kinds decided."""

    def __init__(self, *, accelerators: int, mttf_hours: float | None, trace: list[Failure] | None,
                 node_loss_fraction: float, seed: int):
        self.rng = random.Random(seed)
        self.node_loss_fraction = node_loss_fraction
        self.trace = trace
        self.rate = accelerators / (mttf_hours * HOUR) if trace is None and mttf_hours else 0.0

    def __iter__(self) -> Iterator[tuple[float, str, float]]:
        """(absolute time in seconds, kind, u) lazily (Poisson arrivals never end); ``u`` in
        [0, 1) picks the failed node, so every sweep cell sees the same failures."""
        if self.trace is not None:
            for f in self.trace:
                kind = NODE if f.kind == GROUP else f.kind  # a group loss is a node loss here, and more
                yield f.time_s, kind or self._kind(), self.rng.random()
            return
        if self.rate <= 0:
            return
        t = 0.0
        while True:
            t += self.rng.expovariate(self.rate)
            yield t, self._kind(), self.rng.random()

    def _kind(self) -> str:
        return NODE if self.rng.random() < self.node_loss_fraction else RESTART
