"""The quick tier's guard names what a quick test would start, and lets the session's servers stop."""
from __future__ import annotations

from quickguard import forbidden


def test_starting_torchrun_a_run_or_a_server_is_named():
    assert forbidden(["torchrun", "--nproc-per-node", "2", "x.py"]) == "torchrun"
    assert forbidden(["python", "-m", "emulator.cli", "run", "default"]) == "a ckpt-emu run (torchrun)"
    assert forbidden(["bash", "scripts/rgw-server.sh", "start", "/tmp/x"]) == "a Ceph RGW"
    assert forbidden(["python", "-m", "emulator.cli", "plan", "default"]) is None


def test_the_session_rgw_stopping_after_the_last_quick_test_is_not_a_violation():
    """The whole suite runs system tests first; the RGW they started stops in the last test's
    teardown, which was a quick test's: the guard failed it."""
    assert forbidden(["bash", "/repo/scripts/rgw-server.sh", "stop", "/tmp/rgw"]) is None
