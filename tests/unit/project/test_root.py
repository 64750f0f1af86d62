"""The repository's root is the design card's: pyproject.toml, tiers/, emulator/, configs/, tests/,
grafana/, plus bench/, docs/, scripts/, .ci/ and the few files a Python project needs beside them.
Anything else committed there (a wheel, a scratch file) is a mistake this test names."""
from __future__ import annotations

import subprocess

import pytest
from paths import ROOT

CARD = {"pyproject.toml", "tiers", "emulator", "configs", "tests", "grafana", "bench", "docs", "scripts", ".ci"}
BESIDE = {"README.md", ".gitignore", "constraints.txt", "setup.py"}


def test_the_root_holds_only_the_design_cards_entries():
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    top = {line.split("/", 1)[0] for line in listed.stdout.splitlines() if line}
    assert top - CARD - BESIDE == set()
    assert CARD <= top
