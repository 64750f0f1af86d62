"""MLPerf Storage's checkpointing workload on our tiers (``checkpoint.protocol: mlperf``).

As DLIO runs it for MLPerf Storage: ``saves`` checkpoint writes, then ``loads``
reads. Each rank writes its model and optimizer shares with ``torch.save`` (zip
CRC32 on) under DLIO's file names in ``global_epoch1_step{N}/``, every file
fsynced before it counts (the tier's durable publish). Read N reads checkpoint
N as written by the rank one node further on (rank + ranks per node, modulo the
world): the restarted-node case, which a single node cannot show. Between the
phases the page cache is dropped when the 3x rule asks for it (or the record
says why not). With a local tier the files go there and are then copied to the
global tier, timed apart; a shifted read of another node's files comes from the
global tier. Each rank returns timed records; rank 0 turns them into figures
(``figures``) and folders (``dlio``, ``report``).
"""
from __future__ import annotations

import asyncio
import io
import os
import platform
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from emulator import sizing
from emulator.checkpoint.restore import drop_cached_pages
from emulator.errors import UserError
from emulator.host import proc_bytes, proc_fields
from emulator.job.ownership import claim_tiers, release
from emulator.job.rank_tiers import build_tiers, pace_tier
from emulator.workload.content import Content
from emulator.workload.state import model_specs, optimizer_specs
from tiers.base import Sink, unwrap
from tiers.fileops import open_regular

EPOCH = 1
#: the MLPerf rule: drop the client's page cache when its checkpoint data is under 3x its memory
CACHE_RULE_FACTOR = 3


def checkpoint_dir(step: int) -> str:
    """DLIO's folder of one checkpoint (steps count from 1 in each phase)."""
    return f"global_epoch{EPOCH}_step{step}"


@dataclass(frozen=True)
class RankFile:
    """One file a rank writes: its DLIO name and the tensors it holds."""

    name: str
    specs: tuple  # TensorSpec


def _layer_index(name: str, num_layers: int) -> int:
    """DLIO's layer numbering: 0 embedding (and learned positions), 1..L transformer layers, L+1 lm_head,
    L+2 final norm."""
    if name.startswith(("embedding.", "position_embedding.")):
        return 0
    if name.startswith("layers."):
        return int(name.split(".")[1]) + 1
    return num_layers + 1 if name.startswith("lm_head.") else num_layers + 2


def _model_files(cfg, dp: int, mp: int, specs: list) -> list[RankFile]:
    par = cfg.parallelism
    if par.zero_stage in (1, 2) and par.pp > 1:  # layer by layer, DP rank 0 only
        layers: dict[int, list] = {}
        for s in specs:
            layers.setdefault(_layer_index(s.name, cfg.model.num_layers), []).append(s)
        return [RankFile(f"layer_{i}-model_{mp}_model_states.pt", tuple(v)) for i, v in sorted(layers.items())]
    if par.zero_stage in (1, 2):
        return [RankFile(f"model_{mp}_model_states.pt", tuple(specs))]
    return [RankFile(f"zero_pp_rank_{dp}_mp_rank_{mp}_model_states.pt", tuple(specs))]


def rank_files(cfg, rank: int) -> list[RankFile]:
    """The files rank ``rank`` writes per checkpoint, named as DLIO names them."""
    par = cfg.parallelism
    c = sizing.rank_coords(rank, par.tp, par.pp, par.dp)
    mp = rank % (par.tp * par.pp)
    files = []
    mspecs = model_specs(cfg.model, par, c, cfg.run.scale)
    if mspecs:
        files += _model_files(cfg, c.dp, mp, mspecs)
    ospecs = optimizer_specs(cfg.model, par, c, cfg.run.scale)
    if ospecs:
        files.append(RankFile(f"zero_pp_rank_{c.dp}_mp_rank_{mp}_optim_states.pt", tuple(ospecs)))
    return files


def shifted_rank(rank: int, ranks_per_node: int, world: int) -> int:
    """Whose files a rank reads: the rank one node further on (itself on a single node)."""
    return (rank + ranks_per_node) % world


def file_key(step: int, f: RankFile) -> str:
    return f"{checkpoint_dir(step)}/{f.name}"


class _CountingSink(Sink):
    """Counts what ``torch.save`` writes and refuses a short write (torch ignores them)."""

    def __init__(self, inner: Sink):
        self._inner, self.bytes_written = inner, 0

    def write(self, data) -> int:
        n = memoryview(data).nbytes
        if self._inner.write(data) != n:
            raise OSError(f"short write to a checkpoint file ({n} bytes asked)")
        self.bytes_written += n
        return n

    def commit(self) -> None:
        self._inner.commit()

    def abort(self) -> None:
        self._inner.abort()


def save_files(tier, step: int, files: list[RankFile], tensors: dict) -> int:
    """torch.save each file into the tier; a file counts once the tier published it durably
    (a directory tier: fsync, rename, fsync of the folder). Returns the bytes written."""
    total = 0
    for f in files:
        with _CountingSink(tier.open_write(file_key(step, f))) as sink:
            torch.save({s.name: tensors[s.name] for s in f.specs}, sink)
        total += sink.bytes_written
    return total


