"""docs/architecture.md's run path stays the code's: every module on the emulator's side that reads the
design (imports emulator/design/, takes a ``design`` or keeps ``self.design``) is named there, every
module named there exists and reads it, and the launcher and the rank are wired as the page says."""
from __future__ import annotations

import ast
import re

from paths import ROOT

SIDE = ("rank", "checkpoint", "job", "launch", "results", "mlperf", "workload")


def _section() -> str:
    text = (ROOT / "docs" / "architecture.md").read_text()
    start = text.index("## The run's path through the design")
    return text[start:text.index("\n## ", start + 1)]


def reads_the_design(tree) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("emulator.design"):
            return True
        if isinstance(node, ast.arg) and node.arg == "design":
            return True
        if isinstance(node, ast.Attribute) and node.attr == "design" and getattr(node.value, "id", None) == "self":
            return True
    return False


def _readers() -> set:
    return {str(p.relative_to(ROOT)) for top in SIDE for p in (ROOT / "emulator" / top).rglob("*.py")
            if reads_the_design(ast.parse(p.read_text()))}


def test_every_module_that_reads_the_design_is_on_the_pages_run_path():
    named = set(re.findall(r"`(emulator/[\w/]+\.py)`", _section()))
    readers = _readers()
    assert readers - named == set(), "add them to docs/architecture.md's run path"
    assert {n for n in named if n.split("/")[1] in SIDE} - readers == set(), "the page names modules that do not"


def test_the_launcher_writes_the_design_and_the_rank_reads_it():
    runner = (ROOT / "emulator" / "launch" / "runner.py").read_text()
    assert "resolve(cfg, emulated_nodes=nnodes, run=True)" in runner and "to_json(design)" in runner
    rank = (ROOT / "emulator" / "rank" / "run.py").read_text()
    assert "from_json(" in rank and "outdir.DESIGN" in rank


def test_the_check_finds_a_reader():
    assert reads_the_design(ast.parse("def f(design):\n    return design.ladder\n"))
    assert reads_the_design(ast.parse("from emulator.design import ladder\n"))
    assert not reads_the_design(ast.parse("def f(cfg):\n    return cfg.tiers\n"))
