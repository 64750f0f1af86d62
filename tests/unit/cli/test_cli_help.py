"""Every command's --help prints and exits 0 (argparse expands '%' in help strings)."""
from __future__ import annotations

import pytest
from emu import ckpt_emu

COMMANDS = ("run", "sizes", "compare", "plan", "simulate", "tune")


def test_top_level_help_lists_every_command():
    out = ckpt_emu("--help")
    assert out.returncode == 0, out.stderr
    for command in COMMANDS:
        assert command in out.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_prints_its_help(command):
    out = ckpt_emu(command, "--help")
    assert out.returncode == 0, out.stderr[-500:]
    assert "usage: " in out.stdout and not out.stderr
