"""Every write under some folders, and who made it (issue 54): a ``sys.addaudithook`` hook that names
any open for writing, mkdir, rename, replace or unlink not made by the one safe reach and write
(tiers/safepath.py, tiers/fileops.py): a project module's own ``open``, or a library handed a path
by one (matplotlib's ``savefig(path)``). In this process (``WriteAudit``), or in every process a
test starts (``child_env``: writeaudit_site/sitecustomize.py installs it there, each stray write a
line in a log file)."""
from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(__file__).resolve().parent / "writeaudit_site"
LOG_ENV, ROOTS_ENV = "CKPT_EMU_WRITE_AUDIT", "CKPT_EMU_WRITE_AUDIT_ROOTS"
SAFE = {str(ROOT / "tiers" / "safepath.py"), str(ROOT / "tiers" / "fileops.py")}
PROJECT = tuple(str(ROOT / d) + os.sep for d in ("emulator", "tiers", "bench"))
STDLIB = tuple({sysconfig.get_paths()[k] + os.sep for k in ("stdlib", "platstdlib")})
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
#: audit events that change a folder, and which of their arguments are paths
CHANGES = {"os.mkdir": (0,), "os.rename": (0, 1), "os.replace": (0, 1), "os.remove": (0,), "os.rmdir": (0,),
           "os.symlink": (1,), "os.link": (1,), "os.truncate": (0,), "shutil.copyfile": (1,),
           "shutil.rmtree": (0,)}


class WriteAudit:
    """Writes under ``roots`` not made by the safe modules: [(event, path, who)] in ``stray``."""

    active: "WriteAudit | None" = None
    installed = False

    def __init__(self, *roots: Path):
        self.roots = [str(Path(r).resolve()) + os.sep for r in roots]
        self.stray: list[tuple[str, str, str]] = []
        self.writes: list[tuple[str, str]] = []  # every write seen, whoever made it
        self.seen = 0

    def __enter__(self):
        if not WriteAudit.installed:
            sys.addaudithook(_hook)  # for the process's life: it does nothing while no audit is active
            WriteAudit.installed = True
        WriteAudit.active = self
        return self

    def __exit__(self, *exc):
        WriteAudit.active = None
        return False

    def paths(self, event: str, args) -> list[str]:
        if event == "open":
            path, mode, flags = args
            writes = (flags or 0) & WRITE_FLAGS or (isinstance(mode, str) and set(mode) & set("wax+"))
            return [path] if writes else []
        return [args[i] for i in CHANGES.get(event, ()) if i < len(args)]

    def note(self, event: str, args) -> None:
        for path in self.paths(event, args):
            if isinstance(path, int) or path is None:
                continue
            full = os.path.abspath(os.fsdecode(path))
            if not any((full + os.sep).startswith(r) for r in self.roots):
                continue
            self.seen += 1
            self.writes.append((event, full))
            who = _writer(sys._getframe(1))
            if who is not None:
                self.stray.append((event, full, who))


def _hook(event, args):
    audit = WriteAudit.active
    if audit is not None and (event == "open" or event in CHANGES):
        WriteAudit.active = None  # what the check itself does is not audited
        try:
            audit.note(event, args)
        finally:
            WriteAudit.active = audit


def _stdlib(name: str) -> bool:
    """Whether a code file is the standard library's (site-packages may sit inside its folder)."""
    return name.startswith("<frozen") or (name.startswith(STDLIB) and "-packages" + os.sep not in name)


def _writer(frame) -> str | None:
    """None when the innermost frame outside the standard library is one of the safe modules; else
    who wrote: the project module, or the library and the project module that called it."""
    library = None
    while frame is not None:
        name = frame.f_code.co_filename
        if name != __file__ and not _stdlib(name):
            if library is None and name in SAFE:
                return None
            if name.startswith(PROJECT):
                where = f"{os.path.relpath(name, ROOT)}:{frame.f_lineno}"
                return f"{library} called from {where}" if library else where
            library = library or name
        frame = frame.f_back
    return None  # the test's own code


def child_env(log: Path, *roots: Path) -> dict:
    """The environment for processes whose stray writes under ``roots`` go to ``log``, one a line."""
    path = os.pathsep.join(filter(None, (str(SITE), os.environ.get("PYTHONPATH"))))
    return {**os.environ, "PYTHONPATH": path, LOG_ENV: str(log), ROOTS_ENV: os.pathsep.join(map(str, roots))}


def install_in_child() -> None:
    """Audit this whole process (sitecustomize), each stray write appended to the log as it happens."""
    log = os.environ[LOG_ENV]

    class Logged(WriteAudit):
        def note(self, event, args):
            before = len(self.stray)
            super().note(event, args)
            for event_, path, who in self.stray[before:]:
                fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    os.write(fd, f"{os.getpid()} {event_} {path} by {who}\n".encode())
                finally:
                    os.close(fd)
    Logged(*[Path(r) for r in os.environ[ROOTS_ENV].split(os.pathsep) if r]).__enter__()
