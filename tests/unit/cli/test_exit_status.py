"""Exit statuses that mean something (emulator/errors.py): 0 the design met its goals, 1 it missed
them (under --fail-on-miss / run.fail_on_miss), 2 bad input, 3 a run that could not finish.

In-process: the CLI with the launch replaced by a fake run that leaves a results folder, and the
launcher's reading of torchrun's log. tests/system/run/test_exit_status_e2e.py runs a real design that misses."""
from __future__ import annotations

import json
import os
import types
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
    result = {"confirmation": {"drains_beat_next_checkpoint": False, "deadline_misses": 2, "incomplete": 0,
                               "stopped_early": False, "checkpoints": 3, "checks": 3}}
    monkeypatch.setattr(tune, "tune", lambda cfg, **_: result)
    assert main(["tune", "--accelerators", "1024", "--json", "--fail-on-miss"]) == errors.EXIT_MISSED
    assert "tune's confirmation run: 2 deadline miss(es)" in capsys.readouterr().err
    result["confirmation"]["drains_beat_next_checkpoint"] = True
    assert main(["tune", "--accelerators", "1024", "--json", "--fail-on-miss"]) == errors.EXIT_OK
    # stopped early (Ctrl-C): nothing confirmed, whatever --fail-on-miss says
    result["confirmation"].update(drains_beat_next_checkpoint=None, stopped_early=True, checkpoints=0)
    assert main(["tune", "--accelerators", "1024", "--json"]) == errors.EXIT_INTERRUPTED


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


AGENT_TRACEBACK = """\
[rank0]: ckpt-emu: warning: something the user should know
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/torch/distributed/run.py", line 892, in main
    run(args)
  File "/venv/lib/python3.11/site-packages/multiprocessing/connection.py", line 505, in Client
    raise ValueError('not the reason: a line of code')
FileNotFoundError: [Errno 2] No such file or directory: '/tmp/pymp-1/listener-2'
"""


def test_an_agent_that_failed_by_itself_is_named_with_its_exception_not_as_a_rank(tmp_path):
    """A run whose torchrun agent failed before any rank did said "a rank failed (exit status 1)",
    and nothing else once its torchrun.log was gone (CI keeps the one line)."""
    log = tmp_path / "torchrun.log"
    log.write_text(AGENT_TRACEBACK)
    assert str(run_failure(log, 1)).startswith(
        "torchrun's agent failed: FileNotFoundError: [Errno 2] No such file or directory: '/tmp/pymp-1/listener-2' "
        "(full log: ")
    log.write_text("")
    assert str(run_failure(log, 1)).startswith("torchrun's agent failed (exit status 1) and no rank said why")


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


# torchrun's summary of a run whose rank 1 another process SIGKILLed (a real one: issue 54, 7)
KILLED_RANK = """\
E1207 00:33:17.709000 11654 site-packages/torch/distributed/elastic/multiprocessing/api.py:836] \
torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal SIGKILL
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
======================================================
forked_main FAILED
------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-07_00:33:26
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 11850)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 11850
======================================================
"""


def test_a_rank_a_signal_killed_is_named_with_its_signal_and_is_no_bad_input(tmp_path):
    """7: a SIGKILLed rank was "a rank failed (exit status 1)", torchrun's own status."""
    log = tmp_path / "torchrun.log"
    log.write_text(KILLED_RANK)
    exc = run_failure(log, 1)
    assert exc.exit_code == errors.EXIT_FAILED
    assert str(exc).startswith("rank 1 killed by signal SIGKILL (9): not by the run itself"), str(exc)


def test_an_agent_a_signal_killed_is_named_with_its_signal_and_is_no_bad_input(tmp_path):
    """7: a SIGKILLed agent ended the run with exit status 2, the bad-input status."""
    log = tmp_path / "torchrun.log"
    log.write_text("I1207 00:33:10 agent started\n")
    exc = run_failure(log, -9)
    assert exc.exit_code == errors.EXIT_FAILED
    assert str(exc).startswith("the ranks' launcher (torchrun's agent) was killed by signal SIGKILL (9)"), str(exc)


FULL = types.SimpleNamespace(f_bfree=0, f_bavail=0, f_frsize=4096)  # os.statvfs of a full disk


def test_a_results_disk_that_filled_during_the_run_is_named_and_is_no_bad_input(tmp_path, monkeypatch):
    """7: a results disk filled mid-run left an empty torchrun.log and ended in exit status 2."""
    from emulator.launch import failure
    log = tmp_path / "torchrun.log"
    log.write_text("")
    statvfs = os.statvfs
    monkeypatch.setattr(failure.os, "statvfs", lambda p: FULL
                        if str(p) == str(tmp_path) else statvfs(p))
    exc = run_failure(log, 1, folders=(("results folder", tmp_path), ("tiers.global", tmp_path.parent)))
    assert exc.exit_code == errors.EXIT_FAILED
    assert str(exc).startswith(f"results folder {tmp_path} is full (0 KiB free): the run could not write there"), exc


def test_a_tier_disk_that_filled_is_named_when_the_log_says_nothing_better(tmp_path, monkeypatch):
    from emulator.launch import failure
    log = tmp_path / "torchrun.log"
    log.write_text("")
    statvfs = os.statvfs
    monkeypatch.setattr(failure.os, "statvfs", lambda p: FULL
                        if str(p).endswith("pfs") else statvfs(p))
    (tmp_path / "pfs").mkdir()
    exc = run_failure(log, 1, folders=(("results folder", tmp_path), ("tiers.global", tmp_path / "pfs")))
    assert exc.exit_code == errors.EXIT_FAILED and str(exc).startswith(f"tiers.global {tmp_path / 'pfs'} is full")
    log.write_text(KILLED_RANK)  # the log says why: that first
    assert str(run_failure(log, 1, folders=(("tiers.global", tmp_path / "pfs"),))).startswith("rank 1 killed by signal")
