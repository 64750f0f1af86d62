"""The command line follows the conventions users expect: --version, usage when no command is given,
shell completion, an example at the end of every --help, and one meaning for plan's config."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from emulator.cli import build_parser, main
from paths import ROOT

COMMANDS = ("run", "sizes", "compare", "plan", "simulate", "tune")


def test_version_exits_0(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"ckpt-emu {metadata.version('ckpt-emu')}"


def test_no_command_prints_usage_and_every_command(capsys):
    assert main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: ckpt-emu")
    for command in COMMANDS:
        assert f"\n    {command} " in err, err


def test_a_bad_argument_stays_one_line_and_names_the_help_to_read(capsys):
    assert main(["sizes", "--bogus"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["ckpt-emu: error: unrecognized arguments: --bogus (see ckpt-emu sizes --help)"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_help_ends_with_an_example(command):
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices[command]
    lines = sub.format_help().rstrip("\n").splitlines()
    heading = max(i for i, line in enumerate(lines) if line in ("example:", "examples:"))
    examples = lines[heading + 1:]
    assert examples and all(e.startswith(f"  ckpt-emu {command}") for e in examples), lines[heading:]


def _complete(line: str, tmp_path: Path) -> list[str]:
    """What a shell's tab key offers after ``line`` (argcomplete's protocol, as its bash hook runs it)."""
    out = tmp_path / "completions"
    env = dict(os.environ, _ARGCOMPLETE="1", _ARGCOMPLETE_IFS="\n", COMP_LINE=line, COMP_POINT=str(len(line)),
               _ARGCOMPLETE_STDOUT_FILENAME=str(out), _ARGCOMPLETE_SUPPRESS_SPACE="1")
    proc = subprocess.run([sys.executable, "-m", "emulator.cli"], env=env, capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return out.read_text().split("\n")


def test_shell_completion_offers_commands_flags_and_presets(tmp_path):
    assert set(_complete("ckpt-emu s", tmp_path)) == {"sizes", "simulate"}
    assert _complete("ckpt-emu run --qu", tmp_path) == ["--quiet"]
    presets = _complete("ckpt-emu sizes llama3-40", tmp_path)
    assert {"llama3-405b", "llama3-405b-subset"} <= set(presets), presets


def _plan_json(capsys, *argv) -> dict:
    assert main(["plan", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_plan_takes_a_config_one_way(tmp_path, capsys):
    """A config is ``plan CONFIG``, whatever it is (a file, a preset), planned for the job its flags
    name; ``--config`` is not a second spelling of it but one line saying what to give instead."""
    run_cfg = tmp_path / "run.yaml"
    run_cfg.write_text(yaml.safe_dump({"extends": "design-llama405-2048-nvme-pfs"}))
    by_file = _plan_json(capsys, str(run_cfg), "--accelerators", "1024")
    assert by_file["job"] == _plan_json(capsys, "design-llama405-2048-nvme-pfs", "--accelerators", "1024")["job"]
    assert by_file["job"]["accelerators"] == 1024
    assert main(["plan", "--config", str(run_cfg), "--accelerators", "1024"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ckpt-emu: error: --config: ") and "plan CONFIG" in err[0]


def test_plan_with_a_config_flag_besides_one_is_one_line(tmp_path, capsys):
    assert main(["plan", "llama3-8b", "--config", "llama3-70b", "--accelerators", "8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--config" in err[0], err
