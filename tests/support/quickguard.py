"""What a quick test (tests/unit/) may not do: start torchrun or a ``ckpt-emu run``, start a server
(moto, Ceph RGW, Prometheus), or move multi-GiB data. conftest.py applies it to every quick test, so a
system test filed under tests/unit/ fails loudly, naming what it started, instead of slowing the
quick tier down. The guard follows the test into the Python processes it starts (a ``ckpt-emu tune``
that would start a confirming run): quickguard_site/sitecustomize.py installs it there.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

#: fixtures that start a server: a test using one is a system test
SERVER_FIXTURES = ("s3_server", "s3_endpoint", "s3_bucket", "rgw_server", "rgw_bucket", "prometheus")
#: markers of system tests
SYSTEM_MARKERS = ("large",)
#: set in a quick test's environment: its child processes guard themselves too
ENV = "CKPT_EMU_TEST_QUICK_GUARD"
SITE = Path(__file__).resolve().parent / "quickguard_site"

#: a command line naming one of these starts torchrun, ranks or a server
_PROGRAMS = {"torchrun": "torchrun", "prometheus": "a Prometheus server", "radosgw": "a Ceph RGW",
             "ceph-mon": "a Ceph RGW", "ceph-osd": "a Ceph RGW", "rgw-server.sh": "a Ceph RGW",
             "moto_server": "a moto server", "docker": "containers"}
_MODULES = {"torch.distributed.run": "torchrun", "emulator.rank": "a rank", "emulator.rank.agent": "torchrun",
            "moto.server": "a moto server"}


class QuickTierViolation(RuntimeError):
    """Raised in a quick test's child process that tries to start what the quick tier may not."""


def message(what: str) -> str:
    return (f"a quick test (tests/unit/) started {what}: it is a system test, move it under tests/system/ "
            "(docs/testing.md)")


def forbidden(argv) -> str | None:
    """What the command ``argv`` would start that a quick test may not, or None."""
    if isinstance(argv, (str, bytes, os.PathLike)):
        argv = os.fsdecode(argv).split()
    args = [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in argv]
    if "--help" in args or "-h" in args:
        return None  # prints its help and starts nothing
    for i, arg in enumerate(args):
        name = os.path.basename(arg)
        if name == "rgw-server.sh" and args[i + 1:i + 2] == ["stop"]:
            return None  # the session's RGW stopping after the last test, whichever tier that was
        if name in _PROGRAMS:
            return _PROGRAMS[name]
        if arg == "-m" and i + 1 < len(args):
            module = args[i + 1]
            if module in _MODULES:
                return _MODULES[module]
            if module in ("emulator.cli", "emulator") and "run" in args[i + 2:]:
                return "a ckpt-emu run (torchrun)"
        if name == "ckpt-emu" and "run" in args[i + 1:]:
            return "a ckpt-emu run (torchrun)"
    return None


def guarded_popen(refuse):
    """subprocess.Popen that calls ``refuse(what)`` instead of starting what a quick test may not."""
    class GuardedPopen(subprocess.Popen):
        def __init__(self, args, *rest, **kwargs):
            what = forbidden(args)
            if what:
                refuse(what)
            super().__init__(args, *rest, **kwargs)
    return GuardedPopen


def _fail(what: str):
    import pytest
    pytest.fail(message(what), pytrace=False)


def check_needs(item) -> None:
    """Fail the quick test ``item`` before its fixtures start if it asks for a server or has a system marker."""
    servers = [f for f in SERVER_FIXTURES if f in item.fixturenames]
    if servers:
        _fail(f"a server (fixture {', '.join(servers)})")
    marked = [m for m in SYSTEM_MARKERS if item.get_closest_marker(m)]
    if marked:
        _fail(f"work marked {', '.join(marked)}")


def guard(monkeypatch) -> None:
    """For the rest of a quick test, starting torchrun, a run or a server fails it, in the test's
    process and in the Python processes it starts."""
    monkeypatch.setattr(subprocess, "Popen", guarded_popen(_fail))
    monkeypatch.setattr("moto.server.ThreadedMotoServer.start", lambda self: _fail("a moto server"))
    monkeypatch.setenv(ENV, "1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, (str(SITE), os.environ.get("PYTHONPATH")))))


def install_in_child() -> None:
    """In a child process of a quick test: refuse what the test itself may not start."""
    def refuse(what):
        raise QuickTierViolation(message(what))
    subprocess.Popen = guarded_popen(refuse)
