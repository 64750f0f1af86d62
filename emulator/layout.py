"""Checkpoint layout on a tier, manifests, completeness and retention.

One folder per checkpoint step, one file per rank with DLIO-like names, and a
``manifest.json`` written last listing each file's size and CRC32C. A
checkpoint is complete on a tier only when its manifest is there; everything
else is garbage from a crash or a checkpoint in progress and is ignored by
readers. Retention deletes the manifest first, so a half-deleted checkpoint
never looks complete.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field

from tiers.base import Tier

FORMAT = "ckpt-emu/1"
MANIFEST = "manifest.json"
_STEP_DIR = re.compile(r"^step_(\d{8})/")


def step_dir(step: int) -> str:
    return f"step_{step:08d}"


def rank_file_key(step: int, rank: int, dp: int, mp: int) -> str:
    """DLIO-like name: ZeRO's (pp_rank, mp_rank) naming plus the global rank for uniqueness."""
    return f"{step_dir(step)}/zero_pp_rank_{dp}_mp_rank_{mp:02d}_rank{rank:05d}_states.pt"


def manifest_key(step: int) -> str:
    return f"{step_dir(step)}/{MANIFEST}"


@dataclass
class FileEntry:
    key: str
    rank: int
    size: int
    crc32c: str


@dataclass
class Manifest:
    step: int
    files: list  # FileEntry
    tier: str = ""
    mode: str = ""
    world: int = 0
    created: float = field(default_factory=time.time)
    meta: dict = field(default_factory=dict)
    format: str = FORMAT

    def to_json(self) -> bytes:
        d = asdict(self)
        return json.dumps(d, indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> "Manifest":
        d = json.loads(raw)
        if d.get("format") != FORMAT:
            raise ValueError(f"unknown manifest format {d.get('format')!r}")
        d["files"] = [FileEntry(**f) for f in d["files"]]
        return cls(**d)

    def entry_for_rank(self, rank: int) -> FileEntry | None:
        return next((f for f in self.files if f.rank == rank), None)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


async def write_manifest(tier: Tier, manifest: Manifest) -> None:
    await tier.put(manifest_key(manifest.step), manifest.to_json())


async def read_manifest(tier: Tier, step: int) -> Manifest | None:
    """The step's manifest, or None if absent or unreadable (a torn manifest is not complete)."""
    try:
        raw = await tier.get(manifest_key(step))
        return Manifest.from_json(raw)
    except FileNotFoundError:
        return None
    except (ValueError, TypeError, KeyError):
        return None


async def list_steps(tier: Tier) -> tuple[list[int], list[int]]:
    """(complete steps, all steps with any object), both sorted ascending."""
    complete, seen = set(), set()
    for key in await tier.list("step_"):
        m = _STEP_DIR.match(key)
        if not m:
            continue
        step = int(m.group(1))
        seen.add(step)
        if key.endswith("/" + MANIFEST):
            complete.add(step)
    return sorted(complete), sorted(seen)


async def delete_checkpoint(tier: Tier, step: int) -> None:
    """Manifest first, then the files: never leaves a half-deleted checkpoint that looks complete."""
    await tier.delete(manifest_key(step))
    for key in await tier.list(step_dir(step) + "/"):
        await tier.delete(key)


async def apply_retention(tier: Tier, keep: int, *, protect: set[int] = frozenset()) -> list[int]:
    """Keep the newest ``keep`` complete checkpoints; delete older complete ones and
    incomplete ones older than the newest complete (crash leftovers). Returns deleted steps."""
    complete, seen = await list_steps(tier)
    if not complete:
        return []
    keep_set = set(complete[-keep:]) | set(protect)
    newest = complete[-1]
    doomed = [s for s in seen if s not in keep_set and (s in complete or s < newest)]
    for step in doomed:
        await delete_checkpoint(tier, step)
    return doomed
