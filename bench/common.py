"""Shared pieces of the benchmark suite: parameters, pairing and statistics, page-cache control.

Every comparison is a list of *pairs*: our path and its baseline run back to
back on the same bytes, in alternating order (ours first on even pairs,
baseline first on odd ones, so neither always runs on a cooler machine), after
``warmup`` pairs that are thrown away. A pair's ratio is computed inside the
pair, so the machine's slow drifts (other tenants, the page cache filling)
cancel out; the reported ratio is the median of the pair ratios, with min and
max, never a ratio of separate medians.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import json
import mmap
import os
import statistics
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30

HIGHER, LOWER = "higher", "lower"


@dataclass
class Params:
    """What a benchmark run is asked to do (serialised to the worker process as JSON)."""

    pairs: int = 5
    warmup: int = 1
    rank_gib: float = 1.0
    workdir: str = "/tmp/ckpt-emu-bench"
    s3_mib: int = 48
    threads: int = 1
    drop_cache: bool = True  # drop the page cache before load samples when permitted
    scaling_ranks: list = field(default_factory=lambda: [1, 2, 4, 8])
    scaling_rank_gib: float = 0.25
    #: the footprint's rank: a real rank's size (a fixed ~0.2 GiB of Python and torch is half of a
    #: 1 GiB rank's 10 % allowance, and a 13 GiB Llama-3 8B rank would not fit twice in 24 GiB)
    footprint_rank_gib: float = 3.0
    quick: bool = False  # smoke test: skip expensive extras (TransferConfig search, DCP variants)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "Params":
        return cls(**json.loads(text))


def median(values) -> float:
    values = list(values)
    return statistics.median(values) if values else float("nan")


def result(*, ratio_samples, ours_samples, base_samples, unit: str, target, better: str,
           ratio_is: str, ours_is: str, baseline_is: str, ratio: float | None = None, **extra) -> dict:
    """One benchmark's JSON object (the keys every entry has, plus ``extra``).

    ``ratio`` defaults to the median of ``ratio_samples``; ``ours`` and ``baseline``
    are the medians of their samples; ``met`` compares ``ratio`` with ``target`` in
    the direction ``better`` (None when there is no target).
    """
    ratio = median(ratio_samples) if ratio is None else ratio
    met = None
    if target is not None and ratio == ratio:  # not NaN
        met = bool(ratio >= target) if better == HIGHER else bool(ratio <= target)
    out = {
        "ratio": ratio,
        "ours": median(ours_samples),
        "baseline": median(base_samples),
        "unit": unit,
        "min": min(ratio_samples) if ratio_samples else float("nan"),
        "max": max(ratio_samples) if ratio_samples else float("nan"),
        "pairs": len(ratio_samples),
        "target": target,
        "met": met,
        "better": better,
        "ratio_is": ratio_is,
        "ours_is": ours_is,
        "baseline_is": baseline_is,
        "samples": {"ratio": list(ratio_samples), "ours": list(ours_samples), "baseline": list(base_samples)},
    }
    out.update(extra)
    return out


def run_rounds(params: Params, fns: dict, *, before=None) -> list[dict]:
    """Run ``warmup`` + ``pairs`` rounds, each calling every function in ``fns`` once.

    The order rotates from round to round (with two functions: ours first on even
    rounds, the baseline first on odd ones). Each function takes the round index and
    returns one measurement; ``before(name)`` (optional) runs untimed before each one
    (e.g. sync, drop the page cache). Returns the kept rounds as {name: measurement}.
    """
    names = list(fns)
    kept = []
    for i in range(params.warmup + params.pairs):
        k = i % len(names)
        got = {}
        for name in names[k:] + names[:k]:
            if before is not None:
                before(name)
            got[name] = fns[name](i)
        if i >= params.warmup:
            kept.append(got)
    return kept


def run_pairs(params: Params, ours, baseline, *, before=None) -> list[tuple[float, float]]:
    """``run_rounds`` for one (ours, baseline) pair per round: [(ours, baseline), ...]."""
    rounds = run_rounds(params, {"ours": ours, "baseline": baseline}, before=before)
    return [(r["ours"], r["baseline"]) for r in rounds]


def timed_cmd(args: list[str], **kw) -> float:
    """Run a command to completion; returns its wall time (raises if it fails)."""
    t = time.perf_counter()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw)
    return time.perf_counter() - t


def work_folder(path: str | None, prefix: str) -> tuple[Path, bool]:
    """(a benchmark's working folder, whether it was made here): a new private folder (``mkdtemp``)
    unless the user named one, which must then be safe to use (tiers.safepath: theirs, writable by
    nobody else, reached without another user's link; made 0700 when missing). Every file of a
    benchmark is written inside it."""
    import tempfile

    from tiers.base import TierError
    from tiers.safepath import reach
    if path is None:
        return Path(tempfile.mkdtemp(prefix=prefix)), True
    try:
        with reach(path, create=True, mode=0o700, what="--workdir") as folder:
            return Path(folder.path), False
    except (TierError, OSError) as exc:
        raise SystemExit(f"bench: {exc}") from None


def remove(path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


# --------------------------------------------------------------------------- page cache

_libc = None


def _lib():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        _libc.mmap.restype = ctypes.c_void_p
        _libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                               ctypes.c_int, ctypes.c_long]
        _libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        _libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    return _libc


def resident_fraction(path) -> float:
    """Fraction of ``path``'s pages now in the page cache (mincore on a fresh mapping)."""
    size = os.path.getsize(path)
    if size == 0:
        return 0.0
    libc = _lib()
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap failed")
        try:
            pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
            vec = ctypes.create_string_buffer(pages)
            if libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore failed")
            return sum(b & 1 for b in vec.raw) / pages
        finally:
            libc.munmap(addr, size)
    finally:
        os.close(fd)


def drop_page_cache() -> bool:
    """The emulator's own drop (sync + echo 3 > drop_caches); False when not permitted."""
    from emulator.checkpoint.restore import drop_page_cache as drop
    return drop()


def probe_drop_cache(workdir: Path) -> tuple[bool, str]:
    """Whether dropping the page cache works here, checked on a probe file with mincore.

    Writing drop_caches needs root and a writable /proc/sys; in some containers the
    write is accepted but does nothing, so the probe checks that the pages left.
    """
    probe = Path(workdir) / ".dropprobe"
    probe.parent.mkdir(parents=True, exist_ok=True)
    with open(probe, "wb") as fh:
        fh.write(os.urandom(4 * MIB))
        fh.flush()
        os.fsync(fh.fileno())
    try:
        with open(probe, "rb") as fh:
            while fh.read(MIB):
                pass
        before = resident_fraction(probe)
        if not drop_page_cache():
            return False, "not permitted (needs root and a writable /proc/sys/vm/drop_caches)"
        after = resident_fraction(probe)
        if after > 0.05:
            return False, f"drop_caches accepted but pages stayed cached ({before:.0%} -> {after:.0%})"
        return True, f"dropped (probe {before:.0%} -> {after:.0%} resident)"
    finally:
        remove(probe)


def warm_file(path) -> None:
    """Read a file once so it is in the page cache (for warm-vs-warm comparisons)."""
    buf = bytearray(16 * MIB)
    with open(path, "rb", buffering=0) as fh:
        while fh.readinto(buf):
            pass


# --------------------------------------------------------------------------- /proc readings

CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_status(pid: int) -> dict | None:
    """VmRSS, VmHWM, RssAnon, RssFile (bytes) of a process, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
            out[key] = int(rest.split()[0]) * KIB
    return out


def proc_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process (all its threads), or None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = raw[raw.rindex(")") + 2:].split()  # after "pid (comm) "
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def self_status() -> dict:
    return proc_status(os.getpid()) or {}
