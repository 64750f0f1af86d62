"""Who reads a restore: every rank, or one rank per data-parallel group and a broadcast.

A job restarting after a correlated failure restores on every rank at once. Where data-parallel
replicas hold the same state, every replica reading it is a read storm on the global tier: DP
times the bytes. MegaScale (NSDI'24) has one worker of each DP group read the state and
broadcast it to the others; torchtitan's RFC 4035 proposes striped reads plus a collective
broadcast for the same reason. ``checkpoint.restore_readers`` chooses: ``all`` or
``one_per_dp_group``.

Replicas hold the same state under ZeRO-0 (``parallelism.zero_stage: 0``): every DP rank of a
model-parallel shard (same tp and pp coordinates) holds its model and optimizer state, and, as
DLIO writes it, only DP rank 0, the group's leader, writes it (sizing.py); the other ranks' files
hold none. So do the shard groups of HSDP (``parallelism.shard_group`` below dp): the ranks with
the same shard in each group hold the same state, and the first group's writes it. Plain ZeRO >= 1
shards the optimizer state across all DP ranks (ZeRO-3 the weights too), so there is nothing to
share, and the config refuses ``one_per_dp_group``. A replicated
job's restart gives every member the leader's bytes, so in a ZeRO-0 layout each member restores
its leader's file into a replica of the leader's state (``restore_state``; training and
checkpoints go on with the DLIO state, the members writing none): with ``all`` every member reads
that file itself (the storm), with ``one_per_dp_group`` the leader reads it and sends it.

The wire (a gloo group per DP group, ``new_dp_group``): once the leader verified its file it
sends the plan (size, the file's non-tensor bytes, each tensor's offset and name), then every
tensor in 64 MiB chunks straight from its staging buffers into the members' (bounded memory, no
copy). Each member CRC32Cs the stream in file order and compares size and CRC32C with the
manifest entry it would have read itself; a mismatch (a corrupted chunk) makes it read the file
from its own tiers, as with ``all``. Nothing is adopted before it verified and every rank agreed
on the step (``Restorer.load``).
"""
from __future__ import annotations

import crc32c
import torch
import torch.distributed as dist

from emulator.checkpoint.integrity import format_crc
from emulator.checkpoint.restore import Restorer
from emulator.sizing import state_holders
from emulator.workload.state import RankState

CHUNK = 64 << 20  # bytes per broadcast: what a member holds in flight, at most


def dp_group(par, rank: int) -> list[int]:
    """The running ranks that hold ``rank``'s state, its DP group's leader (the one that writes it)
    first (sizing.state_holders); ``[rank]`` where no other rank holds it."""
    return [r for r in state_holders(par, rank) if r < par.active_ranks]


def new_dp_group(cfg, rank: int):
    """With ``one_per_dp_group``: a gloo group per DP group of two or more ranks, created on every
    rank in the same order (``dist.new_group`` is collective); this rank's, or None."""
    if cfg.checkpoint.restore_readers != "one_per_dp_group":
        return None
    par, mine = cfg.parallelism, None
    for leader in range(min(par.tp * par.pp, par.active_ranks)):
        ranks = dp_group(par, leader)
        if len(ranks) > 1:
            group = dist.new_group(ranks, backend="gloo")
            mine = group if rank in ranks else mine
    return mine


def restore_state(cfg, design, state: RankState, rank: int, device) -> RankState:
    """What ``rank`` restores into: its own state, or a member's replica of its leader's state (a run
    of ``cfg`` on ``design``)."""
    leader = dp_group(cfg.parallelism, rank)[0]
    return state if leader == rank else RankState.of_run(cfg, design, leader, device)


def make_restorer(cfg, state: RankState, tiers, comm, *, group=None, **kwargs) -> Restorer:
    """The Restorer ``checkpoint.restore_readers`` asks for; ``state`` from ``restore_state``."""
    ranks = dp_group(cfg.parallelism, comm.rank)
    if cfg.checkpoint.restore_readers == "one_per_dp_group":
        return BroadcastRestorer(state, tiers, comm, group=group, ranks=ranks, **kwargs)
    return Restorer(state, tiers, comm, source=ranks[0], **kwargs)


def _outgoing(chunk: torch.Tensor) -> torch.Tensor:
    """The bytes the leader sends of a chunk (a test corrupts them here)."""
    return chunk


