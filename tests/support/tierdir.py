"""Each test's own default tier folder: ``{tiers_dir}`` of the shipped configs (tiers/directory.py)
points into a folder of the test's, so a suite never meets another suite, nor a run of the same
user's beside it, in the machine-wide ``/dev/shm/ckpt-emu-<uid>``.

conftest.py gives each process of the suite (each xdist worker) a folder for its session, which the
fixtures shared by several tests (a module's run) see, and each test a folder of its own on top.
The folders live in host memory (``/dev/shm``) as the default does, since a memory tier must.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path

from tiers.directory import TIERS_DIR_ENV, expand_path

#: where the folders go: host memory, as the default's /dev/shm
BASE = Path("/dev/shm") if os.path.isdir("/dev/shm") else Path(tempfile.gettempdir())


def fresh() -> Path:
    """A new folder's name (not made: the run that needs it makes it, mode 0700)."""
    return BASE / f"ckpt-emu-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def current() -> Path:
    """The default tier folder a run started now would use."""
    return Path(expand_path("{tiers_dir}", 0))


def remove(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def own(monkeypatch):
    """For the ``with`` block: a default tier folder of its own, removed after."""
    folder = fresh()
    monkeypatch.setenv(TIERS_DIR_ENV, str(folder))
    try:
        yield folder
    finally:
        remove(folder)


def start_session() -> Path:
    """This process's folder for the session (set in its environment; ``end_session`` removes it)."""
    folder = fresh()
    os.environ[TIERS_DIR_ENV] = str(folder)
    return folder


def end_session(folder: Path) -> None:
    remove(folder)
