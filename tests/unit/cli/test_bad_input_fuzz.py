"""The bad-input promise for inputs nobody wrote by hand (issue 54): Hypothesis draws configs over the
schema (every section and key, values of every type and none of the right one, keys that do not
exist) and command lines over every subcommand's flags (numbers, units, times, paths with control
characters, empty, too long), and each ends one of two ways:

* accepted: the command gets as far as its work (a run to the claim of its results folder, a
  simulation to its first mode, tune to its measuring run) and is stopped there by the test;
* refused: exit status 2, exactly one line ``ckpt-emu: error: ...``, and nothing written anywhere.

Never a traceback (exit 3, "internal error") and never another exception. In process, so sixty
examples a test take seconds (``FUZZ_N=2000`` draws more); a counterexample found becomes a named
case of the corpus, tests/unit/cli/bad_inputs.py.
"""
from __future__ import annotations

import dataclasses
import os
import typing
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from writeaudit import WriteAudit

from emulator.cli import build_parser, main
from emulator.config.schema import Config

SETTINGS = settings(max_examples=int(os.environ.get("FUZZ_N", "60")), deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


class Accepted(BaseException):
    """Raised where a command would start its work: the input was accepted (not an Exception, so
    the CLI's own handlers let it through)."""


def _accept(*_, **__):
    raise Accepted


@pytest.fixture
def stage(tmp_path, monkeypatch):
    """A working folder (and HOME) with a file of each kind, every command stopped where its work
    would begin."""
    import emulator.cli.tune as tune
    import emulator.launch.runner as runner
    import emulator.simulation.study as study
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(runner, "claim_results_folder", _accept)
    monkeypatch.setattr(tune, "_run", _accept)
    monkeypatch.setattr(study.Study, "run", _accept)
    (tmp_path / "afile").write_text("not a folder\n")
    (tmp_path / "results.json").write_text('{"modes": {}}\n')
    os.mkfifo(tmp_path / "fifo")
    return tmp_path


# --------------------------------------------------------------------------- values

UNITS = ("B", "KB", "GiB", "TB", "GB/s", "GiB/s", "Gb/s", "Gbps", "MB/s", "s", "ms", "m", "min", "h", "d", "%", "")
nasty_text = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", " ", "nan", "inf", "-inf", "1e400", "-1", "0", "0.0", "1e-400", "null", "~", "true",
                     "[1, 2]", "{a: 1}", "*a", "&a 1", "a\0b", "a\nb", "x" * 5000, "é", "\udcff", "..", "/",
                     "TMP/afile", "TMP/afile/x", "TMP/fifo", "TMP/nope/deeper", "n" * 300]),
    st.builds(lambda n, u: f"{n}{u}", st.one_of(st.integers(-10**20, 10**20), st.floats(allow_nan=True)),
              st.sampled_from(UNITS)),
)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True), nasty_text)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(nasty_text, inner, max_size=3)), max_leaves=8)


def _fields(cls) -> dict:
    """{yaml name: type} of a config dataclass."""
    hints = typing.get_type_hints(cls)
    return {("global" if f.name == "global_" else f.name): hints[f.name] for f in dataclasses.fields(cls)}


def _section_keys(tp) -> list[str]:
    for arg in (tp, *typing.get_args(tp)):
        if dataclasses.is_dataclass(arg):
            return list(_fields(arg))
    return []


SECTIONS = _fields(Config)
KEYS = {name: _section_keys(tp) for name, tp in SECTIONS.items()}
TIER_KEYS = ["backend", "path", "recycle", "allow_foreign", "every", "keep", "bucket", "prefix", "endpoint_url",
             "emulate", "replicas", "placement"]


@st.composite
def configs(draw) -> dict:
    """A config mapping over the schema: sections and keys that exist (and some that do not), each
    value of any type."""
    out: dict = {"extends": draw(st.sampled_from(["default", "llama3-8b", "llama3-8b-subset"]))}
    for section in draw(st.lists(st.sampled_from([*SECTIONS, "nosuch"]), max_size=4, unique=True)):
        keys = TIER_KEYS if section == "tiers" else KEYS.get(section, [])
        if section == "tiers":
            tier = draw(st.sampled_from(["local", "global", "memory", "peer", "nosuch"]))
            out["tiers"] = {tier: draw(st.dictionaries(st.sampled_from([*keys, "nosuch"]), values, max_size=3))}
        elif keys and draw(st.booleans()):
            out[section] = draw(st.dictionaries(st.sampled_from([*keys, "nosuch"]), values, max_size=3))
        else:
            out[section] = draw(values)
    return out