def _chunks(t: torch.Tensor):
    raw = t.view(-1).view(torch.uint8)
    for lo in range(0, raw.numel(), CHUNK):
        yield raw[lo:lo + CHUNK]


class BroadcastRestorer(Restorer):
    """One rank per DP group reads from a tier; the group's other ranks verify its bytes and adopt them."""

    def __init__(self, state, tiers, comm, *, group, ranks: list[int], **kwargs):
        super().__init__(state, tiers, comm, source=ranks[0], **kwargs)
        self.group, self.leader = group, ranks[0]
        self.keep_plan = comm.rank == self.leader and group is not None

    def _load(self):
        rec = super()._load()
        rec.readers = "one_per_dp_group"
        return rec

    def _try_step(self, step: int, rec) -> bool:
        if self.group is None:  # a DP group of one: nothing to share
            return super()._try_step(step, rec)
        if self.comm.rank == self.leader:
            self.plan = None
            ok = super()._try_step(step, rec)
            self._send(ok, rec.tier)
            return ok
        return self._receive(step, rec)

    def _send(self, ok: bool, tier: str) -> None:
        """The plan, then every tensor's bytes in file order (after this rank verified them from ``tier``)."""
        spans, gaps, size = self.plan if ok and self.plan is not None else (None, None, 0)
        names = {id(t): (g, k) for g, ts in self.state.staging.items() for k, t in ts.items()}
        header = {"ok": ok, "tier": tier, "size": size, "gaps": gaps,
                  "spans": None if spans is None else [(off, *names[id(t)]) for off, t in spans]}
        dist.broadcast_object_list([header], src=self.leader, group=self.group)
        for _, t in spans or []:
            for chunk in _chunks(t):
                dist.broadcast(_outgoing(chunk), src=self.leader, group=self.group)

    def _receive(self, step: int, rec) -> bool:
        """The leader's file into this member's staging buffers, verified against its own manifest."""
        expected = self._expected(step)
        box = [None]
        dist.broadcast_object_list(box, src=self.leader, group=self.group)
        header = box[0]
        if not header["ok"]:
            rec.fallbacks.append(f"broadcast@{step}: the DP group's reader could not load it")
            return False
        if header["spans"] is None:  # the reader could not send it (no tensor offsets): read it here
            return super()._try_step(step, rec)
        crc, size = self._receive_bytes(header)
        if isinstance(expected, str):
            rec.fallbacks.append(f"broadcast@{step}: {expected}")
            return False
        name, manifest, entry = expected
        if size == entry.size and crc == entry.crc32c:
            # served by the tier the reader read (where this rank has it), else the one that vouched
            rec.tier = header["tier"] if header["tier"] in dict(self.tiers) else name
            rec.bytes, rec.broadcast_bytes, rec.read_bytes = size, size, 0
            self.manifest = manifest
            return True
        rec.fallbacks.append(f"broadcast@{step}: checksum mismatch ({crc}, {size} bytes != manifest "
                             f"{entry.crc32c}, {entry.size} bytes)")
        self.tally.count("checksum_mismatch")
        rec.broadcast_bytes = 0
        return super()._try_step(step, rec)  # read the file itself, nearest tier first

    def _expected(self, step: int):
        """(tier, manifest, entry) of the leader's file on this rank's nearest tier, or why none."""
        reason = "no tier holds it"
        for name, tier in self.tiers:
            found = self._locate(tier, step)
            if not isinstance(found, str):
                return (name, *found)
            reason = f"{name}: {found}"
        return reason

    def _receive_bytes(self, header: dict) -> tuple[str, int]:
        """Receive every chunk into the staging tensors; CRC32C and length of the file they make."""
        tensors = [(off, self.state.staging[g][k]) for off, g, k in header["spans"]]
        crc, pos = 0, 0
        for _, item in sorted(header["gaps"] + tensors, key=lambda p: p[0]):
            if isinstance(item, torch.Tensor):
                for chunk in _chunks(item):
                    dist.broadcast(chunk, src=self.leader, group=self.group)
                    crc = crc32c.crc32c(chunk.numpy(), crc)
                    pos += chunk.numel()
            else:
                crc = crc32c.crc32c(item, crc)
                pos += len(item)
        return format_crc(crc), pos
