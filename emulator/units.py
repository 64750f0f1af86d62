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


def fmt_bytes(b: float, family: str = "binary") -> str:
    """Bytes in binary units (MiB .. PiB; TiB and PiB from ten of them), or for the ``decimal`` and
    ``bits`` families in decimal ones (MB .. PB, the largest that is at least one, to three figures):
    an answer speaks the family its input was written in."""
    if family != "binary":
        for unit, scale in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
            if b >= scale:
                v = b / scale
                return f"{v:,.2f} {unit}" if v < 10 else f"{v:,.1f} {unit}"
        return f"{b:,.0f} bytes"
    for unit, scale in (("PiB", 2 ** 50), ("TiB", 2 ** 40)):
        if b >= 10 * scale:
            return f"{b / scale:,.1f} {unit}"
    if b >= 2 ** 30:
        return f"{b / 2 ** 30:,.1f} GiB"
    if b >= 2 ** 20:
        return f"{b / 2 ** 20:,.1f} MiB"
    return f"{b:,.0f} bytes"


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
# One grammar for YAML and flags alike. A size is bytes with a decimal (KB .. PB) or binary (KiB ..
# PiB) prefix; a rate is bytes or bits per second as datasheets write it: 7GB/s, 6.5GiB/s, 2TB/s,
# 400Gb/s, 200Gbps, 100Gbit/s, 800MBps. A unit is always required: a bare number is ambiguous
# between GB/s, GiB/s and Gb/s. Each parsed rate also has a *family* (decimal bytes, binary bytes,
# bits) so output can speak the units the design was written in. A capital B is a byte and a small b a
# bit, binary prefixes included: 100Gib/s is 100 gibibits a second, an eighth of 100GiB/s.

DECIMAL, BINARY, BITS = "decimal", "binary", "bits"
_PREFIXES = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}
_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_QUANTITY = re.compile(rf"^\s*({_NUMBER})\s*([A-Za-z/]+)\s*$")
_SIZE_UNITS_SAID = "B, KB, MB, GB, TB, PB, KiB, MiB, GiB, TiB, PiB"
_RATE_UNITS_SAID = "MB/s, GB/s, TB/s, MiB/s, GiB/s, TiB/s, Mb/s, Gb/s, Gbps, Gbit/s, Gib/s"


def _prefix(text: str) -> float | None:
    """'G' -> 1e9, 'Gi' -> 2**30 (either case), '' -> 1; None for anything else."""
    if text.lower() in _PREFIXES:
        return 1000.0 ** _PREFIXES[text.lower()]
    if len(text) == 2 and text[1] in "iI" and text[0].lower() in "kmgtp":
        return 1024.0 ** _PREFIXES[text[0].lower()]
    return None


def _byte_unit(unit: str) -> tuple[float, str] | None:
    """'GB' -> (1e9, decimal), 'GiB' -> (2**30, binary), 'B' -> (1, decimal); None otherwise.
    A lower-case 'b' is a bit, never a byte, whatever the prefix ('Gib' is a gibibit)."""
    scale = _prefix(unit[:-1]) if unit.endswith("B") else None
    if scale is None:
        return None
    return scale, BINARY if len(unit) == 3 else DECIMAL


def _bit_unit(unit: str) -> float | None:
    """'Gb', 'Gbit' -> 1e9 / 8 bytes, 'Gib', 'Gibit' -> 2**30 / 8; None otherwise."""
    for tail in ("bit", "b"):
        scale = _prefix(unit[: -len(tail)]) if unit.endswith(tail) and len(unit) > len(tail) else None
        if scale is not None:
            return scale / 8
    return None


def _split(text, where: str, what: str, example: str) -> tuple[float, str]:
    if isinstance(text, bool) or text is None:
        raise UserError(f"{where}: {text!r} is not a {what} with a unit (e.g. {example})")
    if isinstance(text, (int, float)):
        raise UserError(f"{where}: {text!r} has no unit: a bare number is ambiguous (write e.g. {example})")
    match = _QUANTITY.match(str(text))
    if match is None:
        raise UserError(f"{where}: {_quoted(text)} is not a {what} with a unit (e.g. {example})")
    value = float(match.group(1))
    if not math.isfinite(value) or value <= 0:
        raise UserError(f"{where}: {_quoted(text)} must be a finite {what} > 0")
    return value, match.group(2)


def _quoted(text, limit: int = 60) -> str:
    s = repr(str(text))
    return s if len(s) <= limit else s[: limit - 4] + "...'"


def parse_size(text, where: str) -> int:
    """'3.84TB', '7.68 TiB', '512GiB', '123456B' -> bytes (decimal or binary prefixes; a unit is required)."""
    value, unit = _split(text, where, "size", "3.84TB, 512GiB")
    byte = _byte_unit(unit)
    if byte is None:
        hint = " ('b' is a bit: a size is in bytes, B)" if _bit_unit(unit) else ""
        raise UserError(f"{where}: {_quoted(text)}: unknown size unit {unit!r}{hint} (use {_SIZE_UNITS_SAID})")
    return int(round(value * byte[0]))


def size_and_family(text, where: str) -> tuple[int, str]:
    """A size and the family it was written in: ('5TB') -> (5e12, 'decimal'), ('512GiB') -> (2**39, 'binary')."""
    size = parse_size(text, where)
    return size, _byte_unit(_split(text, where, "size", "3.84TB, 512GiB")[1])[1]


def byte_family(family: str) -> str:
    """The family of sizes beside rates of ``family``: decimal bytes for bits (400 Gb/s is 50 GB/s)."""
    return BINARY if family == BINARY else DECIMAL


def rate_and_family(text, where: str) -> tuple[float, str]:
    """A rate as datasheets write it -> (bytes/s, family): ('400Gb/s') -> (5e10, 'bits')."""
    value, unit = _split(text, where, "rate", "7GB/s, 6.5GiB/s, 400Gb/s, 200Gbps")
    per = next((unit[: -len(s)] for s in ("/sec", "/s", "ps") if unit.endswith(s) and len(unit) > len(s)), None)
    if per is not None:
        byte = _byte_unit(per)
        if byte is not None:
            return value * byte[0], byte[1]
        bit = _bit_unit(per)
        if bit is not None:
            return value * bit, BITS
    raise UserError(f"{where}: {_quoted(text)}: unknown rate unit {unit!r} (use {_RATE_UNITS_SAID})")


def parse_rate(text, where: str) -> float:
    """'7GB/s', '6.5GiB/s', '400Gb/s', '200Gbps', '100Gbit/s' -> bytes/s (a unit is required)."""
    return rate_and_family(text, where)[0]


def rate_family(text) -> str:
    """The family a rate was written in (decimal GB/s, binary GiB/s, bits Gb/s); decimal if unknown."""
    try:
        return rate_and_family(text, "")[1]
    except UserError:
        return DECIMAL


def fmt_rate(bps: float, family: str = DECIMAL) -> str:
    """Bytes per second in the family a design was written in: GB/s (decimal, as vendors quote
    devices), GiB/s (binary) or Gb/s (bits, as links are quoted); one decimal."""
    if family == BITS:
        steps, value = (("Tb/s", 1e12), ("Gb/s", 1e9), ("Mb/s", 1e6)), bps * 8
    elif family == BINARY:
        steps, value = (("TiB/s", 2 ** 40), ("GiB/s", 2 ** 30), ("MiB/s", 2 ** 20)), bps
    else:
        steps, value = (("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6)), bps
    unit, scale = next(((u, k) for u, k in steps if value >= k), steps[-1])
    return f"{value / scale:,.1f} {unit}"