def _seekable(fh) -> bool:
    try:
        return bool(fh.seekable())
    except (AttributeError, OSError):
        return False


def _plain_path(tier, key: str) -> Path | None:
    """The file behind ``key`` when nothing stands between it and the reader (no emulation wrapper)."""
    if unwrap(tier) is not tier:
        return None
    return tier.local_path(key)


def load_files(tier, step: int, files: list[RankFile]) -> int:
    """``torch.load`` each file whole, as DLIO does; returns the bytes read.

    A plain directory tier is read with DLIO's own call, ``torch.load(path)`` (torch's C++ file
    reader). Otherwise a seekable reader is loaded from directly (through the tier, so emulated
    read rates apply, and no second in-memory copy of a multi-GiB file); others are read whole first.
    """
    total = 0
    for f in files:
        key = file_key(step, f)
        path = _plain_path(tier, key)
        if path is not None:
            os.close(open_regular(path))  # a regular file: never a FIFO torch.load would wait on
            loaded = torch.load(str(path), weights_only=True)
            total += path.stat().st_size
            _check_tensors(step, f, loaded)
            continue
        with tier.open_read(key) as fh:
            if _seekable(fh):
                loaded = torch.load(fh, weights_only=True)
                total += fh.seek(0, os.SEEK_END)
            else:
                data = fh.read()
                total += len(data)
                loaded = torch.load(io.BytesIO(data), weights_only=True)
                del data
        _check_tensors(step, f, loaded)
    return total


def _check_tensors(step: int, f: RankFile, loaded) -> None:
    if len(loaded) != len(f.specs):
        raise UserError(f"{file_key(step, f)}: holds {len(loaded)} tensors, expected {len(f.specs)}")


# --------------------------------------------------------------------------- the host

def _proc_dict(path: str) -> dict:
    """``key: value`` lines of /proc/cpuinfo or /proc/meminfo (the first of each key), as DLIO keeps them."""
    return {k: v for k, v in proc_fields(path).items() if k != "processor"}


def memory_bytes() -> int:
    return proc_bytes("/proc/meminfo", "MemTotal") or 0


def host_info() -> dict:
    """What DLIO's summary says about a host."""
    return {"hostname": socket.gethostname(), "cpu_count": os.cpu_count() or 0,
            "processor": platform.processor(), "memory_bytes": memory_bytes(),
            "cpuinfo": _proc_dict("/proc/cpuinfo"), "meminfo": _proc_dict("/proc/meminfo")}


def cache_decision(node_bytes: int, memory: int, drop_allowed: bool, dropper) -> dict:
    """The 3x rule for one client: drop its page cache when its checkpoint data is under
    3x its memory; the record says what was done and why."""
    needed = node_bytes < CACHE_RULE_FACTOR * memory
    dropped = bool(needed and drop_allowed and dropper())
    if not needed:
        why = f"not needed: the node's checkpoint data is at least {CACHE_RULE_FACTOR}x its memory"
    elif dropped:
        why = f"dropped: the node's checkpoint data is under {CACHE_RULE_FACTOR}x its memory"
    elif not drop_allowed:
        why = "NOT dropped (checkpoint.drop_page_cache: false) though the 3x rule asks for it: reads may be cached"
    else:
        why = "NOT dropped (not permitted here: needs root) though the 3x rule asks for it: reads may be cached"
    return {"node_bytes": node_bytes, "memory_bytes": memory, "needed": needed, "dropped": dropped, "why": why}


# --------------------------------------------------------------------------- the rank

async def _copy(src, dest, key: str) -> None:
    """One object from tier to tier, its bytes never a result of ``asyncio.run`` (tiers/runsync.py)."""
    await dest.put(key, await src.get(key))


