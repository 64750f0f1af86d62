"""A directory tier's recycling pool: deleted files kept for their pages, so the next write to a
tier in host memory (tmpfs) overwrites pages already allocated instead of zeroing new ones
(tiers/directory.py ``recycle``)."""
from __future__ import annotations

import os
import re
import uuid
from pathlib import Path
from typing import Optional

from .base import UnsafePath
from .fileops import fsync_dir
from .safepath import Folder, is_own_file

POOL_DIR = ".recycle"
POOL_SUFFIX = ".pool"
_POOL_NAME = re.compile(r"^[0-9a-f]{32}\.pool$")


class FilePool:
    """Deleted files kept for their pages: at most ``limit``, the largest (the checkpoint files, not
    manifests). Only the node leader deletes; every rank may take, so a take is an atomic rename
    and a file another process took first is simply skipped. Pool files are never listed.

    The pool is the tier's own folder ``POOL_DIR`` (never a link, never another user's), and only
    its own names in it (``<32 hex>.pool``, regular files of this user's with one name) are taken,
    kept or deleted: a planted name is left alone, never written through."""

    def __init__(self, root: Folder, limit: int):
        self.root, self.limit = root, limit
        self.folder = Path(root.path) / POOL_DIR

    def _held(self, create: bool = False) -> Folder | None:
        try:
            return self.root.subfolder(POOL_DIR, create=create, what="recycling pool")
        except (FileNotFoundError, UnsafePath):
            return None

    def files(self) -> list[Path]:
        held = self._held()
        if held is None:
            return []
        with held:
            names = [n for n in held.listdir() if _POOL_NAME.match(n)]
            return [self.folder / n for n in names if _own_file_at(held, n)]

    def take(self, dest: Path, prefer=None) -> bool:
        """Rename a pooled file to ``dest`` (a partial), those for which ``prefer(stat)`` is true
        first (the files this process keeps mapped); False when the pool is empty."""
        files = self.files()
        if prefer is not None:
            files.sort(key=lambda path: not prefer(_stat_or_none(path)))
        for path in files:
            try:
                os.rename(path, dest)
                return True
            except FileNotFoundError:
                continue  # another rank took it
        return False

    def give(self, path: Path) -> bool:
        """Keep ``path``'s pages for a later write, or unlink it when the pool already holds
        ``limit`` files as large; durable either way (the folder is fsynced). False (nothing
        done) when the pool folder is not the tool's own."""
        held = self._held(create=True)
        if held is None:
            return False
        with held:
            os.rename(path, self.folder / f"{uuid.uuid4().hex}{POOL_SUFFIX}")
        fsync_dir(path.parent)
        held_files = sorted(self.files(), key=_size_or_zero, reverse=True)
        for extra in held_files[self.limit:]:
            extra.unlink(missing_ok=True)
        if held_files[self.limit:]:
            fsync_dir(self.folder)
        return True

    def empty(self) -> int:
        files = self.files()
        for path in files:
            path.unlink(missing_ok=True)
        if files:
            fsync_dir(self.folder)
        return len(files)


def _own_file_at(folder: Folder, name: str) -> bool:
    st = folder.lstat(name)
    return st is not None and is_own_file(st)


def _stat_or_none(path: Path) -> Optional[os.stat_result]:
    try:
        return path.stat(follow_symlinks=False)
    except FileNotFoundError:
        return None


def _size_or_zero(path: Path) -> int:
    try:
        return path.stat(follow_symlinks=False).st_size
    except FileNotFoundError:
        return 0
