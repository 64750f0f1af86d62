"""What a quick test (tests/unit/) may not do: start torchrun or a ``ckpt-emu run``, start a server
(moto, Ceph RGW, Prometheus), or move multi-GiB data. conftest.py applies it to every quick test, so a
system test filed under tests/unit/ fails loudly, naming what it started, instead of slowing the
quick tier down.

The guard is an audit hook (``sys.addaudithook``, PEP 578), so it sees every way a test starts
something, not one function's arguments: ``subprocess``, ``os.system``, ``os.exec*``,
``os.posix_spawn`` (what it starts: the program, a module run with ``-m``, a shell's words, an
environment torchrun gives its ranks), a module run as a program through ``runpy`` (``python -m``,
or ``runpy.run_module`` in a ``python -c``), and an internet socket bound by a server's code (moto's,
torchrun's agent's). It follows the test into the Python processes it starts, whichever way they
start (quickguard_site/sitecustomize.py installs it there): what a child tried is appended to a file
the test's guard reads when the test ends, so a child that swallows the error still fails the test.
"""
from __future__ import annotations

import os
import shlex
import socket
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

#: fixtures that start a server: a test using one is a system test
SERVER_FIXTURES = ("s3_server", "s3_endpoint", "s3_bucket", "rgw_server", "rgw_bucket", "prometheus")
#: markers of system tests
SYSTEM_MARKERS = ("large",)
#: set in a quick test's environment (the file its child processes report to): they guard themselves too
ENV = "CKPT_EMU_TEST_QUICK_GUARD"
SITE = Path(__file__).resolve().parent / "quickguard_site"

#: a program of one of these names starts torchrun, ranks or a server
_PROGRAMS = {"torchrun": "torchrun", "prometheus": "a Prometheus server", "radosgw": "a Ceph RGW",
             "ceph-mon": "a Ceph RGW", "ceph-osd": "a Ceph RGW", "rgw-server.sh": "a Ceph RGW",
             "moto_server": "a moto server", "docker": "containers"}
#: a module run as a program (``-m``, runpy) that starts one
_MODULES = {"torch.distributed.run": "torchrun", "emulator.rank": "a rank", "emulator.rank.agent": "torchrun",
            "moto.server": "a moto server"}
#: the same modules' files, as runpy executes them
_MODULE_FILES = {os.path.join(*m.split(".")) + suffix: what for m, what in _MODULES.items()
                 for suffix in (".py", os.sep + "__main__.py")}
#: torchrun gives each rank it starts these in its environment
_RANK_ENV = ("TORCHELASTIC_RUN_ID",)
#: code that serves on a port: an internet socket bound inside one of these modules starts a server
_SERVING = {"moto": "a moto server", "werkzeug": "a moto server"}
#: ... and, in a child process (the test's own may unit-test the agent's helpers), inside these
_SERVING_IN_CHILDREN = {**_SERVING, "torch.distributed.elastic": "torchrun", "emulator.rank.agent": "torchrun"}
_STARTS = ("subprocess.Popen", "os.exec", "os.posix_spawn")
_SHELLS = ("sh", "bash", "dash", "zsh")


class QuickTierViolation(BaseException):
    """Raised where a quick test's process, or a child of it, starts what the quick tier may not; a
    BaseException, so that code catching Exception does not hide it."""


def message(what: str) -> str:
    return (f"a quick test (tests/unit/) started {what}: it is a system test, move it under tests/system/ "
            "(docs/testing.md)")


def _words(argv) -> list[str]:
    if isinstance(argv, (str, bytes, os.PathLike)):
        return _split(os.fsdecode(argv))
    return [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in argv]


def _split(command: str) -> list[str]:
    try:
        return list(shlex.shlex(command, posix=True, punctuation_chars=True))
    except ValueError:  # an unbalanced quote: the words as they stand
        return command.split()


def forbidden(argv, env=None) -> str | None:
    """What the command ``argv`` (a list, or a shell's command line) would start that a quick test
    may not, or None; ``env``: the environment it is given (torchrun's ranks are known by theirs)."""
    if env is not None and set(_RANK_ENV) & {os.fsdecode(k) for k in env}:
        return "torchrun's ranks"
    args = _words(argv)
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
        if i > 0 and args[i - 1] == "-c" and os.path.basename(args[0]) in _SHELLS:  # sh -c '...'
            what = forbidden(_split(arg))
            if what:
                return what
    return None


def _modules(frame, depth: int = 40):
    """The modules of ``frame`` and its callers, nearest first."""
    while frame is not None and depth:
        yield frame.f_globals.get("__name__") or ""
        frame, depth = frame.f_back, depth - 1


def _serving(sock, caller, child: bool) -> str | None:
    if getattr(sock, "family", None) not in (socket.AF_INET, socket.AF_INET6):
        return None  # a Unix socket (multiprocessing's fork server) serves no one else
    for module in _modules(caller):
        for prefix, what in (_SERVING_IN_CHILDREN if child else _SERVING).items():
            if module == prefix or module.startswith(prefix + "."):
                return what
    return None


