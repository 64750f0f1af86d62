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
from collections import OrderedDict

POPULATE = getattr(mmap, "MAP_POPULATE", 0)
#: mappings kept per tier object (a rank cycles through keep + 1 files)
MAX_MAPPINGS = 8


class MapCache:
    """This process's kept mappings of one tier's recycled files, by (st_dev, st_ino)."""

    def __init__(self, limit: int = MAX_MAPPINGS):
        self.limit = limit
        self._maps: OrderedDict[tuple[int, int], tuple[int, mmap.mmap]] = OrderedDict()

    def __len__(self) -> int:
        self.prune()
        return len(self._maps)

    def mapping(self, fd: int) -> tuple[mmap.mmap | None, int]:
        """A writable shared mapping of the open file ``fd`` and how many bytes of it may be
        written (the file's size: past it a mapping faults): (None, 0) for an empty file."""
        self.prune()
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino)
        entry = self._maps.pop(key, None)
        if entry is not None and len(entry[1]) < st.st_size:  # the file grew since: map it whole
            _close(entry)
            entry = None
        if entry is None:
            if not st.st_size:
                return None, 0
            # shared, read and write; filled at once (half the cost of faulting page by page)
            entry = (os.dup(fd), mmap.mmap(fd, st.st_size, flags=mmap.MAP_SHARED | POPULATE))
        self._maps[key] = entry
        while len(self._maps) > self.limit:
            _close(self._maps.popitem(last=False)[1])
        return entry[1], st.st_size

    def holds(self, st: os.stat_result | None) -> bool:
        """Whether the file ``st`` describes is mapped here (a pool prefers such files)."""
        return st is not None and (st.st_dev, st.st_ino) in self._maps

    def forget(self, fd: int) -> None:
        """Let go of ``fd``'s mapping (its file is about to be unlinked)."""
        st = os.fstat(fd)
        entry = self._maps.pop((st.st_dev, st.st_ino), None)
        if entry is not None:
            _close(entry)

    def prune(self) -> None:
        """Let go of mappings whose file was unlinked, so its pages go back to the host."""
        for key, entry in list(self._maps.items()):
            if os.fstat(entry[0]).st_nlink == 0:
                _close(self._maps.pop(key))

    def close(self) -> None:
        while self._maps:
            _close(self._maps.popitem()[1])


def _close(entry: tuple[int, mmap.mmap]) -> None:
    fd, mm = entry
    mm.close()
    os.close(fd)
