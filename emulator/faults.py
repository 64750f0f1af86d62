"""Fault injection (the ``failures:`` config section) and retries of global-tier work.

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
  they name (``TORCHELASTIC_RESTART_COUNT``); global faults and corruption only
  in the first attempt, so a restarted job recovers instead of crashing again.
* ``FaultyTier`` wraps the global tier: while its window is open every request
  fails like an S3 503 (``TransientFault``) or is delayed. The window opens in
  each process when that process starts the checkpoint named, so ranks agree
  to within milliseconds without talking to each other.
* ``retrying`` is the one retry loop for global-tier work (drained files, the
  global manifest, direct writes): bounded attempts, exponential backoff with
  jitter, only for errors that can go away (not ENOSPC, a missing source, a bad key).
* ``Tally`` counts faults per process for results.json and forwards the kinds
  the Prometheus metrics know to ``metrics.count_fault``.
"""
from __future__ import annotations

import asyncio
import errno
import os
import random
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from tiers.base import InvalidKey, Sink, Tier, TierError

from .errors import UserError

PERMANENT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT}


def restart_attempt() -> int:
    """0 for the first launch, N after torchrun restarted the workers N times."""
    try:
        return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    except ValueError:
        return 0


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


# --------------------------------------------------------------------------- counting

class Tally:
    """Per-process fault counts (results.json) mirrored into Prometheus where it has the kind."""

    def __init__(self, metrics=None):
        self.metrics = metrics
        self.counts: Counter = Counter()

    def count(self, kind: str, n: int = 1) -> None:
        self.counts[kind] += n
        if self.metrics is not None:
            from .metrics import FAULT_KINDS
            if kind in FAULT_KINDS:
                for _ in range(n):
                    self.metrics.count_fault(kind)


# --------------------------------------------------------------------------- errors and retries

class TransientFault(TierError):
    """An injected global-tier outage: what an S3 503 or a refused connection looks like to us."""


def is_no_space(exc: BaseException) -> bool:
    """ENOSPC/EDQUOT anywhere in the chain (torch.save wraps the sink's OSError in a RuntimeError)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def transient(exc: BaseException) -> bool:
    """Worth another attempt: tier errors, timeouts, resets; not a full disk, a bad key, a lost source."""
    if isinstance(exc, (InvalidKey, UserError, FileNotFoundError)) or not isinstance(exc, Exception):
        return False
    if is_no_space(exc):
        return False
    if isinstance(exc, OSError) and exc.errno in PERMANENT_ERRNOS:
        return False
    return True


class Abandoned(Exception):
    """Every attempt failed; the message says how many and the last reason."""


@dataclass
class RetryPolicy:
    retries: int = 3
    backoff_s: float = 1.0
    max_backoff_s: float = 60.0

    @classmethod
    def from_config(cls, drain_cfg) -> "RetryPolicy":
        return cls(drain_cfg.retries, drain_cfg.retry_backoff_s)

    def delay(self, attempt: int) -> float:
        return min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)


async def retrying(policy: RetryPolicy, what: str, fn, on_retry=None):
    """``await fn()`` up to 1 + retries times; raises Abandoned (or the error if not transient).

    ``on_retry(exc)`` is called before each backoff (to count retries)."""
    attempts = policy.retries + 1
    for attempt in range(1, attempts + 1):
        try:
            return await fn()
        except Exception as exc:  # noqa: BLE001 - classified by transient()
            if not transient(exc):
                raise
            if attempt == attempts:
                raise Abandoned(f"{what}: abandoned after {attempts} attempt(s): {describe_error(exc)}") from exc
            if on_retry is not None:
                on_retry(exc)
            await asyncio.sleep(policy.delay(attempt))


def describe_error(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if isinstance(exc, (TierError, Abandoned)) else f"{type(exc).__name__}: {text}"


# --------------------------------------------------------------------------- the faulty global tier

class _GatedSink(Sink):
    def __init__(self, tier: "FaultyTier", inner: Sink):
        self._tier, self._inner = tier, inner

    @property
    def bytes_written(self) -> int:
        return self._inner.bytes_written

    def write(self, data) -> int:
        return self._inner.write(data)

    def flush(self) -> None:
        self._inner.flush()

    def commit(self) -> None:
        try:
            self._tier._gate_sync("commit")
        except BaseException:
            self._inner.abort()
            raise
        self._inner.commit()

    def abort(self) -> None:
        self._inner.abort()


class FaultyTier(Tier):
    """Wraps a tier; while ``activate``'s window is open, every request fails or waits."""

    def __init__(self, inner: Tier, kind: str = "error", delay_s: float = 0.5):
        self.inner, self.kind, self.delay_s = inner, kind, delay_s
        self._until = 0.0

    def activate(self, seconds: float) -> None:
        self._until = time.monotonic() + seconds

    @property
    def active(self) -> bool:
        return time.monotonic() < self._until

    def _fault(self, what: str) -> TransientFault:
        return TransientFault(f"injected global tier outage (failures.global_fault): {what}: "
                              "503 Service Unavailable")

    async def _gate(self, what: str) -> None:
        if self.active:
            if self.kind == "error":
                raise self._fault(what)
            await asyncio.sleep(self.delay_s)

    def _gate_sync(self, what: str) -> None:
        if self.active:
            if self.kind == "error":
                raise self._fault(what)
            time.sleep(self.delay_s)

    @property
    def backend(self) -> str:
        return self.inner.backend

    async def put(self, key, data) -> None:
        await self._gate(f"put {key}")
        await self.inner.put(key, data)

    async def get(self, key) -> bytes:
        await self._gate(f"get {key}")
        return await self.inner.get(key)

    async def put_file(self, key, src) -> None:
        await self._gate(f"upload {key}")
        await self.inner.put_file(key, src)

    async def get_file(self, key, dest) -> None:
        await self._gate(f"download {key}")
        await self.inner.get_file(key, dest)

    async def size(self, key) -> int | None:
        await self._gate(f"head {key}")
        return await self.inner.size(key)

    async def list(self, prefix: str = "") -> list[str]:
        await self._gate(f"list {prefix}")
        return await self.inner.list(prefix)

    async def delete(self, key) -> None:
        await self._gate(f"delete {key}")
        await self.inner.delete(key)

    def open_write(self, key) -> Sink:
        return _GatedSink(self, self.inner.open_write(key))

    def open_read(self, key) -> BinaryIO:
        self._gate_sync(f"get {key}")
        return self.inner.open_read(key)

    def local_path(self, key) -> Path | None:
        return self.inner.local_path(key)

    async def close(self) -> None:
        await self.inner.close()

    def describe(self) -> str:
        return self.inner.describe()

    def __getattr__(self, name):  # backend extras (abort_stale_uploads, sweep_partials) pass through
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


