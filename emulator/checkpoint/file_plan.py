"""A rank file's layout known before a byte of it is read: where each staging tensor's bytes lie.

A restore needs each tensor's offset in the file before it can read the bytes straight into the
staging buffers. From a tier with files, ``torch.load(map_location="meta")`` reads the structure
in place. From S3 that is GETs at both ends of the object, and a server that reads the whole
object for every ranged GET (moto) pays a whole download for each. But the file is the run's own:
``torch.save`` of the rank's staged payload for that step (``RankState.payload``), whose bytes
other than the tensors' are fixed by the payload's layout (names, shapes, dtypes, the step, the
rank), not by the tensors' values, while torch's zip CRC32 is off (the default,
``checkpoint.torch_crc32``). So ``expected_layout`` saves the payload into a sink that keeps only
where things go: the bytes between the tensors, and the offset of each staging tensor's bytes
(torch.save hands over each storage's own memory: nothing is copied). One sequential read then
puts every tensor's bytes in place and keeps the rest; ``matches`` compares that rest with what
was expected. Every byte of the structure matching is what makes the placement right: they are
all torch.load would have parsed. A file of another layout (another torch, the zip CRC32 on) is
read intact but does not match, and the restore reads it the general way.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np
import torch
import torch.utils.serialization as serialization

from tiers.fileops import as_bytes


@dataclass
class FileLayout:
    size: int
    spans: list   # (offset, a staging tensor, or a uint8 view of part of one), in file order
    gaps: list    # (offset, bytes) between and around the tensors, in file order
    whole_tensors: bool  # every span a whole staging tensor (as a broadcast of the plan needs)

    def matches(self, read_gaps: list) -> bool:
        """Whether the bytes read outside the spans (``(offset, bytes)`` in order, any chunking)
        are the expected ones."""
        return b"".join(bytes(d) for _, d in read_gaps) == b"".join(d for _, d in self.gaps)


class _Recorder:
    """A sink for torch.save that keeps where each write goes: a staging tensor's own memory is a
    span, anything else (headers, the pickle, the directory) a gap kept as bytes."""

    def __init__(self, tensors: list[torch.Tensor]):
        flat = sorted((t.data_ptr(), t) for t in tensors if t.numel())
        self._starts = [p for p, _ in flat]
        self._tensors = [t for _, t in flat]
        self.pos, self.spans, self.gaps, self.whole = 0, [], [], True

    def _owner(self, addr: int, n: int):
        i = bisect.bisect_right(self._starts, addr) - 1
        if i < 0:
            return None
        t = self._tensors[i]
        start = addr - self._starts[i]
        return (t, start) if start + n <= t.numel() * t.element_size() else None

    def write(self, data) -> int:
        view = as_bytes(data)
        n = len(view)
        owner = self._owner(np.frombuffer(view, dtype=np.uint8).ctypes.data, n) if n else None
        if owner is not None:
            t, start = owner
            whole = start == 0 and n == t.numel() * t.element_size()
            self.whole &= whole
            self.spans.append((self.pos, t if whole else t.reshape(-1).view(torch.uint8)[start:start + n]))
        elif n:
            self.gaps.append((self.pos, bytes(view)))
        self.pos += n
        return n

    def flush(self) -> None:
        pass


def expected_layout(state, step: int) -> FileLayout | None:
    """The layout of the file ``save_rank_file`` writes for ``state`` at ``step`` (its staging
    tensors as the spans' targets); None while torch's zip CRC32 is on (the structure then holds
    CRCs of the tensors' values, which only the file knows)."""
    if serialization.config.save.compute_crc32:
        return None
    rec = _Recorder(list(state.tensors("staging")))
    torch.save(state.payload(step), rec)
    return FileLayout(rec.pos, rec.spans, rec.gaps, rec.whole)
