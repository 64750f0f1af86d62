"""torchrun's agent forks the ranks from a fork server forked from itself, where it imported their
code once and had no thread of torchrun's yet (emulator/rank/agent.py), and a forked rank behaves as
a rank torchrun executes (``forked_main``)."""
from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from crashcheck import is_alive, parent_of

from emulator.rank import agent, run


def _torchrun_config(cmd, cmd_args):
    def config_from_args(args):
        return SimpleNamespace(start_method="spawn"), cmd, list(cmd_args)
    return config_from_args


def test_the_ranks_are_forked_from_the_agents_fork_server(monkeypatch):
    started = []
    monkeypatch.setattr(agent, "start_fork_server", lambda: started.append(True))
    config = agent.fork_ranks(_torchrun_config(sys.executable, ["-u", "-m", "emulator.rank", "--config", "c.json"]))
    launch, entrypoint, args = config(None)
    assert (launch.start_method, entrypoint, args) == ("forkserver", run.forked_main, ["--config", "c.json"])
    assert started == [True]


#: in a fresh interpreter (this one has pytest's threads): start the fork server, say what it is
_FORK_SERVER = """
import json, os, sys
from multiprocessing import forkserver
from emulator.rank import agent
import tempfile
held = tempfile.NamedTemporaryFile()  # one of the agent's own descriptors
agent.start_fork_server()
print(json.dumps({"me": os.getpid(), "server": forkserver._forkserver._forkserver_pid, "held": held.name,
                  "socket": forkserver._forkserver._forkserver_address}), flush=True)
sys.stdin.read()
"""


def _name(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def test_the_fork_server_is_a_fork_of_the_agent_with_one_thread_and_dies_with_it_leaving_nothing():
    proc = subprocess.Popen([sys.executable, "-c", _FORK_SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        pids = json.loads(proc.stdout.readline())
        server = pids["server"]
        deadline = time.time() + 10  # it names itself once it closed the agent's descriptors
        while _name(server) != "ckpt-forkserver" and time.time() < deadline:
            time.sleep(0.05)
        assert _name(server) == "ckpt-forkserver" and parent_of(server) == pids["me"]
        # a fork: the agent's program, its modules loaded (no new interpreter), and one thread
        assert Path(f"/proc/{server}/cmdline").read_bytes() == Path(f"/proc/{pids['me']}/cmdline").read_bytes()
        assert "libtorch" in Path(f"/proc/{server}/maps").read_text()
        assert os.listdir(f"/proc/{server}/task") == [str(server)]
        fds = Path(f"/proc/{server}/fd")
        assert pids["held"] not in {os.readlink(fd) for fd in fds.iterdir()}
        assert pids["held"] in {os.readlink(fd) for fd in Path(f"/proc/{pids['me']}/fd").iterdir()}
        assert Path(pids["socket"]).is_socket()
    finally:
        proc.kill()  # as kill -9 ends an agent: no exit code of its own runs
        proc.wait()
    deadline = time.time() + 10
    while time.time() < deadline and is_alive(server):
        time.sleep(0.1)
    assert not is_alive(server)
    assert not Path(pids["socket"]).parent.exists()  # its folder in $TMPDIR, removed by the server


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
    # the agent's hook (torchrun's agent starts no process group); this test process may have started
    # several, each wrapping the hook with its "[rankN]:" prefix
    sys.excepthook = sys.__excepthook__
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


#: in a fresh interpreter: fork a fork server whose end (removing its socket) takes a while, and
#: report its exit status, or 99 if it came back into this process's code instead of ending
_ENDING_FORK_SERVER = """
import os, sys, time
from emulator.rank import agent
ready, ending = sys.argv[1:]
def slow_removal(address):
    open(ending, "w").close()
    time.sleep(1)
agent._remove_socket = slow_removal
me = os.getpid()
try:
    pid = agent.fork_running(sys.executable, ["-c", f"open({ready!r}, 'w').close()\\nimport time\\n"
                                                   "while True: time.sleep(0.01)"], [])
finally:
    if os.getpid() != me:
        os._exit(99)
print(pid, flush=True)
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


def _wait_for(path: Path) -> None:
    deadline = time.time() + 30
    while not path.exists():
        assert time.time() < deadline, f"{path.name} never came"
        time.sleep(0.01)


def test_a_second_sigterm_while_the_fork_server_ends_does_not_take_it_back_into_the_agents_code(tmp_path):
    """A killed agent's threads exit one by one, and the kernel sends the fork server its death
    signal at each (it is handed from thread to thread): a second SIGTERM that came while the fork
    server ended took it back into the agent's code, which it then ran to the end of a normal exit,
    seconds of torch's teardown, while the ranks it forked trained on as orphans."""
    ready, ending = tmp_path / "ready", tmp_path / "ending"
    proc = subprocess.Popen([sys.executable, "-c", _ENDING_FORK_SERVER, str(ready), str(ending)],
                            stdout=subprocess.PIPE, text=True)
    try:
        server = int(proc.stdout.readline())
        _wait_for(ready)
        os.kill(server, signal.SIGTERM)
        _wait_for(ending)
        os.kill(server, signal.SIGTERM)
        assert int(proc.stdout.readline()) == 128 + signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()


def test_the_fork_servers_socket_fits_however_deep_tmpdir_is(tmp_path, monkeypatch):
    """A deep $TMPDIR (a test's tmp_path, a job's scratch) made the fork server's socket address longer
    than a socket holds: the agent failed with "AF_UNIX path too long". Its folder is then a private
    one in /tmp, removed at exit; a short $TMPDIR is used as it is."""
    from multiprocessing import connection, process
    config = process.current_process()._config
    deep = tmp_path / ("d" * 60) / ("e" * 40)
    deep.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    monkeypatch.delitem(config, "tempdir", raising=False)
    agent.socket_folder_that_fits()
    folder = config["tempdir"]
    try:
        assert folder.startswith("/tmp/pymp-") and os.stat(folder).st_mode & 0o777 == 0o700
        assert len(os.fsencode(connection.arbitrary_address("AF_UNIX"))) <= agent.SOCKET_PATH_MAX
    finally:
        shutil.rmtree(folder)
        del config["tempdir"]
    monkeypatch.setattr(tempfile, "tempdir", "/tmp")
    agent.socket_folder_that_fits()
    assert "tempdir" not in config  # multiprocessing makes its own in $TMPDIR, as usual
