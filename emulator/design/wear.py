"""Capacity and wear: what each tier of a design holds and what it is written a day, one answer for
every engine.

``plan`` (at its recommended cell), ``simulate`` (at the checkpoints a day it simulated) and ``sizes``
(at the config's interval, every checkpoint taken) ask :func:`holdings` and only print it. A node tier
(host memory, the NVMe) holds ``keep`` of its node's checkpoints and the next in flight (in host memory
beside a peer tier also the peer copies it keeps for others: emulator/design/capacity.py); the peer
tier holds ``replicas`` copies of each; global storage holds ``keep`` + 1 of the job's. Per node the
heaviest node is the one sized (every node has the same drive), the mean beside it. The NVMe's wear:
drive writes a day (bytes written a day over its capacity, as drives are rated) and the years until
its endurance rating (``1DWPD`` over a 5-year warranty by default, or a total such as ``7PB``) is spent.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from emulator.design import ladder
from emulator.design.capacity import checkpoints_held
from emulator.errors import UserError
from emulator.units import BINARY, BITS, DECIMAL, byte_family, fmt_bytes, parse_size, table

DAY = 86400.0
YEAR_DAYS = 365.0
#: an NVMe's endurance rating when none is given: one drive write a day over a 5-year warranty
#: (a read-intensive data-center drive; mixed-use ones are rated 3)
DEFAULT_DWPD = 1.0
WARRANTY_YEARS = 5.0
_DWPD = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*dwpd\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Endurance:
    """An NVMe's rated endurance: ``dwpd`` drive writes a day over ``years``, or ``total_bytes`` written."""

    dwpd: float | None = DEFAULT_DWPD
    total_bytes: float | None = None
    years: float = WARRANTY_YEARS
    given: bool = False

    def rated_bytes(self, capacity: float | None) -> float | None:
        if self.total_bytes is not None:
            return self.total_bytes
        return None if not capacity else self.dwpd * capacity * YEAR_DAYS * self.years

    def text(self) -> str:
        return (f"{self.dwpd:g} DWPD over {self.years:g} years" if self.total_bytes is None
                else f"{self.total_bytes:.3g} bytes written")


def parse_endurance(text, where: str = "--nvme-endurance") -> Endurance:
    """'1DWPD', '3dwpd' (over a 5-year warranty) or a total written, '7PB', '14000TB' (its TBW)."""
    if text is None:
        return Endurance()
    m = _DWPD.match(str(text))
    if m:
        dwpd = float(m.group(1))
        if not 0 < dwpd <= 1000:
            raise UserError(f"{where}: {text!r}: drive writes a day must be > 0 and <= 1000")
        return Endurance(dwpd=dwpd, given=True)
    try:
        total = parse_size(text, where)
    except UserError:
        raise UserError(f"{where}: {text!r} is neither drive writes a day (1DWPD) nor the bytes the drive "
                        "is rated to write (7PB)") from None
    if total <= 0:
        raise UserError(f"{where}: {text!r} must be more than 0 bytes")
    return Endurance(dwpd=None, total_bytes=float(total), given=True)


@dataclass(frozen=True)
class Holding:
    """One tier: it takes ``checkpoints_per_day`` and holds ``checkpoints`` of them at once; per node
    (the heaviest; ``mean_held_bytes`` the mean) or for the job (``scope``). ``capacity_bytes`` is
    the design's (None: not given). The NVMe's wear: ``drive_writes_per_day`` and ``years_to_endurance``."""

    name: str
    scope: str
    keep: int
    checkpoints: int
    held_bytes: float
    mean_held_bytes: float
    capacity_bytes: float | None
    checkpoints_per_day: float
    written_bytes_per_day: float
    mean_written_bytes_per_day: float
    drive_writes_per_day: float | None
    endurance_bytes: float | None
    years_to_endurance: float | None

    @property
    def over_capacity(self) -> bool:
        return self.capacity_bytes is not None and self.held_bytes > self.capacity_bytes

    @property
    def used(self) -> float | None:
        return None if not self.capacity_bytes else self.held_bytes / self.capacity_bytes

    def to_dict(self) -> dict:
        return {**asdict(self), "over_capacity": self.over_capacity, "used": self.used}


def answer_family(design) -> str:
    """The family an answer about ``design`` says its sizes in: its global storage's (decimal for a rate
    in bits, and where there is none)."""
    link = design.link("global")
    return byte_family(link.family if link is not None else DECIMAL)


def rate_family(link_family: str, answer: str) -> str:
    """The family a link's rate is said in within an answer of family ``answer``: as the design wrote it
    where that is the answer's family or bits (links are quoted in bits), else the answer's."""
    return link_family if link_family == BITS or byte_family(link_family) == answer else answer