def unwrap(tier):
    """The innermost backend behind emulation and fault wrappers."""
    while tier is not None and "inner" in vars(tier):
        tier = tier.inner
    return tier


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

    def __init__(self, failures, rank: int, attempt: int, tally: Tally):
        self.rank, self.attempt, self.tally = rank, attempt, tally
        self.kills = {(k.checkpoint, k.phase) for k in failures.kill if k.rank == rank and k.attempt == attempt}
        self.global_fault = failures.global_fault if attempt == 0 else None
        c = failures.corrupt
        self.corrupt = c if c is not None and attempt == 0 and c.rank == rank else None
        self._faulty: FaultyTier | None = None

    @classmethod
    def from_config(cls, failures, rank: int, attempt: int, tally: Tally) -> NoFaults:
        if not (failures.kill or failures.global_fault or failures.corrupt):
            return NO_FAULTS
        return cls(failures, rank, attempt, tally)

    def hit(self, phase: str, seq: int) -> None:
        if (seq, phase) not in self.kills:
            return
        self.tally.count("injected")
        print(f"ckpt-emu: error: rank {self.rank}: injected failure: SIGKILL at checkpoint {seq} during "
              f"{phase} (failures.kill, attempt {self.attempt}); run again to resume", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    def wrap_global(self, tier: Tier) -> Tier:
        if self.global_fault is None:
            return tier
        self._faulty = FaultyTier(tier, self.global_fault.kind, self.global_fault.delay_s)
        return self._faulty

    def checkpoint_started(self, seq: int) -> None:
        g = self.global_fault
        if g is not None and self._faulty is not None and seq == g.checkpoint:
            self.tally.count("injected")
            self._faulty.activate(g.seconds)

    async def after_checkpoint(self, seq: int, step: int, key: str, tiers: dict) -> None:
        """Damage this rank's file of checkpoint ``seq`` on the named tier, if it is complete there."""
        c = self.corrupt
        if c is None or seq != c.checkpoint or tiers.get(c.tier) is None:
            return
        tier = tiers[c.tier]
        from .layout import manifest_key
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
