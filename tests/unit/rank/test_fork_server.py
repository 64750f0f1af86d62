"""torchrun's agent forks the ranks from itself, where it imported their code once
(emulator/rank/agent.py), and a forked rank behaves as a rank torchrun executes (``forked_main``)."""
from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from types import SimpleNamespace

from emulator.rank import agent, run


def _torchrun_config(cmd, cmd_args):
    def config_from_args(args):
        return SimpleNamespace(start_method="spawn"), cmd, list(cmd_args)
    return config_from_args


def test_the_ranks_are_forked_from_the_agent_that_imported_their_code():
    config = agent.fork_ranks(_torchrun_config(sys.executable, ["-u", "-m", "emulator.rank", "--config", "c.json"]))
    launch, entrypoint, args = config(None)
    assert (launch.start_method, entrypoint, args) == ("fork", run.forked_main, ["--config", "c.json"])


def test_any_other_program_is_started_as_torchrun_starts_it():
    config = agent.fork_ranks(_torchrun_config(sys.executable, ["-u", "train.py", "--lr", "1"]))
    launch, entrypoint, args = config(None)
    assert (launch.start_method, entrypoint, args) == ("spawn", sys.executable, ["-u", "train.py", "--lr", "1"])


def _forked(outcome, stderr_path, session_path):
    def main(argv):
        with open(session_path, "w") as f:
            f.write(f"{os.getsid(0) == os.getpid()} {argv}")
        if outcome == "signals":
            return 3 * (signal.getsignal(signal.SIGTERM) != signal.SIG_DFL)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome
    sys.stdout = open(os.devnull, "w")  # not pytest's capture: the files a rank has
    sys.stderr = open(stderr_path, "w")
    run.main = main
    run.forked_main("--config", "c.json")


def _start(tmp_path, outcome):
    stderr, session = tmp_path / "stderr", tmp_path / "session"
    proc = multiprocessing.get_context("fork").Process(target=_forked, args=(outcome, stderr, session))
    proc.start()
    proc.join(60)
    return proc.exitcode, stderr.read_text(), session.read_text()


def test_a_forked_rank_runs_in_a_session_of_its_own_with_its_status_the_processes(tmp_path):
    assert _start(tmp_path, 0) == (0, "", "True ['--config', 'c.json']")
    assert _start(tmp_path, 2)[0] == 2  # bad input


def _agent_handler(signum, frame):
    raise RuntimeError("the agent's handler")


def test_a_forked_rank_has_the_interpreters_signal_handlers_not_the_agents(tmp_path):
    old = signal.signal(signal.SIGTERM, _agent_handler)  # as torchrun's agent has it
    try:
        assert _start(tmp_path, "signals")[0] == 0
    finally:
        signal.signal(signal.SIGTERM, old)


def test_an_uncaught_exception_is_printed_by_the_interpreters_hook(tmp_path):
    status, stderr, _ = _start(tmp_path, ValueError("no such tier"))
    assert status == 1
    assert stderr.startswith("Traceback") and stderr.rstrip().endswith("ValueError: no such tier"), stderr
