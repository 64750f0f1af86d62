"""Shared mappings of a recycling directory tier's files, kept from one checkpoint to the next.

A write() into a file's existing tmpfs pages costs about twice a memcpy (the
kernel looks up and locks every 4 KiB page); a copy into a shared mapping whose
page tables are already filled costs a memcpy, as DLRover's and Gemini's flash
checkpoints copy into a persistent shared-memory buffer. A recycled file keeps
its inode through the pool and the publishing rename, so its mapping is kept per
inode: the first reuse fills the page tables, later ones copy straight in. The
ranks of a node share one pool, so a rank takes a file it has mapped first.

A kept mapping holds its file's pages even after the file is unlinked, so each
lookup first lets go of mappings whose file no longer has a name (and a cap
bounds how many are kept). Because only live files stay mapped, an inode
number found here is the same file, not a later one that reused the number.
"""
from __future__ import annotations

import mmap
import os
import threading
from collections import OrderedDict

POPULATE = getattr(mmap, "MAP_POPULATE", 0)
#: mappings kept per tier object (a rank cycles through keep + 1 files)
MAX_MAPPINGS = 8
_held = {"now": 0, "peak": 0}  # bytes this process has mapped, over every tier
_held_lock = threading.Lock()


def _count(delta: int) -> None:
    with _held_lock:
        _held["now"] += delta
        _held["peak"] = max(_held["peak"], _held["now"])


def mapped_peak_bytes() -> int:
    """The most bytes of tier files this process had mapped at once: pages its resident set
    (VmHWM) counts that are the tier's copies, which a report counts as the tier's already."""
    return _held["peak"]


class Mapping:
    """A writable shared mapping of one whole file, with a descriptor of the file that tells
    whether it still has a name (closed when the object is dropped, as after a crash)."""

    def __init__(self, fd: int, size: int):
        st = os.fstat(fd)
        self.key = (st.st_dev, st.st_ino)
        self.file = os.fdopen(os.dup(fd), "rb", buffering=0)
        # filled at once: half the cost of faulting it in page by page
        self.mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | POPULATE)
        _count(size)

    def linked(self) -> bool:
        return os.fstat(self.file.fileno()).st_nlink > 0

    def close(self) -> None:
        if not self.mm.closed:
            _count(-len(self.mm))
        self.mm.close()
        self.file.close()


class MapCache:
    """This process's kept mappings of one tier's recycled files, by (st_dev, st_ino). A sink
    takes its file's mapping out while it writes and gives it back once the file is published,
    so no other thread can close a mapping in use."""

    def __init__(self, limit: int = MAX_MAPPINGS):
        self.limit = limit
        self._maps: OrderedDict[tuple[int, int], Mapping] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        self.prune()
        return len(self._maps)

    def take(self, fd: int) -> tuple[Mapping | None, int]:
        """The mapping of the open file ``fd`` (the kept one, or a new one) and how many bytes of
        it may be written (the file's size: past it a mapping faults); (None, 0) for an empty file."""
        self.prune()
        st = os.fstat(fd)
        with self._lock:
            kept = self._maps.pop((st.st_dev, st.st_ino), None)
        if kept is not None and len(kept.mm) >= st.st_size:
            return kept, st.st_size
        if kept is not None:  # the file grew since: map it whole
            kept.close()
        return (Mapping(fd, st.st_size), st.st_size) if st.st_size else (None, 0)

    def give_back(self, mapping: Mapping) -> None:
        """Keep ``mapping`` for the file's next write (the oldest kept one goes past the limit)."""
        with self._lock:
            self._maps[mapping.key] = mapping
            extra = [self._maps.popitem(last=False)[1] for _ in range(len(self._maps) - self.limit)]
        for old in extra:
            old.close()

    def holds(self, st: os.stat_result | None) -> bool:
        """Whether the file ``st`` describes is mapped here (a pool prefers such files)."""
        return st is not None and (st.st_dev, st.st_ino) in self._maps

    def prune(self) -> None:
        """Let go of mappings whose file was unlinked, so its pages go back to the host."""
        with self._lock:
            gone = [key for key, m in self._maps.items() if not m.linked()]
            dropped = [self._maps.pop(key) for key in gone]
        for mapping in dropped:
            mapping.close()