# --------------------------------------------------------------------------- the promise

def _promise(capsys, argv: list[str]) -> None:
    with WriteAudit(Path("/")) as audit:
        try:
            rc = main(argv)
        except Accepted:
            capsys.readouterr()
            return
        except SystemExit as exc:  # pragma: no cover - the parser never exits on its own
            rc = exc.code
    out, err = capsys.readouterr()
    if rc == 0:
        return
    lines = err.strip().splitlines()
    assert rc == 2, (argv, rc, err[-3000:])
    assert len(lines) == 1 and lines[0].startswith("ckpt-emu: error: ") and len(lines[0]) <= 1100, (argv, err)
    writes = [w for w in audit.writes if "__pycache__" not in w[1]]
    assert not writes, (argv, writes)


@SETTINGS
@given(data=configs(), command=st.sampled_from(["run", "sizes", "simulate", "plan"]))
def test_any_config_is_accepted_or_refused_in_one_line(stage, capsys, data, command):
    path = stage / "config.yaml"
    try:
        text = yaml.safe_dump(data, allow_unicode=True)
    except yaml.YAMLError:
        return  # not representable in YAML: no file holds it
    path.write_text(text, errors="surrogateescape")
    extra = {"run": ["--quiet", "--out", str(stage / "out")], "simulate": ["--days", "1", "--out", str(stage / "sim")]}
    _promise(capsys, [command, str(path), *extra.get(command, [])])


def _flags(command: str) -> list:
    """(flag, takes a value) of a subcommand's optional arguments (help and version aside)."""
    parser = next(a for a in build_parser()._actions if a.dest == "command").choices[command]
    return [(a.option_strings[-1], a.nargs != 0) for a in parser._actions
            if a.option_strings and a.dest not in ("help", "version")]


FLAGS = {c: _flags(c) for c in ("run", "sizes", "plan", "simulate", "tune", "compare")}
#: what each command is given besides the drawn flags, so that it writes only in the test's folder
BASE = {"run": ["--out", "TMP/out", "--set", "tiers.local.path=TMP/nvme/node{node}", "--set", "tiers.global.path=TMP/pfs"],
        "simulate": ["--out", "TMP/sim"], "plan": ["--plot", "TMP/plan.png"], "tune": ["--out", "TMP/tune"],
        "compare": ["TMP/results.json"], "sizes": []}


#: values a flag may well take: the examples get past the first check, into the later ones
PLAUSIBLE = st.sampled_from(["1", "2", "8", "1000", "0.5", "0.01", "10GB/s", "400Gb/s", "100GB", "1.5TiB", "90s", "5m",
                             "2h", "interval=1m,2m", "global_bandwidth=1GB/s,2GB/s", "node=5m", "all=1m",
                             "1:1:staging", "1:0", "checkpoint.saves=3", "run.scale=0.001", "127.0.0.1:29500",
                             "127.0.0.1", "write", "both", "planner", "config", "TMP/results.json"])


@st.composite
def command_lines(draw) -> list[str]:
    command = draw(st.sampled_from(sorted(FLAGS)))
    argv = [command]
    if command != "compare" and draw(st.booleans()):
        argv.append(draw(st.sampled_from(["default", "llama3-8b", "TMP/afile", "TMP/fifo", "nope", "a\0b", ""])))
    argv += BASE[command]
    for flag, takes in draw(st.lists(st.sampled_from(FLAGS[command]), max_size=4, unique=True)):
        argv.append(flag)
        if takes:
            argv.append(draw(st.one_of(nasty_text, st.integers(-10**9, 10**9).map(str), PLAUSIBLE,
                                       st.floats(allow_nan=True).map(repr))))
    return argv


@SETTINGS
@given(argv=command_lines())
def test_any_command_line_is_accepted_or_refused_in_one_line(stage, capsys, argv):
    _promise(capsys, [a.replace("TMP", str(stage)) for a in argv])