def _copy_bytes(design, name: str) -> tuple[float, float]:
    """(heaviest, mean) bytes one checkpoint puts on tier ``name``: per node, or the job's on global storage."""
    job = design.job
    if name == "global":
        return float(job.checkpoint_bytes), float(job.checkpoint_bytes)
    times = design.replicas if name == "peer" else 1
    return float(job.heaviest.node_bytes * times), job.checkpoint_bytes / job.nodes * times


def _held(design, name: str) -> int:
    return checkpoints_held(design, name) if name in ladder.node_file_tiers() else design.tier(name).keep + 1


def holding(design, name: str, checkpoints_per_day: float, endurance: Endurance = Endurance()) -> Holding:
    """Tier ``name`` of ``design`` taking ``checkpoints_per_day``."""
    heaviest, mean = _copy_bytes(design, name)
    held = _held(design, name)
    cap = design.link(name).capacity_bytes
    written = heaviest * checkpoints_per_day
    nvme = name == "local"
    rated = endurance.rated_bytes(cap) if nvme else None
    return Holding(name, "job" if name == "global" else "node", design.tier(name).keep, held,
                   heaviest * held, mean * held, cap, checkpoints_per_day, written,
                   mean * checkpoints_per_day, written / cap if nvme and cap else None, rated,
                   rated / (written * YEAR_DAYS) if rated and written > 0 else None)


def holdings(design, base_per_day: float, every: dict | None = None, endurance: Endurance = Endurance()) -> tuple:
    """Every tier of ``design`` when ``base_per_day`` checkpoints are taken a day, each tier its every-th
    (``every``: {tier: n}, default the design's own)."""
    every = every or {}
    return per_tier(design, {t.name: base_per_day / every.get(t.name, t.every) for t in design.ladder}, endurance)


def per_tier(design, per_day: dict, endurance: Endurance = Endurance()) -> tuple:
    """Every tier of ``design`` taking ``per_day[tier]`` checkpoints a day (as a simulation counted them)."""
    return tuple(holding(design, t.name, per_day.get(t.name, 0.0), endurance) for t in design.ladder)


def over_capacity_notes(rows: tuple, family: str) -> tuple:
    """The flag of each tier that cannot hold what the design keeps there, as every engine says it."""
    out = []
    for h in rows:
        if h.over_capacity:
            per = "for the job" if h.scope == "job" else "per node (the heaviest)"
            out.append(f"tiers.{h.name}: OVER CAPACITY: {h.checkpoints} checkpoints at once (keep {h.keep} and the "
                       f"next in flight) need {fmt_bytes(h.held_bytes, family)} {per}, over its "
                       f"{fmt_bytes(h.capacity_bytes, family)}: lower its keep or give it more capacity")
    return tuple(out)


def endurance_notes(rows: tuple, endurance: Endurance) -> tuple:
    """Where the NVMe's wear was figured against an assumed rating, the note that says so."""
    if endurance.given or not any(h.drive_writes_per_day is not None for h in rows):
        return ()
    return (f"NVMe endurance: not given; assumed {endurance.text()} (give --nvme-endurance, e.g. 3DWPD or 7PB)",)


# --------------------------------------------------------------------------- as every command prints it

def capacity_heading(where: str) -> str:
    return f"Capacity and wear {where} (the checkpoints kept and the next in flight; per node: the heaviest)"


def _years(h) -> str:
    return "" if h.years_to_endurance is None else f"{h.years_to_endurance:,.1f}"


def capacity_table(rows: tuple, family: str, indent: str = "  ") -> str:
    """Per tier what it holds at once against its capacity, what it is written a day, and the NVMe's
    drive writes a day and years to its endurance rating; a tier that cannot hold its keep flagged."""
    body = []
    for h in rows:
        per = "for the job" if h.scope == "job" else "per node"
        mean = "" if h.scope == "job" or h.mean_held_bytes == h.held_bytes else \
            f" (mean {fmt_bytes(h.mean_held_bytes, family)})"
        cap = "not given" if h.capacity_bytes is None else fmt_bytes(h.capacity_bytes, family)
        body.append([h.name, f"{h.checkpoints}", f"{fmt_bytes(h.held_bytes, family)} {per}{mean}", cap,
                     "" if h.used is None else f"{h.used * 100:,.1f}%", f"{h.checkpoints_per_day:,.1f}",
                     fmt_bytes(h.written_bytes_per_day, family),
                     "" if h.drive_writes_per_day is None else f"{h.drive_writes_per_day:,.2f}", _years(h),
                     "OVER CAPACITY" if h.over_capacity else ""])
    return table(body, ["tier", "holds", "bytes held", "capacity", "used", "checkpoints a day", "written a day",
                        "drive writes a day", "years to rating", ""], indent=indent, left=(0, 2, 9))


__all__ = ["BINARY", "DECIMAL", "Endurance", "Holding", "answer_family", "capacity_heading", "capacity_table", "endurance_notes", "holding",
           "holdings", "over_capacity_notes", "parse_endurance", "per_tier", "rate_family"]
