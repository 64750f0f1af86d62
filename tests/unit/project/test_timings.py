"""The suite's durations as data (tests/support/timings.py): each test's seconds, its worker and when it
ended, from a real pytest-xdist session of two workers."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import timings

SUPPORT = Path(timings.__file__).parent

CONFTEST = """
import timings

def pytest_addoption(parser):
    timings.add_option(parser)

def pytest_configure(config):
    timings.configure(config)
"""

TESTS = """
import time

def test_short():
    pass

def test_long():
    time.sleep(0.3)

def test_third():
    pass
"""


def test_each_test_has_its_seconds_its_worker_and_when_it_ended(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_some.py").write_text(TESTS)
    out = tmp_path / "durations.json"
    env = {**os.environ, "PYTHONPATH": str(SUPPORT)}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
                           "--durations-json", str(out), "test_some.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tests = json.loads(out.read_text())["tests"]
    assert set(tests) == {f"test_some.py::test_{n}" for n in ("short", "long", "third")}
    assert list(tests)[0] == "test_some.py::test_long" and tests["test_some.py::test_long"]["seconds"] >= 0.3
    assert {t["worker"] for t in tests.values()} <= {"gw0", "gw1"}
    # a test ends no sooner than its own seconds into the session
    assert all(t["ended_s"] >= t["seconds"] > 0 for t in tests.values()), tests


def test_the_tail_is_each_workers_last_end(tmp_path, capsys):
    path = tmp_path / "durations-part.json"
    path.write_text(json.dumps({"tests": {
        "a": {"seconds": 5.0, "worker": "gw0", "ended_s": 5.0}, "b": {"seconds": 9.0, "worker": "gw1", "ended_s": 9.0},
        "c": {"seconds": 1.0, "worker": "gw0", "ended_s": 6.0}}, "seconds": 15.0}))
    assert timings.last_ends(path) == {"gw0": 6.0, "gw1": 9.0}
    assert timings.main([str(path), "--tail"]) == 0
    assert capsys.readouterr().out == "durations-part: gw0 6 s, gw1 9 s\n"