class MlperfRank:
    """One rank's run of the protocol: its tensors, its tiers, the timed writes and reads."""

    def __init__(self, cfg, design, out: Path, comm):
        self.cfg, self.out, self.comm = cfg, Path(out), comm
        tiers = {name: pace_tier(design, None, comm, out, name, bare)  # the storage as it is: no clock
                 for name, bare in build_tiers(cfg, comm, out).items()}
        self.local, self.global_ = tiers.get("local"), tiers["global"]
        self.claims = claim_tiers(comm, self.out, self.local, self.global_)
        self._recover_tiers()
        self.files = rank_files(cfg, comm.rank)
        self.tensors = {s.name: torch.empty(s.shape, dtype=s.dtype) for f in self.files for s in f.specs}
        self.content = Content(list(self.tensors.values()), seed=cfg.run.seed, rank=comm.rank,
                               dedup_ratio=cfg.state.dedup_ratio, compress_ratio=cfg.state.compress_ratio)
        self.content.fill()
        self.src = shifted_rank(comm.rank, comm.local_world_size, comm.world_size)
        self.src_files = rank_files(cfg, self.src)

    def _recover_tiers(self) -> None:
        """What a killed run left (partial files, uploads) goes first: node leaders their local
        tier, rank 0 the global one; the others wait."""
        if self.comm.is_node_leader and self.local is not None:
            asyncio.run(self.local.recover_after_crash())
        if self.comm.rank == 0:
            asyncio.run(self.global_.recover_after_crash())
        self.comm.barrier()

    @property
    def tensor_bytes(self) -> int:
        return sum(s.nbytes for f in self.files for s in f.specs)

    def _drain(self, step: int) -> float:
        """Copy this rank's files of one checkpoint from the local to the global tier."""
        t = time.time()
        for f in self.files:
            key = file_key(step, f)
            path = self.local.local_path(key)
            if path is not None:
                asyncio.run(self.global_.put_file(key, path))
            else:
                asyncio.run(_copy(self.local, self.global_, key))
        return time.time() - t

    def save(self, index: int) -> dict:
        if index > 1:
            self.content.advance(index)  # new bytes each checkpoint, outside the timed part
        self.comm.barrier()
        start = time.time()
        nbytes = save_files(self.local or self.global_, index, self.files, self.tensors)
        end = time.time()
        rec = {"op": "save", "index": index, "start": start, "end": end, "bytes": nbytes,
               "files": [file_key(index, f) for f in self.files]}
        if self.local is not None:
            rec["drain_s"] = self._drain(index)
        return rec

    def _read_tier(self):
        same_node = self.src // self.comm.local_world_size == self.comm.node
        return (self.local, "local") if self.local is not None and same_node else (self.global_, "global")

    def load(self, index: int) -> dict:
        tier, name = self._read_tier()
        self.comm.barrier()
        start = time.time()
        nbytes = load_files(tier, index, self.src_files)
        end = time.time()
        return {"op": "load", "index": index, "start": start, "end": end, "bytes": nbytes,
                "source_rank": self.src, "tier": name,
                "files": [file_key(index, f) for f in self.src_files]}

    def _check_readable(self) -> None:
        """Every rank agrees before timing that each checkpoint to read is there."""
        self.comm.barrier()  # every rank's writes (and drains) are done
        tier, _ = self._read_tier()
        missing = None
        for i in range(1, self.cfg.checkpoint.loads + 1):
            for f in self.src_files:
                if missing is None and asyncio.run(tier.size(file_key(i, f))) is None:
                    missing = file_key(i, f)
        if self.comm.all_max(1.0 if missing else 0.0) > 0:
            what = f"{missing} is missing" if missing else "another rank's checkpoint files are missing"
            raise UserError(f"nothing to read: {what}; run the write phase first (--phase write) "
                            f"with the same config and tiers")

    def _drop_cache(self, saves_written: int) -> dict | None:
        """Node leaders apply the 3x rule before the reads; the others wait for them."""
        decision = None
        if self.comm.is_node_leader:
            node_bytes = self.tensor_bytes * self.comm.local_world_size * max(1, saves_written)
            tiers = [t for t in (self.local, self.global_) if t is not None]
            scope = self.cfg.checkpoint.page_cache_scope  # by default the checkpoint files' pages only
            decision = cache_decision(node_bytes, memory_bytes(), self.cfg.checkpoint.drop_page_cache,
                                      lambda: asyncio.run(drop_cached_pages(scope, tiers)))
            if decision["dropped"]:
                decision["why"] += " (the checkpoint files' own pages)" if scope == "files" else \
                    " (the whole host's page cache)"
        self.comm.barrier()
        return decision

    def run(self) -> dict:
        phase, ck = self.cfg.checkpoint.phase, self.cfg.checkpoint
        start = time.time()
        saves = [self.save(i) for i in range(1, ck.saves + 1)] if phase in ("both", "write") else []
        loads, cache = [], None
        if phase in ("both", "read"):
            self._check_readable()
            cache = self._drop_cache(len(saves) or ck.loads)
            loads = [self.load(i) for i in range(1, ck.loads + 1)]
        end = time.time()
        self.comm.barrier()
        release(self.claims)
        return {"rank": self.comm.rank, "node": self.comm.node, "start": start, "end": end,
                "tensor_bytes": self.tensor_bytes, "saves": saves, "loads": loads, "cache": cache,
                "host": host_info() if self.comm.is_node_leader else None,
                "storage": (self.local or self.global_).describe()}


def run_rank(cfg, design, out: Path, comm) -> dict:
    return MlperfRank(cfg, design, out, comm).run()


def check_read_phase(cfg) -> None:
    """Before a read-only run starts: the checkpoints it reads are on a directory global tier
    (other tiers are checked by the ranks). Raises UserError naming the first one missing."""
    opts = cfg.tiers.global_.options
    path = getattr(opts, "path", None)
    if cfg.tiers.global_.backend != "dir" or not path or "{node}" in path:
        return
    path = opts.for_node(0)  # {uid}
    for i in range(1, cfg.checkpoint.loads + 1):
        if not (Path(path) / checkpoint_dir(i)).is_dir():
            raise UserError(f"--phase read: {Path(path) / checkpoint_dir(i)} does not exist; run the "
                            f"write phase first (--phase write) with the same config")
