"""Checkpoint layout on a tier, manifests, completeness and retention.

One folder per checkpoint step, one file per rank with DLIO-like names, and a
``manifest.json`` written last listing each file's size and CRC32C. A
checkpoint is complete on a tier only when its manifest is there; everything
else is garbage from a crash or a checkpoint in progress and is ignored by
readers. Retention deletes the manifest first, so a half-deleted checkpoint
never looks complete.

The manifest carries a CRC32C of its own canonical JSON: a torn or garbled
manifest (a bad sector, a truncated upload, an editor) reads as "not
complete" instead of pointing readers at wrong sizes or checksums, and every
file key in it must be a valid tier key, so a manifest cannot steer a reader
outside the tier.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field

import crc32c

from emulator.design.requests import file_requests, limit_classes
from tiers.base import Tier, validate_key
from tiers.s3_limits import AWS_GET_PER_S, AWS_PUT_PER_S, prefix_of

FORMAT = "ckpt-emu/2"  # /2: the manifest carries its own CRC32C
MANIFEST = "manifest.json"
#: what a manifest's ``meta`` records of the run; a checkpoint resumes only into a run that matches them
META_KEYS = ("preset", "scale", "tp", "pp", "dp", "zero_stage")
#: a step's folder: at least 8 digits, more once steps reach 10^8 (one stray step_99999999 makes the
#: next step 100000000); only the canonical name of a step (``step_dir``) is one of its folders
_STEP_DIR = re.compile(r"^step_(\d{8,})/")


def step_dir(step: int) -> str:
    return f"step_{step:08d}"


def step_of(key: str) -> int | None:
    """The step whose folder ``key`` lies in, or None (not a step folder, or not its canonical name)."""
    m = _STEP_DIR.match(key)
    if m is None or step_dir(int(m.group(1))) != key[:m.end(1)]:
        return None
    return int(m.group(1))


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

    def _body(self) -> dict:
        return asdict(self)

    @staticmethod
    def _checksum(body: dict) -> str:
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
        return f"{crc32c.crc32c(canonical):08x}"

    def to_json(self) -> bytes:
        body = self._body()
        return json.dumps({**body, "checksum": self._checksum(body)}, indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> "Manifest":
        """Parse and verify; ValueError for anything but an intact manifest of this format."""
        d = json.loads(raw)
        if not isinstance(d, dict):
            raise ValueError("manifest is not a JSON object")
        if d.get("format") != FORMAT:
            raise ValueError(f"unknown manifest format {d.get('format')!r}")
        checksum = d.pop("checksum", None)
        if checksum != cls._checksum(d):
            raise ValueError("manifest checksum does not match its content")
        files = d.get("files")
        if not isinstance(files, list):
            raise ValueError("manifest files must be a list")
        entries = []
        for f in files:
            if not isinstance(f, dict) or set(f) != {"key", "rank", "size", "crc32c"}:
                raise ValueError("malformed file entry")
            if not (isinstance(f["key"], str) and _int(f["rank"]) and _int(f["size"])
                    and isinstance(f["crc32c"], str)):
                raise ValueError("malformed file entry")
            validate_key(f["key"])
            entries.append(FileEntry(**f))
        d["files"] = entries
        if not _int(d.get("step")):
            raise ValueError("manifest step must be a non-negative integer")
        return cls(**d)

    def entry_for_rank(self, rank: int) -> FileEntry | None:
        return next((f for f in self.files if f.rank == rank), None)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


async def write_manifest(tier: Tier, manifest: Manifest) -> None:
    await tier.put(manifest_key(manifest.step), manifest.to_json())


async def read_manifest(tier: Tier, step: int) -> Manifest | None:
    """The step's manifest, or None if absent or unreadable (a torn manifest is not complete)."""
    try:
        raw = await tier.get(manifest_key(step))
    except FileNotFoundError:
        return None
    try:
        manifest = Manifest.from_json(raw)
    except (ValueError, TypeError, KeyError, RecursionError):  # InvalidKey is a ValueError
        return None
    return manifest if manifest.step == step else None


async def list_steps(tier: Tier) -> tuple[list[int], list[int]]:
    """(complete steps, all steps with any object), both sorted ascending."""
    complete, seen = set(), set()
    for key in await tier.list("step_"):
        step = step_of(key)
        if step is None:
            continue
        seen.add(step)
        if key.endswith("/" + MANIFEST):
            complete.add(step)
    return sorted(complete), sorted(seen)


