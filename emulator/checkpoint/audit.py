"""What the written bytes really are: sampled 4 KiB blocks of a rank's checkpoint files.

The content generator (emulator/workload/content.py) promises bytes no storage can
reduce; this checks it on the files a run wrote (distinct blocks within a file,
across ranks and across checkpoints, zlib ratio) for results.json.
"""
from __future__ import annotations

import hashlib
import os
import zlib

from emulator.checkpoint.layout import read_manifest, valid_steps
from emulator.workload.content import BLOCK


def block_digests(data) -> list[bytes]:
    """16-byte digests of every whole 4 KiB block of ``data``."""
    view = memoryview(data)
    return [hashlib.blake2b(view[i:i + BLOCK], digest_size=16).digest()
            for i in range(0, len(view) - BLOCK + 1, BLOCK)]


def compress_ratio(data) -> float:
    """Compressed size over size with zlib level 1 (1.0: incompressible)."""
    data = bytes(data)
    return len(zlib.compress(data, 1)) / max(1, len(data))


def sample_file(path, samples: int = 256, seed: int = 0) -> dict:
    """Digests of ``samples`` evenly spread 4 KiB blocks of a file, and their zlib ratio."""
    size = os.path.getsize(path)
    count = size // BLOCK
    if count == 0:
        return {"offsets": [], "digests": [], "zlib_ratio": 1.0}
    stride = max(1, count // samples)
    offsets = [((i * stride + seed) % count) * BLOCK for i in range(min(samples, count))]
    blocks = []
    with open(path, "rb") as fh:
        for off in offsets:
            fh.seek(off)
            blocks.append(fh.read(BLOCK))
    joined = b"".join(blocks)
    return {"offsets": offsets, "digests": [d.hex() for d in block_digests(joined)],
            "zlib_ratio": compress_ratio(joined)}


def audit_tiers(tiers, rank: int, loop) -> dict | None:
    """Sample ``rank``'s files of the two newest checkpoints on the first tier that has files
    (``tiers``: nearest first; ``loop``: a LoopThread). None where no tier has files (S3)."""
    for tier in tiers:
        paths = []
        for step in loop.run(valid_steps(tier))[0][-2:]:
            manifest = loop.run(read_manifest(tier, step))
            entry = manifest.entry_for_rank(rank) if manifest else None
            path = tier.local_path(entry.key) if entry else None
            if path is not None and path.is_file():
                paths.append(path)
        if paths:
            return audit_files(paths)
    return None


def audit_files(paths_by_step: list) -> dict:
    """One rank's sample: the same offsets of its files of consecutive checkpoints, oldest first."""
    samples = [sample_file(p) for p in paths_by_step]
    return {"digests": [s["digests"] for s in samples], "zlib_ratio": [s["zlib_ratio"] for s in samples]}


def summarize_audits(audits: list[dict]) -> dict:
    """What results.json says about the bytes written, from every rank's ``audit_files``.

    distinct_within_file: worst rank's share of distinct sampled blocks in its newest file;
    distinct_across_ranks: distinct share of all ranks' newest samples together;
    changed_across_checkpoints: share of sampled offsets whose block differs between a
    rank's two newest checkpoints (None with fewer than two); zlib_ratio: worst (lowest).
    """
    newest = [a["digests"][-1] for a in audits if a and a["digests"]]
    if not newest or not any(newest):
        return {"sampled_blocks": 0}
    within = min(len(set(d)) / len(d) for d in newest if d)
    everyone = [x for d in newest for x in d]
    pairs = [(a["digests"][-2], a["digests"][-1]) for a in audits if a and len(a["digests"]) >= 2]
    changed = None
    if pairs:
        total = sum(len(new) for _, new in pairs)
        changed = sum(o != n for old, new in pairs for o, n in zip(old, new)) / max(1, total)
    return {"sampled_blocks": len(everyone), "distinct_within_file": within,
            "distinct_across_ranks": len(set(everyone)) / len(everyone),
            "changed_across_checkpoints": changed,
            "zlib_ratio": min(r for a in audits if a for r in a["zlib_ratio"])}
