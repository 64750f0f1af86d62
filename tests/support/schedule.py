"""The order .ci/test's workers take test files in (pytest-xdist ``--dist loadfile
--no-loadscope-reorder`` sends whole files in the order its workers collected them).

System files first, quick ones last, so that the many small quick files fill the end rather than
one long system file keeping a worker busy alone; and the files marked ``waits`` (most of their
time is a paced run or Prometheus' evaluations, not CPU) spread one in every ``SPREAD`` files from
the start, so each runs beside CPU-bound files rather than beside the other waiting ones at the end.
"""
from __future__ import annotations

SPREAD = 3


def order(items: list, tier, waits) -> list:
    """``items`` regrouped file by file: ``tier(path)`` gives "system" or "quick", ``waits(item)``
    whether a test is marked ``waits``. Within a file the order is unchanged."""
    files: dict = {}
    for item in items:
        files.setdefault(item.path, []).append(item)
    paths = sorted(files, key=lambda p: (tier(p) != "system", -len(files[p])))  # stable: collection order next
    waiting = [p for p in paths if any(waits(i) for i in files[p])]
    rest = [p for p in paths if p not in waiting]
    ordered = []
    while waiting or rest:
        if waiting:
            ordered.append(waiting.pop(0))
        ordered += rest[:SPREAD - 1]
        rest = rest[SPREAD - 1:]
    return [item for p in ordered for item in files[p]]
