"""Fault injection: the ``failures:`` config section, carried out at named points of the pipeline.

Why it looks like this:

* Injection points are few and explicit: the pipeline calls ``faults.hit(phase,
  seq)`` at the four named phases (checkpointer.py and drainer.py), and
  ``faults.checkpoint_started(seq)`` / ``faults.after_checkpoint(...)`` around
  each checkpoint. Without a ``failures:`` section the pipeline gets
  ``NO_FAULTS``, whose methods return at once, and the global tier is not
  wrapped: zero cost.
* A kill is a real ``SIGKILL`` of the rank's own process at that point, so what
  it leaves behind (partial files, half-drained steps, multipart uploads) is
  exactly what a crash leaves. It prints one ``ckpt-emu: error:`` line first so
  the launcher can say what happened. Kills fire only in the launch attempt
  they name (the job's attempt, emulator/rank/membership.py); global faults and corruption only
  in the first attempt, so a restarted job recovers instead of crashing again.
* A global outage wraps the global tier in ``tiers.faulty.FaultyTier`` and opens
  its window when this process starts the checkpoint named (in a soak, ``recurring``:
  every that many checkpoints).
* Corruption damages a rank's file once its checkpoint is complete on the tier.
"""
from __future__ import annotations

import asyncio
import os
import signal
import sys

from emulator.checkpoint.layout import manifest_key
from emulator.checkpoint.tally import Tally
from emulator.errors import say
from tiers.base import Tier
from tiers.faulty import FaultyTier


def kill_override(text: str) -> str:
    """``--kill RANK:CHECKPOINT:PHASE[:ATTEMPT]`` as the ``--set`` override it stands for."""
    import argparse
    parts = text.split(":")
    if len(parts) not in (3, 4) or not parts[2].isidentifier() or \
            not all(p.isdigit() for i, p in enumerate(parts) if i != 2):
        raise argparse.ArgumentTypeError(f"{text!r}: use RANK:CHECKPOINT:PHASE[:ATTEMPT], e.g. 1:3:drain")
    rank, ckpt, phase = parts[:3]
    attempt = parts[3] if len(parts) == 4 else "0"
    return f"failures.kill=[{{rank: {rank}, checkpoint: {ckpt}, phase: '{phase}', attempt: {attempt}}}]"


# --------------------------------------------------------------------------- injection

class NoFaults:
    """What the pipeline gets without a ``failures:`` section: every hook returns at once."""

    active = False

    def hit(self, phase: str, seq: int) -> None:
        pass

    def checkpoint_started(self, seq: int) -> None:
        pass

    def wrap_global(self, tier: Tier) -> Tier:
        return tier

    async def after_checkpoint(self, seq: int, step: int, key: str, tiers: dict) -> None:
        pass


NO_FAULTS = NoFaults()


class Faults(NoFaults):
    active = True

    def __init__(self, failures, rank: int, attempt: int, tally: Tally, *, recurring: bool = False):
        self.rank, self.attempt, self.tally, self.recurring = rank, attempt, tally, recurring
        self.kills = {(k.checkpoint, k.phase) for k in failures.kill if k.rank == rank and k.attempt == attempt}
        self.global_fault = failures.global_fault if attempt == 0 else None
        c = failures.corrupt
        self.corrupt = c if c is not None and attempt == 0 and c.rank == rank else None
        self._faulty: FaultyTier | None = None

    @classmethod
    def from_config(cls, failures, rank: int, attempt: int, tally: Tally, *, recurring: bool = False) -> NoFaults:
        if not (failures.kill or failures.global_fault or failures.corrupt):
            return NO_FAULTS
        return cls(failures, rank, attempt, tally, recurring=recurring)

    def hit(self, phase: str, seq: int) -> None:
        if (seq, phase) not in self.kills:
            return
        self.tally.count("injected")
        say(f"ckpt-emu: error: rank {self.rank}: injected failure: SIGKILL at checkpoint {seq} during "
            f"{phase} (failures.kill, attempt {self.attempt}); run again to resume")
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    def wrap_global(self, tier: Tier) -> Tier:
        if self.global_fault is None:
            return tier
        self._faulty = FaultyTier(tier, self.global_fault.kind, self.global_fault.delay_s)
        return self._faulty

    def checkpoint_started(self, seq: int) -> None:
        g = self.global_fault
        due = seq % g.checkpoint == 0 if g is not None and self.recurring else g is not None and seq == g.checkpoint
        if due and self._faulty is not None:
            self.tally.count("injected")
            self._faulty.activate(g.seconds)

    async def after_checkpoint(self, seq: int, step: int, key: str, tiers: dict) -> None:
        """Damage this rank's file of checkpoint ``seq`` on the named tier, if it is complete there."""
        c = self.corrupt
        if c is None or seq != c.checkpoint or tiers.get(c.tier) is None:
            return
        tier = tiers[c.tier]
        if await tier.size(manifest_key(step)) is None:
            return  # not complete there: nothing a reader would trust, nothing to damage
        if tier.local_path(key) is not None:
            await asyncio.to_thread(damage, tier, key, c.how)
        else:
            await damage_async(tier, key, c.how)
        self.tally.count("injected")


def damage(tier: Tier, key: str, how: str) -> None:
    """Bit rot in place on a tier with files: flip a byte, truncate, or delete the file."""
    path = tier.local_path(key)
    if how == "delete":
        path.unlink(missing_ok=True)
        return
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        if how == "truncate":
            fh.truncate(size // 2)
        else:
            fh.seek(size // 2)
            b = fh.read(1)
            fh.seek(size // 2)
            fh.write(bytes([b[0] ^ 0xFF]))
        fh.flush()
        os.fsync(fh.fileno())


async def damage_async(tier: Tier, key: str, how: str) -> None:
    """The same through the tier API (object stores): rewrite or delete the object."""
    if how == "delete":
        await tier.delete(key)
        return
    data = bytearray(await tier.get(key))
    if how == "truncate":
        data = data[: len(data) // 2]
    else:
        data[len(data) // 2] ^= 0xFF
    await tier.put(key, bytes(data))
