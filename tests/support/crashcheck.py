"""Invariants a crash must never break, checked on what a run left on its tiers.

Why a helper: every crash test asks the same questions of a tier, whatever
killed the run: is every visible manifest intact, does every file it lists
have that size and CRC32C, and do the bytes hold exactly the state that was
staged (replayed from the manifest's lineage, so this holds across restarts
and resumed runs too)?
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from pathlib import Path

import crc32c
import torch

from emulator.checkpoint.layout import Manifest
from emulator.job.lifeline import rank_of_process


def crc_file(path: Path) -> str:
    crc = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(8 << 20):
            crc = crc32c.crc32c(chunk, crc)
    return f"{crc:08x}"


def state_from_lineage(cfg, rank: int, lineage):
    """The live state after the mutations of every step range in ``lineage``."""
    from rundesign import rank_state
    st = rank_state(cfg, rank)
    for first, last in lineage:
        for s in range(first, last + 1):
            st.mutate(s)
    return st


# Replaying a lineage of thousands of steps for every file is what made long crash campaigns
# slow: keep one advancing state per rank (a lineage usually extends the previous one) and the
# expected digests of every lineage already replayed.
_WORK: dict = {}
_DIGESTS: dict = {}


def _extends(old: list, new: list) -> bool:
    n = len(old)
    return 0 < n <= len(new) and old[:-1] == new[:n - 1] and old[-1][0] == new[n - 1][0] \
        and old[-1][1] <= new[n - 1][1]


def _advanced_state(cfg, rank: int, lineage: list):
    from rundesign import rank_state
    key = (json.dumps(cfg.to_dict(), sort_keys=True), rank)
    done, st = _WORK.get(key, ([], None))
    if st is None or not _extends(done, lineage):
        done, st = [], rank_state(cfg, rank)
    for i, (first, last) in enumerate(lineage):
        start = first if i >= len(done) else done[i][1] + 1 if i == len(done) - 1 else last + 1
        for s in range(start, last + 1):
            st.mutate(s)
    _WORK[key] = ([list(r) for r in lineage], st)
    return st


def expected_digests(cfg, rank: int, lineage) -> dict:
    """SHA-1 of every tensor's bytes in the state the lineage produces, by "group.name"."""
    lineage = [list(r) for r in lineage]
    key = (json.dumps(cfg.to_dict(), sort_keys=True), rank, json.dumps(lineage))
    if key not in _DIGESTS:
        st = _advanced_state(cfg, rank, lineage)
        _DIGESTS[key] = {f"{g}.{n}": _digest(t) for g, ts in st.live.items() for n, t in ts.items()}
    return _DIGESTS[key]


def _digest(t) -> str:
    return hashlib.sha1(t.contiguous().view(-1).view(torch.uint8).numpy().tobytes()).hexdigest()


def assert_holds(path: Path, cfg, rank: int, step: int, lineage) -> None:
    loaded = torch.load(path, weights_only=True)
    assert loaded["step"] == step and loaded["rank"] == rank, path
    assert lineage and lineage[-1][1] == step, f"{path}: lineage {lineage} does not end at {step}"
    want = expected_digests(cfg, rank, lineage)
    got = {f"{g}.{n}": _digest(t) for g in ("model", "optimizer") for n, t in loaded[g].items()}
    assert set(got) == set(want), f"{path}: tensors differ in name"
    for name, digest in want.items():  # bits, not values: random bytes include NaNs
        assert got[name] == digest, f"{path}: {name} differs"


def verify_dir_tier(root: Path, cfg=None, ranks: int | None = None) -> list[int]:
    """Assert every visible checkpoint under ``root`` is complete and intact; returns its steps.

    With ``cfg``, also replays each rank's state from the manifest's lineage and
    compares every tensor bit for bit."""
    steps = []
    for man_path in sorted(Path(root).glob("step_*/manifest.json")):
        m = Manifest.from_json(man_path.read_bytes())  # raises on a torn or garbled manifest
        assert man_path.parent.name == f"step_{m.step:08d}"
        if ranks is not None:
            assert sorted(f.rank for f in m.files) == list(range(ranks)) or m.tier == "local", m
        for f in m.files:
            p = Path(root) / f.key
            assert p.is_file(), f"{p}: listed in a visible manifest but missing"
            assert p.stat().st_size == f.size, f"{p}: size differs from the manifest"
            assert crc_file(p) == f.crc32c, f"{p}: CRC32C differs from the manifest"
            if cfg is not None:
                assert_holds(p, cfg, f.rank, m.step, m.meta["lineage"])
        steps.append(m.step)
    return steps


def partials(root: Path) -> list[Path]:
    return [p for p in Path(root).rglob("*") if p.name.endswith(".partial")]


def step_dirs(root: Path) -> list[int]:
    return sorted(int(p.name[5:]) for p in Path(root).glob("step_*") if p.is_dir())


# --------------------------------------------------------------------------- killing a whole run

def _children() -> dict[int, list[int]]:
    """Every live process's children, by parent pid (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat(int(entry))
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def _stat(pid: int) -> list[str] | None:
    """``/proc/PID/stat`` after the command name (state, parent, ...); None once the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def parent_of(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[1]) if fields is not None else None


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (torchrun starts each worker in its own session)."""
    children = _children()
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def agent_pids(pid: int) -> list[int]:
    """torchrun's agent among the children of the launcher ``pid`` (the ranks it forks have its command line)."""
    return [p for p in _children().get(pid, []) if "emulator.rank.agent" in _cmdline(p)]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def rank_pids(pid: int) -> list[int]:
    """The rank processes among ``pid``'s descendants (named ``ckpt-rankN``)."""
    return sorted(p for p in descendants(pid) if rank_of_process(p) is not None)


def kill_tree(pid: int) -> int:
    """SIGKILL ``pid`` and all its descendants at once, deepest first; returns how many."""
    victims = descendants(pid)[::-1] + [pid]
    for p in victims:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for _ in range(100):  # reap-independent wait: they are gone when /proc says so
        if not any(is_alive(p) for p in victims):
            break
        time.sleep(0.05)
    return len(victims)


def is_alive(pid: int) -> bool:
    """Whether ``pid`` still runs: neither gone nor a zombie (nor dead, awaiting its reaper)."""
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")
