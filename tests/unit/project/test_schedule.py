"""The order .ci/test's workers take test files in (tests/support/schedule.py)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import schedule


@dataclass
class Item:
    path: Path
    name: str
    waits: bool = False


def _items(spec: dict) -> list:
    """{file: (tests, waits)} -> items, in that (collection) order."""
    return [Item(Path(f), f"{f}::{i}", w) for f, (n, w) in spec.items() for i in range(n)]


def _files(items: list) -> list:
    out = []
    for item in items:
        if not out or out[-1] != item.path.name:
            out.append(item.path.name)
    return out


def _order(spec: dict) -> list:
    return schedule.order(_items(spec), lambda p: "quick" if p.parts[0] == "unit" else "system", lambda i: i.waits)


def test_system_files_come_before_quick_ones_and_many_tests_before_few():
    spec = {"unit/a.py": (50, False), "system/b.py": (2, False), "system/c.py": (9, False), "unit/d.py": (3, False)}
    assert _files(_order(spec)) == ["c.py", "b.py", "a.py", "d.py"]


def test_waiting_files_are_spread_one_in_every_few_from_the_start():
    spec = {f"system/s{i}.py": (10 - i, False) for i in range(6)} | {
        "system/w1.py": (1, True), "system/w2.py": (1, True), "unit/q.py": (100, False)}
    files = _files(_order(spec))
    assert files[0] == "w1.py" and files[schedule.SPREAD] == "w2.py"
    assert files[-1] == "q.py" and sorted(files) == sorted(p.split("/")[1] for p in spec)


def test_every_test_is_kept_once_and_a_files_tests_keep_their_order():
    spec = {"system/a.py": (3, True), "unit/b.py": (4, False), "system/c.py": (2, False)}
    items = _items(spec)
    ordered = _order(spec)
    assert sorted(i.name for i in ordered) == sorted(i.name for i in items)
    assert [i.name for i in ordered if i.path.name == "b.py"] == [f"unit/b.py::{k}" for k in range(4)]


@pytest.mark.parametrize("spec", [{}, {"unit/a.py": (1, False)}])
def test_small_collections(spec):
    assert len(_order(spec)) == sum(n for n, _ in spec.values())