async def delete_checkpoint(tier: Tier, step: int) -> None:
    """Manifest first, then the files: never leaves a half-deleted checkpoint that looks complete."""
    await tier.delete(manifest_key(step))
    for key in await tier.list(step_dir(step) + "/"):
        await tier.delete(key)


async def delete_all(tier: Tier) -> list[int]:
    """Delete every checkpoint the tier holds, complete or not; returns their steps."""
    steps = (await list_steps(tier))[1]
    for step in steps:
        await delete_checkpoint(tier, step)
    return steps


async def valid_steps(tier: Tier) -> tuple[list[int], list[int]]:
    """Like ``list_steps``, but a step counts as complete only if its manifest reads back intact."""
    complete, seen = await list_steps(tier)
    return [s for s in complete if await read_manifest(tier, s) is not None], seen


async def apply_retention(tier: Tier, keep: int, *, protect: set[int] = frozenset()) -> list[int]:
    """Keep the newest ``keep`` complete checkpoints; delete older complete ones and
    incomplete ones older than the newest complete (crash leftovers, a garbled
    manifest). Steps newer than the newest complete one may be in flight and are
    left alone. Returns deleted steps."""
    complete, seen = await valid_steps(tier)
    if not complete:
        return []
    keep_set = set(complete[-keep:]) | set(protect)
    newest = complete[-1]
    doomed = [s for s in seen if s not in keep_set and (s in complete or s < newest)]
    for step in doomed:
        await delete_checkpoint(tier, step)
    return doomed


@dataclass(frozen=True)
class KeyLayout:
    """How one checkpoint's keys spread over an object store's prefixes, and the request-rate
    ceiling that sets: each prefix takes ``put_per_s`` PUT-class and ``get_per_s`` GET-class
    requests per second (AWS's documented limits unless the tier's ``emulate:`` says otherwise)."""

    files: int
    prefixes: list  # the distinct prefixes, with a step's folder written step_<8 digits>
    put_requests: int  # per checkpoint: one PUT per file up to one part, else parts + 2; the manifest
    put_per_s: float | None
    get_per_s: float | None

    @property
    def put_ceiling(self) -> float | None:
        return None if self.put_per_s is None else self.put_per_s * len(self.prefixes)

    @property
    def get_ceiling(self) -> float | None:
        return None if self.get_per_s is None else self.get_per_s * len(self.prefixes)

    @property
    def min_put_s(self) -> float:
        """The least time a checkpoint's PUT-class requests take at the ceiling."""
        return 0.0 if self.put_ceiling is None else self.put_requests / self.put_ceiling

    def to_dict(self) -> dict:
        return {"files": self.files, "prefixes": len(self.prefixes), "prefix_names": self.prefixes,
                "put_requests": self.put_requests, "put_per_s_per_prefix": self.put_per_s,
                "get_per_s_per_prefix": self.get_per_s, "put_ceiling_per_s": self.put_ceiling,
                "get_ceiling_per_s": self.get_ceiling, "min_put_s": self.min_put_s}


def key_layout(files: list, *, part_size: int, tier_prefix: str = "", prefix_depth: int | None = None,
               put_per_s: float | None = AWS_PUT_PER_S, get_per_s: float | None = AWS_GET_PER_S) -> KeyLayout:
    """The layout of one checkpoint of ``files`` ((rank, dp, mp, size) each) on an object store whose
    keys start with ``tier_prefix``; the manifest is one more PUT under the step's folder."""
    base = tier_prefix.strip("/") + "/" if tier_prefix.strip("/") else ""
    keys = [rank_file_key(0, rank, dp, mp) for rank, dp, mp, _ in files] + [manifest_key(0)]
    prefixes = sorted({prefix_of(base + k, prefix_depth).replace(step_dir(0), "step_<8 digits>") for k in keys})
    requests = sum(limit_classes(file_requests(1, size, part_size, "none", 4 * part_size))["put"]
                   for *_, size in files) + 1  # the one request model (emulator/design/requests.py)
    return KeyLayout(len(files), prefixes, requests, put_per_s, get_per_s)
