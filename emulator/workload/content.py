"""Synthetic checkpoint bytes that storage cannot reduce (unless asked to), made cheaply.

A real optimizer state is high-entropy floating point that changes everywhere
at every step: storage with inline dedup, compression or similarity reduction
gets nothing out of it. Our bytes must behave the same, or a reducing array
reports throughput the real job never gets. Generating fresh random numbers
runs slower than a disk (docs/performance.md), so:

* Each rank draws one random **pool** (4 MiB) once. Every tensor is cut into
  4 KiB **blocks**; block ``b`` starts as a copy of a pool block, then every
  8-byte word of it is XORed with the block's own 64-bit **key**. Keys are
  random per (seed, rank, version, block), so no two blocks are equal (within
  a file, across ranks, across checkpoints), and because every byte differs,
  byte-matching reducers (LZ, content-defined chunking, delta compression
  against a similar block) find nothing: zlib level 1 keeps 100% of it.
* Training "updates" the state by re-keying: the loop calls ``advance(step)``
  once per step, which rewrites one of ``slices`` equal parts as pool blocks
  XORed with that step's keys. With ``slices`` = the checkpoint interval in
  steps, every block changes between two checkpoints, at 1/interval of a
  memory pass per step and nothing on the stall path; and a block's bytes are
  its last re-key's, whatever the buffer held before, so a paced snapshot may
  swap the live and staging buffers instead of copying.

Reducible content, for users whose real checkpoints reduce: ``dedup_ratio`` D
makes groups of D consecutive blocks identical (same pool block, same key), and
``compress_ratio`` C keeps 1/C of each block random and zeroes the rest.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import torch

BLOCK = 4096
WORDS = BLOCK // 8
POOL_BYTES = 4 << 20
POOL_BLOCKS = POOL_BYTES // BLOCK
CHUNK_BLOCKS = 4096  # work in 16 MiB pieces: bounded temporaries


def _seed(*parts) -> int:
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def _keys(n: int, *seed_parts) -> torch.Tensor:
    """``n`` random 64-bit keys (all 64 bits random) from a generator seeded by ``seed_parts``."""
    gen = torch.Generator().manual_seed(_seed(*seed_parts))
    return torch.randint(0, 256, (n * 8,), dtype=torch.uint8, generator=gen).view(torch.int64)


@dataclass
class _Segment:
    """Whole blocks of one tensor as a [blocks, words] int64 view (or a final short block)."""

    view: torch.Tensor
    first: int  # global index of its first block

    @property
    def blocks(self) -> int:
        return self.view.shape[0]


class Content:
    """Fills and re-keys a rank's tensors (contiguous, any dtype, on one device) in place.

    Keys are drawn on the CPU (the same bytes on any device) and moved to the tensors'
    device, where the XOR runs: on a GPU, an update on the training stream."""

    def __init__(self, tensors, *, seed: int, rank: int, slices: int = 1,
                 dedup_ratio: float = 1.0, compress_ratio: float = 1.0):
        if slices < 1 or dedup_ratio < 1 or compress_ratio < 1:
            raise ValueError("slices, dedup_ratio and compress_ratio must be >= 1")
        self.seed, self.rank, self.slices = seed, rank, slices
        self.dedup, self.compress = float(dedup_ratio), float(compress_ratio)
        self.random_words = max(1, math.ceil(WORDS / self.compress))
        self._bound: dict = {}  # the views of the last two tensor sets bound, by their data pointers
        self.bind(tensors)

    def bind(self, tensors) -> None:
        """Work on these tensors from now on (a restore or a paced snapshot swaps in tensors of the
        same layout). The views of the last two sets bound are kept: the snapshot swaps them back and
        forth."""
        tensors = list(tensors)
        key = tuple(t.data_ptr() for t in tensors)
        if key not in self._bound:
            self._views(tensors)
            self._bound = dict(list(self._bound.items())[-1:])  # the other set's, and this one's
            self._bound[key] = (self._raws, self._segments, self.device, self.blocks, self.groups)
        self._raws, self._segments, self.device, self.blocks, self.groups = self._bound[key]

    def _views(self, tensors) -> None:
        self._raws = [t.view(-1).view(torch.uint8) for t in tensors if t.numel()]
        self.device = self._raws[0].device if self._raws else torch.device("cpu")
        self._segments: list[_Segment] = []
        nblocks = 0
        for raw in self._raws:
            words = raw.numel() // 8
            full = words // WORDS
            as_words = raw[:words * 8].view(torch.int64)
            if full:
                self._segments.append(_Segment(as_words[:full * WORDS].view(full, WORDS), nblocks))
                nblocks += full
            if words % WORDS:
                self._segments.append(_Segment(as_words[full * WORDS:].view(1, -1), nblocks))
                nblocks += 1
        self.blocks = nblocks
        self.groups = math.ceil(nblocks / self.dedup)

    # ------------------------------------------------------------------ making and changing bytes

    def fill(self) -> None:
        """Initial content: every block its pool block keyed with version 0, reducible parts zeroed."""
        gen = torch.Generator().manual_seed(_seed("pool", self.seed, self.rank))
        pool = torch.randint(0, 256, (POOL_BYTES,), dtype=torch.uint8, generator=gen).to(self.device)
        self._pool_words = pool.view(torch.int64).view(POOL_BLOCKS, WORDS)
        for raw in self._raws:  # bytes past the last whole word (< 8 per tensor)
            tail = raw.numel() % 8
            if tail:
                raw[-tail:].copy_(pool[:tail])
        self._rekey(0, self.groups, version=0)

    def advance(self, step: int) -> None:
        """One training step's update: re-key slice ``step % slices`` (1/slices of the bytes)."""
        k = step % self.slices
        self._rekey(k * self.groups // self.slices, (k + 1) * self.groups // self.slices, version=step)

    def _group_of(self, lo: int, hi: int) -> torch.Tensor:
        """Group index of every block in [lo, hi)."""
        blocks = torch.arange(lo, hi, dtype=torch.int64)
        if self.dedup == 1.0:
            return blocks
        return torch.floor(blocks.double() / self.dedup).long()

    def _first_block(self, group: int) -> int:
        return min(self.blocks, math.ceil(group * self.dedup))

    def _rekey(self, g_lo: int, g_hi: int, *, version: int) -> None:
        """Set every block of groups [g_lo, g_hi) to its pool block XOR its group's key for ``version``
        (reducible parts zeroed). A block's bytes are those of the last step that re-keyed it, whatever
        the buffer held: a paced snapshot swaps the live and staging buffers (``RankState.snapshot``),
        and the older buffer holds the state again once every slice was re-keyed (slices = the
        interval), so a checkpoint's bytes are its step's state."""
        if g_hi <= g_lo:
            return
        keys = _keys(g_hi - g_lo, "keys", self.seed, self.rank, version, g_lo).to(self.device)
        b_lo, b_hi = self._first_block(g_lo), self._first_block(g_hi)
        for seg in self._segments:
            lo, hi = max(b_lo, seg.first), min(b_hi, seg.first + seg.blocks)
            for start in range(lo, hi, CHUNK_BLOCKS):
                end = min(hi, start + CHUNK_BLOCKS)
                groups = self._group_of(start, end)
                if self.dedup == 1.0:
                    block_keys = keys[start - g_lo:end - g_lo]
                else:
                    block_keys = keys[(groups - g_lo).to(self.device)]
                part = seg.view[start - seg.first:end - seg.first]
                rows = torch.remainder(groups, POOL_BLOCKS).to(self.device)
                if part.shape[1] == WORDS:
                    torch.index_select(self._pool_words, 0, rows, out=part)
                else:  # a tensor's last, short block
                    part.copy_(self._pool_words.index_select(0, rows)[:, :part.shape[1]])
                cols = min(self.random_words, part.shape[1])
                if cols < part.shape[1]:
                    part[:, cols:] = 0
                part[:, :cols] ^= block_keys.unsqueeze(1)

    def describe(self) -> dict:
        """How the bytes were made, for results.json."""
        return {"kind": "unique" if self.dedup == 1 and self.compress == 1 else "reducible",
                "block_bytes": BLOCK, "pool_bytes": POOL_BYTES, "update_slices": self.slices,
                "dedup_ratio": self.dedup, "compress_ratio": self.compress,
                "method": "per-rank random pool; each 4 KiB block XORed with its own random 64-bit key, "
                          "re-keyed 1/update_slices of the state per step"}
