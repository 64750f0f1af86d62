"""Exit statuses that mean something (emulator/errors.py): 0 the design met its goals, 1 it missed
them (under --fail-on-miss / run.fail_on_miss), 2 bad input, 3 a run that could not finish.

In-process: the CLI with the launch replaced by a fake run that leaves a results folder, and the
launcher's reading of torchrun's log. tests/system/run/test_exit_status_e2e.py runs a real design that misses."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from emulator import errors
from emulator.cli import main
from emulator.launch.launcher import run_failure
from emulator.results.verdict import misses

MET = {"modes": {"sync": {"deadline_misses": 0, "incomplete": 0, "at_risk": 0},
                 "async": {"deadline_misses": 0, "incomplete": 0, "at_risk": 0}},
       "load": {"loads": 2, "ok": True}, "faults": {"recovery": None}, "recoveries": []}


def _with(**changes) -> dict:
    res = json.loads(json.dumps(MET))
    for path, value in changes.items():
        *keys, last = path.split("__")
        node = res
        for k in keys:
            node = node[k]
        node[last] = value
    return res


def test_the_verdict_names_every_miss():
    assert misses(MET) == []
    assert misses(_with(modes__async__deadline_misses=2)) == ["async: 2 deadline miss(es)"]
    assert misses(_with(modes__sync__incomplete=1)) == ["sync: 1 incomplete checkpoint(s)"]
    assert misses(_with(modes__sync__at_risk=1)) == ["sync: 1 checkpoint(s) not durable when training stopped"]
    assert misses(_with(load__ok=False, load__errors=["rank 1: checksum mismatch"])) == \
        ["a load failed: rank 1: checksum mismatch"]
    assert misses(_with(recoveries=[{"class": "node", "ok": False}])) == ["the recovery after a node failure failed"]
    assert misses({"figures": {"save": {}}, "ranks": []}) == []  # an MLPerf run: no goal of its own


@pytest.fixture
def fake_run(monkeypatch):
    """``ckpt-emu run`` whose launch leaves ``results`` (and a report) in the results folder."""
    state = {"results": MET}

    def execute_run(cfg, **_):
        out = Path(cfg.run.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.txt").write_text("the report\n")
        (out / "results.json").write_text(json.dumps(state["results"]))
        return out
    import emulator.launch.runner as runner
    monkeypatch.setattr(runner, "execute_run", execute_run)
    return state


@pytest.mark.parametrize("gate", [[], ["--fail-on-miss"], ["--set", "run.fail_on_miss=true"]])
def test_run_exits_1_only_when_the_design_missed_under_the_gate(tmp_path, capsys, fake_run, gate):
    assert main(["run", "--out", str(tmp_path / "met"), *gate]) == 0
    assert "missed" not in capsys.readouterr().err
    fake_run["results"] = _with(modes__async__deadline_misses=3)
    assert main(["run", "--out", str(tmp_path / "missed"), *gate]) == (1 if gate else 0)
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("ckpt-emu: the design missed its goals: async: 3 deadline miss(es)")
    assert ("--fail-on-miss makes it 1" in err[-1]) is (not gate)


def test_tune_exits_1_when_its_confirmation_failed(monkeypatch, capsys):
    import emulator.cli.tune as tune
    result = {"confirmation": {"drains_beat_next_checkpoint": False, "deadline_misses": 2, "incomplete": 0}}
    monkeypatch.setattr(tune, "tune", lambda cfg, **_: result)
    assert main(["tune", "--accelerators", "1024", "--json", "--fail-on-miss"]) == errors.EXIT_MISSED
    assert "tune's confirmation run: 2 deadline miss(es)" in capsys.readouterr().err
    result["confirmation"]["drains_beat_next_checkpoint"] = True
    assert main(["tune", "--accelerators", "1024", "--json", "--fail-on-miss"]) == errors.EXIT_OK


ROOT_CAUSE = """ckpt-emu: error: rank 1: {line}
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
emulator.rank FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-26_07:00:00
  host      : node0
  rank      : 1 (local_rank: 1)
  exitcode  : {code} (pid: 4242) {signal}
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 4242
============================================================
"""


@pytest.mark.parametrize("code, signal, kind", [
    (2, "", errors.EXIT_BAD_INPUT),        # a rank found bad input (a tier held by another run)
    (3, "", errors.EXIT_FAILED),           # a rank ended the run (a checkpoint that cannot be made durable)
    (-9, "(SIGKILL)", errors.EXIT_FAILED),  # a rank died
])
def test_a_failed_launch_is_bad_input_or_failed_to_run_by_its_first_failed_rank(tmp_path, code, signal, kind):
    log = tmp_path / "torchrun.log"
    log.write_text(ROOT_CAUSE.format(line="the reason", code=code, signal=signal))
    exc = run_failure(log, 1)
    assert exc.exit_code == kind and str(exc).startswith("rank 1: the reason (full log: ")


def test_torchrun_that_started_no_rank_is_bad_input(tmp_path):
    log = tmp_path / "torchrun.log"
    log.write_text("torch.distributed.DistNetworkError: failed to reach the rendezvous endpoint\n")
    assert run_failure(log, 1).exit_code == errors.EXIT_BAD_INPUT


def test_an_internal_error_is_failed_to_run_with_its_traceback(monkeypatch, capsys):
    import emulator.cli.sizes as sizes

    def boom(args):
        raise RuntimeError("a bug")
    monkeypatch.setattr(sizes, "cmd_sizes", boom)
    from emulator.cli import build_parser
    parser = build_parser()
    monkeypatch.setattr("emulator.cli.build_parser", lambda: parser)
    next(a for a in parser._actions if a.dest == "command").choices["sizes"].set_defaults(func=boom)
    assert main(["sizes"]) == errors.EXIT_FAILED
    err = capsys.readouterr().err
    assert "RuntimeError: a bug" in err and err.strip().endswith("please report it")
