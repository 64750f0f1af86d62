"""The per-user folder of the default tiers, taken first by another user: a single node's run keeps its
tiers in a private folder of its own instead of being blocked.

The shipped configs keep their tiers in ``/dev/shm/ckpt-emu-<uid>`` (docs/security.md). Anyone may
make that name first in /dev/shm, a folder open to all, and the tool rightly refuses a folder of
theirs: every run of the user's was blocked (issue 54, 7). A run of one node then uses a new folder
beside it, ``/dev/shm/ckpt-emu-<uid>-<12 hex>``, says so in one warning line, makes it (mode 0700)
only once every check has passed, so its name is known to nobody before it exists, and removes it
when the run ends (kept with ``run.keep_tiers``). The nodes of a multi-node job must agree on their
folders: they are refused as before. ``CKPT_EMU_TIERS_DIR`` names another per-user folder.
"""
from __future__ import annotations

import json
import os
import secrets
import stat
import sys
from pathlib import Path

from emulator.design import ladder
from emulator.errors import UserError
from tiers.base import TierError
from tiers.directory import DirOptions, tiers_dir
from tiers.safepath import check_reach, reach



def default_folder() -> Path:
    """The per-user folder the default tiers live in (``{tiers_dir}``, tiers/directory.py)."""
    return Path(tiers_dir().replace("{uid}", str(os.geteuid())))


def taken(folder: Path) -> str | None:
    """Why ``folder`` cannot be this user's (another user made it, or a link of theirs is there, or
    others may write it), or None: it is missing, or it is usable."""
    try:
        st = os.stat(folder, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return exc.strerror
    if st.st_uid != os.geteuid() and not (stat.S_ISLNK(st.st_mode) and st.st_uid == 0):
        return f"{folder} belongs to another user (uid {st.st_uid})"
    try:
        check_reach(folder, what=str(folder))
    except (TierError, OSError) as exc:
        return str(exc)
    return None


def _tier_paths(cfg, folder: Path) -> dict[str, str]:
    """{tier: its path (``{uid}`` expanded, ``{node}`` kept)} of the dir tiers inside ``folder``."""
    found = {}
    for name in ladder.file_tiers():
        tier = cfg.tiers.entry(name)
        if tier is not None and isinstance(tier.options, DirOptions):
            path = tier.options.path.replace("{tiers_dir}", str(folder)).replace("{uid}", str(os.geteuid()))
            if Path(os.path.expanduser(path)).is_relative_to(folder):
                found[name] = os.path.expanduser(path)
    return found


def private_tiers(cfg, nnodes: int):
    """(the config, None), or where the per-user folder is taken and this is a single node's run:
    (the config with those tiers in a new private folder's name, that folder), said in one warning
    line. Nothing is made here (``make``)."""
    folder = default_folder()
    paths = _tier_paths(cfg, folder)
    why = taken(folder) if paths and nnodes == 1 else None
    if why is None:
        return cfg, None
    private = folder.with_name(f"{folder.name}-{secrets.token_hex(6)}")
    cfg = cfg.with_overrides(*(f"tiers.{name}.path={json.dumps(str(private) + path[len(str(folder)):])}"
                               for name, path in paths.items()))
    print(f"ckpt-emu: warning: {why}: this run keeps its tiers in {private} instead, a folder of its own "
          f"({'kept' if cfg.run.keep_tiers else 'removed'} when it ends)", file=sys.stderr)
    return cfg, private


def make(private: Path) -> None:
    """Make the private folder (mode 0700; one of that name already there is refused)."""
    try:
        with reach(private.parent, owned=False, what=str(private)) as parent:
            os.mkdir(private.name, 0o700, dir_fd=parent.fd)
    except FileExistsError:
        raise UserError(f"{private}: made by someone else as this run started; run again") from None
    except (TierError, OSError) as exc:
        raise UserError(f"{private}: cannot make it ({getattr(exc, 'strerror', None) or exc})") from None


def remove(private: Path) -> None:
    """Remove the private folder and what the run left in it, never following a link."""
    try:
        with reach(private.parent, owned=False, what=str(private)) as parent:
            parent.remove_own_tree(private.name, what=str(private))
    except (TierError, OSError):
        pass  # what is left is the user's to look at; the run's outcome stands
