"""Units and their words, shared by every part of the emulator: byte sizes, durations, tables.

The kernel's bottom module: it imports nothing of the project.
"""
from __future__ import annotations

import math
import re

from emulator.errors import UserError

KIB, MIB, GIB, TIB = 1 << 10, 1 << 20, 1 << 30, 1 << 40

_DURATION_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(min|sec|s|m|h|d)")


def parse_duration(text, where: str, *, allow_zero: bool = False) -> float:
    """'500', '90s', '8.3min', '30m', '2h', '1h30m', '1d2h' -> seconds.

    A bare number is seconds. Anything else, a negative value, or zero (unless
    ``allow_zero``) is a UserError naming ``where`` (a flag or a config key).
    """
    t = str(text).strip().lower()
    try:
        value = float(t)
    except ValueError:
        parts = _DURATION_PART.findall(t)
        if not parts or "".join(a + b for a, b in parts) != t:
            raise UserError(f"{where}: {text!r} is not a time (e.g. 500, 90s, 8.3min, 2h, 1h30m)") from None
        value = sum(float(a) * _DURATION_UNITS[u] for a, u in parts)
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise UserError(f"{where}: {text!r} must be a finite time {'>= 0' if allow_zero else '> 0'}")
    return value


def fmt_duration(s: float) -> str:
    """Seconds as ms, s, min or h, whichever reads best."""
    if s < 1:
        return f"{s * 1000:.1f} ms"
    if s < 120:
        return f"{s:.1f} s"
    if s < 10 * 3600:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:,.1f} h"


def fmt_bytes(b: float) -> str:
    """Bytes in binary units (MiB .. PiB)."""
    for unit, scale in (("PiB", 2 ** 50), ("TiB", 2 ** 40)):
        if b >= 10 * scale:
            return f"{b / scale:,.1f} {unit}"
    if b >= 2 ** 30:
        return f"{b / 2 ** 30:,.1f} GiB"
    if b >= 2 ** 20:
        return f"{b / 2 ** 20:,.1f} MiB"
    return f"{b:,.0f} bytes"


def fmt_rate(bps: float) -> str:
    """Bytes per second in decimal units, as vendors quote them."""
    if bps >= 1e9:
        return f"{bps / 1e9:,.1f} GB/s"
    return f"{bps / 1e6:,.1f} MB/s"


def fmt_pct(x: float) -> str:
    """A fraction as a percentage."""
    return f"{x * 100:.2f}%"


def table(rows: list, header: list | None = None, indent: str = "  ", left: tuple = (0,)) -> str:
    """Plain aligned columns: those in ``left`` left-aligned, the rest right-aligned.

    A one-cell row is a section heading: printed as is, not counted in the widths.
    """
    allrows = ([header] if header else []) + rows
    cols = [r for r in allrows if len(r) > 1]
    widths = [max((len(str(r[i])) for r in cols if i < len(r)), default=0)
              for i in range(max(map(len, cols), default=0))]
    lines = []
    for r in allrows:
        if len(r) == 1:
            lines.append(indent + str(r[0]))
            continue
        cells = [str(c).ljust(widths[i]) if i in left else str(c).rjust(widths[i]) for i, c in enumerate(r)]
        lines.append((indent + "  ".join(cells)).rstrip())
    return "\n".join(lines)


# --------------------------------------------------------------------------- sizes and rates as vendors quote them

_SIZE_UNITS = {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "pb": 1e15,
               "kib": KIB, "mib": MIB, "gib": GIB, "tib": TIB, "pib": 1 << 50}
_BIT_UNITS = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12}
_AMOUNT = re.compile(r"^\s*(-?(?:\d+(?:\.\d*)?|\.\d+))\s*([A-Za-z]+)\s*$")


def _amount(text, where: str, what: str, example: str, shown=None) -> tuple[float, str]:
    match = _AMOUNT.match(str(text))
    if match is None:
        raise UserError(f"{where}: {shown or repr(text)} is not a {what} with a unit (e.g. {example})")
    return float(match.group(1)), match.group(2)


def parse_size(text, where: str) -> int:
    """'3.84TB', '7.68 TiB', '512GiB' -> bytes. Decimal (TB) and binary (TiB) units; a unit is required."""
    value, unit = _amount(text, where, "size", "3.84TB, 512GiB")
    scale = _SIZE_UNITS.get(unit.lower()) if unit[-1] in "Bb" and not unit.endswith("bit") else None
    if scale is None or (unit[-1] == "b" and len(unit) > 1):  # 'Gb' is bits: a size is in bytes
        raise UserError(f"{where}: {text!r}: unknown size unit {unit!r} (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)")
    if value <= 0:
        raise UserError(f"{where}: {text!r} must be > 0")
    return int(value * scale)


def parse_rate(text, where: str) -> float:
    """'7GB/s', '6.5GiB/s', '400Gb/s', '400Gbit/s' -> bytes/s.

    Bytes (B) or bits (b, bit) per second, decimal or binary prefixes, as vendors
    quote devices (GB/s) and links (Gb/s). A unit is required: a bare number is
    ambiguous between GB/s, GiB/s and Gb/s.
    """
    t = str(text).strip()
    if not t.endswith("/s"):
        raise UserError(f"{where}: {text!r} is not a rate with a unit (e.g. 7GB/s, 6.5GiB/s, 400Gb/s)")
    value, unit = _amount(t[:-2], where, "rate", "7GB/s, 6.5GiB/s, 400Gb/s", shown=repr(text))
    if unit.endswith("bit") or (unit.endswith("b") and not unit.lower().endswith("ib")):
        scale = _BIT_UNITS.get(unit.lower())
        scale = scale / 8 if scale else None
    elif unit.endswith("B"):
        scale = _SIZE_UNITS.get(unit.lower())
    else:
        scale = None
    if scale is None:
        raise UserError(f"{where}: {text!r}: unknown rate unit {unit + '/s'!r} "
                        "(use MB/s, GB/s, GiB/s, TB/s, Gb/s, Gbit/s)")
    if value <= 0:
        raise UserError(f"{where}: {text!r} must be > 0")
    return value * scale
