"""The quick tier's guard (tests/support/quickguard.py) names what a quick test would start, however
it starts it (an audit hook, not one function's arguments), follows it into the processes it starts,
and lets the session's servers stop."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from quickguard import classify, forbidden, watched


def test_starting_torchrun_a_run_or_a_server_is_named():
    assert forbidden(["torchrun", "--nproc-per-node", "2", "x.py"]) == "torchrun"
    assert forbidden(["python", "-m", "emulator.cli", "run", "default"]) == "a ckpt-emu run (torchrun)"
    assert forbidden(["bash", "scripts/rgw-server.sh", "start", "/tmp/x"]) == "a Ceph RGW"
    assert forbidden(["python", "-m", "emulator.cli", "plan", "default"]) is None
    assert forbidden("cd /tmp && exec prometheus --config.file=p.yml") == "a Prometheus server"
    assert forbidden(["sh", "-c", "sleep 1; radosgw -f"]) == "a Ceph RGW"
    assert forbidden(["python", "-c", "print('prometheus')"]) is None  # code, not a shell's words
    assert forbidden(["python", "x.py"], {"TORCHELASTIC_RUN_ID": "j", "RANK": "0"}) == "torchrun's ranks"


def test_the_session_rgw_stopping_after_the_last_quick_test_is_not_a_violation():
    """The whole suite runs system tests first; the RGW they started stops in the last test's
    teardown, which was a quick test's: the guard failed it."""
    assert forbidden(["bash", "/repo/scripts/rgw-server.sh", "stop", "/tmp/rgw"]) is None


def test_os_system_is_caught_before_the_program_starts():
    """``os.system`` never went through subprocess.Popen, which the guard used to replace."""
    with watched() as seen:
        os.system("prometheus --config.file=/nonexistent --web.listen-address=127.0.0.1:0")
    assert seen == ["a Prometheus server"]


@pytest.mark.parametrize("start", [
    lambda argv: os.execv(argv[0], argv),
    lambda argv: os.posix_spawn(argv[0], argv, os.environ),
    lambda argv: subprocess.Popen(argv, stdout=subprocess.DEVNULL),
], ids=["execv", "posix_spawn", "Popen"])
def test_every_way_of_starting_a_program_is_caught(start):
    with watched() as seen:
        start(["/usr/bin/torchrun", "--nproc-per-node", "2", "train.py"])
    assert seen == ["torchrun"]


#: a python -c whose code starts torchrun, in the two ways a script can, nothing on its command line
#: saying so: torchrun's module run as a program (runpy), and its agent starting a rank, known by the
#: environment torchrun gives it. Stand-ins here, with no torch to import (3 s of CPU each):
#: tests/system/run/test_quickguard_torchrun_e2e.py runs the real torch.distributed.run.
_RUNPY = "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__')"
_RANKS = ("import os, subprocess, sys; subprocess.run([sys.executable, '-c', 'pass'], "
          "env=dict(os.environ, TORCHELASTIC_RUN_ID='none', RANK='0'))")


def test_a_python_c_that_runs_torchruns_module_is_caught_in_the_child(tmp_path):
    run = tmp_path / "torch" / "distributed" / "run.py"
    run.parent.mkdir(parents=True)
    run.write_text("open(__file__ + '.ran', 'w').close()\n")
    with watched() as seen:
        proc = subprocess.run([sys.executable, "-c", _RUNPY, str(run)], capture_output=True, text=True, timeout=60)
    assert seen == ["torchrun"], proc.stderr
    assert proc.returncode != 0 and not run.with_name("run.py.ran").exists()


def test_a_python_c_whose_agent_starts_ranks_is_caught_in_the_child():
    with watched() as seen:
        proc = subprocess.run([sys.executable, "-c", _RANKS], capture_output=True, text=True, timeout=60)
    assert seen == ["torchrun's ranks"], proc.stderr
    assert proc.returncode != 0


def test_a_violation_a_child_swallows_still_reaches_the_test():
    code = ("import os\ntry:\n    os.system('prometheus --version')\nexcept BaseException:\n    pass\n")
    with watched() as seen:
        subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert seen == ["a Prometheus server"]


def test_a_server_bound_in_the_tests_process_is_caught():
    """moto's in-process server binds its port from moto's and werkzeug's code (its thread's body,
    run here: ``start`` would wait for a server that never comes up)."""
    from moto.server import ThreadedMotoServer
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    with watched() as seen:
        server._server_entry()
    assert seen == ["a moto server"] and server._server is None


def test_what_a_quick_test_may_do_is_not_caught():
    """A socket bound by the test itself, a Unix socket, an import of torchrun's module, a python
    child that starts nothing of the kind."""
    import socket
    with watched() as seen:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
        import torch.distributed.run  # noqa: F401 - imported, not run
        subprocess.run([sys.executable, "-c", "import subprocess; subprocess.run(['true'])"], check=True, timeout=60)
    assert seen == []
    assert classify("socket.bind", (socket.socket(socket.AF_UNIX),), sys._getframe()) is None
