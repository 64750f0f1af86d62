"""The kill campaign's orphan check (bench/crash.py) sees every process a killed run left, ranks
forked from torchrun's agent included: their command line is the agent's and names
no config, so the check goes by the environment every process of a campaign run inherits."""
import subprocess
import sys
import time

import pytest

from bench import crash


def _start(argv, env):
    proc = subprocess.Popen(argv, env=env)
    time.sleep(0.3)  # exec'd: /proc/PID/environ is the child's own
    return proc


@pytest.mark.quick
def test_a_process_whose_command_line_names_no_config_is_an_orphan(tmp_path):
    proc = _start([sys.executable, "-c", "import time; time.sleep(30)"], crash.run_environment(tmp_path))
    try:
        assert proc.pid in crash._orphans(tmp_path)
    finally:
        proc.kill()
        proc.wait()
    assert proc.pid not in crash._orphans(tmp_path)


@pytest.mark.quick
def test_another_campaigns_processes_are_not_this_ones(tmp_path):
    other = tmp_path / "other"
    proc = _start([sys.executable, "-c", "import time; time.sleep(30)"], crash.run_environment(other))
    try:
        assert proc.pid not in crash._orphans(tmp_path)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.quick
def test_orphans_are_named_and_killed_before_the_tiers_are_checked(tmp_path):
    """An orphan still checkpointing deletes a step (retention) between the check's reading of its
    manifest and of its files: a torn checkpoint that is only the check racing a live run."""
    proc = _start([sys.executable, "-c", "import time; time.sleep(30)"], crash.run_environment(tmp_path))
    try:
        orphans = crash._orphans(tmp_path)
        assert crash._names(orphans).startswith("python")  # its name, as ps shows it
        crash._kill(orphans)
        assert crash._orphans(tmp_path) == []
    finally:
        proc.kill()
        proc.wait()