def _run_as_program(code, caller) -> str | None:
    if caller is None or caller.f_globals.get("__name__") != "runpy":
        return None  # an import, not a module run as a program
    filename = getattr(code, "co_filename", "")
    return next((what for end, what in _MODULE_FILES.items() if filename.endswith(end)), None)


def classify(event: str, args: tuple, caller=None, child: bool = False) -> str | None:
    """What the audit ``event`` (raised from the frame ``caller``, in a child process of the test
    or not) starts that a quick test may not, or None."""
    if event in _STARTS:
        return forbidden(args[1] if args[1] is not None else args[0], args[-1])
    if event == "os.system":
        return forbidden(args[0])
    if event == "socket.bind":
        return _serving(args[0], caller, child)
    if event == "exec":
        return _run_as_program(args[0], caller)
    return None


class _Guard:
    """This process's guard: off until ``on``; what it refused goes to ``log`` (a file), then raises."""

    def __init__(self):
        self.log: str | None = None
        self.pid = os.getpid()
        self.refuse = None  # in the test's own process: fails the test (pytest.fail)
        self.child = False  # a process the test started (install_in_child)

    def hook(self, event: str, args: tuple) -> None:
        if self.log is None or event not in _EVENTS:
            return
        what = classify(event, args, sys._getframe(0).f_back, self.child or os.getpid() != self.pid)
        if what is None:
            return
        self._report(what)
        if self.refuse is not None and os.getpid() == self.pid:
            self.refuse(message(what))
        raise QuickTierViolation(message(what))

    def _report(self, what: str) -> None:
        log, self.log = self.log, None  # nothing the report itself does is checked
        try:
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, (what.replace("\n", " ") + "\n").encode())
            finally:
                os.close(fd)
        finally:
            self.log = log


_EVENTS = frozenset(_STARTS + ("os.system", "socket.bind", "exec"))
_GUARD = _Guard()
_installed = False


def _install() -> None:
    global _installed
    if not _installed:
        sys.addaudithook(_GUARD.hook)  # for good: an audit hook cannot be removed, only idle
        _installed = True


def _fail(text: str):
    import pytest
    pytest.fail(text, pytrace=False)


def check_needs(item) -> None:
    """Fail the quick test ``item`` before its fixtures start if it asks for a server or has a system marker."""
    servers = [f for f in SERVER_FIXTURES if f in item.fixturenames]
    if servers:
        _fail(message(f"a server (fixture {', '.join(servers)})"))
    marked = [m for m in SYSTEM_MARKERS if item.get_closest_marker(m)]
    if marked:
        _fail(message(f"work marked {', '.join(marked)}"))


@contextmanager
def guarding(monkeypatch):
    """For the block (a quick test, its fixtures and its teardown): starting torchrun, a run or a
    server fails the test, in its process and in the processes it starts. Yields a function that
    returns what was refused so far (children's included), one phrase each."""
    _install()
    fd, log = tempfile.mkstemp(prefix="ckpt-emu-quickguard-")
    os.close(fd)
    monkeypatch.setenv(ENV, log)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, (str(SITE), os.environ.get("PYTHONPATH")))))
    _GUARD.log, _GUARD.pid, _GUARD.refuse = log, os.getpid(), _fail
    try:
        yield lambda: refused(log)
    finally:
        _GUARD.log = _GUARD.refuse = None
        os.unlink(log)


def refused(log: str) -> list[str]:
    try:
        return Path(log).read_text().splitlines()
    except FileNotFoundError:
        return []


@contextmanager
def watched():
    """A block whose violations (its children's too) are caught and returned, not failed: the
    guard's own tests, in either tier. Yields the list they are put in once the block ends."""
    _install()
    seen, before = [], (_GUARD.log, _GUARD.pid, _GUARD.refuse)
    fd, log = tempfile.mkstemp(prefix="ckpt-emu-quickguard-watched-")
    os.close(fd)
    env = {k: os.environ.get(k) for k in (ENV, "PYTHONPATH")}
    os.environ[ENV] = log
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (str(SITE), env["PYTHONPATH"])))
    _GUARD.log, _GUARD.pid, _GUARD.refuse = log, os.getpid(), None
    try:
        yield seen
    except QuickTierViolation:
        pass
    finally:
        _GUARD.log, _GUARD.pid, _GUARD.refuse = before
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        seen.extend(refused(log))
        os.unlink(log)


def install_in_child() -> None:
    """In a child process of a quick test (quickguard_site/sitecustomize.py): refuse what the test
    itself may not start, and say so in the test's file."""
    log = os.environ.get(ENV)
    if log:
        _install()
        _GUARD.log, _GUARD.pid, _GUARD.refuse, _GUARD.child = log, os.getpid(), None, True
