"""The one interface every storage tier implements, and the base of tiers that wrap another.

A tier is a flat namespace of keys (relative POSIX paths such as
``step_00000010/manifest.json``) holding immutable byte blobs. Writes are
atomic: a reader sees the whole new object or nothing, never a prefix. That
single property is what lets a manifest written last mark a checkpoint
complete.

Bulk checkpoint bytes move through three doors, chosen for speed:
``open_write`` (a synchronous stream, because ``torch.save`` writes to a file
object from a worker thread), ``put_file``/``get_file`` (whole-file copies, so
a directory tier can use the kernel's copy paths and S3 can use multipart
transfers), and ``open_read`` (a reader for verification and restores; it must
seek when the tier has no ``local_path``, because ``torch.load`` reads the zip
directory first). Small objects such as manifests use ``put``/``get``.

A backend class also says how it is configured and looked after: ``name``,
an ``Options`` dataclass (its config keys), ``from_options``, ``preflight``
(checks before a run writes anything) and the crash hooks
``recover_after_crash`` / ``clean_up_after_run``. ``tiers/__init__.py`` maps
names to backend classes. Wrappers (emulation, fault injection) derive from
``TierWrapper`` and pass every call through unless they change it.
"""
from __future__ import annotations

import abc
import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable


class TierError(Exception):
    """A tier operation failed in a way the caller should report, not crash on.

    ``transient``: whether trying again may succeed (a 5xx, a timeout, a reset) or not
    (access denied, a missing bucket); the caller's retry policy reads it."""

    def __init__(self, *args, transient: bool = True):
        super().__init__(*args)
        self.transient = transient


class UnsafePath(TierError):
    """A path the tool refuses to use (a link, a FIFO, another user's folder): one line naming it and
    why, never worth a retry (tiers/safepath.py)."""

    def __init__(self, *args):
        super().__init__(*args, transient=False)


class InvalidKey(TierError, ValueError):
    """A key that could escape the tier's namespace or is not a plain relative path."""

    def __init__(self, *args):
        super().__init__(*args, transient=False)


class OptionError(ValueError):
    """A backend option is missing or impossible; the message starts with the option's name."""


@dataclass(frozen=True)
class TierScope:
    """Who is using a tier: which process, and where shared working files go.

    Emulated bandwidth and capacity shared by a node's or the job's processes
    live in ``shared_dir``; spool files (e.g. a drain from a tier without
    files) go to ``spool_dir``. Both None: private to this process, system
    temporary folder.
    """

    rank: int = 0
    local_rank: int = 0
    node: int = 0
    nodes: int = 1
    ranks_per_node: int = 1
    shared_dir: str | None = None
    spool_dir: str | None = None
    #: the node's NIC send bucket (a file), shared by every tier and transport sending through it
    nic_path: str | None = None
    #: the design's bytes per byte this process moves: paced tiers book each byte at this weight
    #: (a rank's file holds structure that does not shrink with run.scale: ``design_bytes_weight``)
    bytes_weight: float = 1.0
    #: the modelled job's S3 requests each of this process's stands for (tiers/s3_limits.py
    #: ``RequestWeights``; None: each stands for itself, and one over the ceiling is refused)
    request_weights: object = None


class Claim:
    """A run's hold on a tier (``Tier.claim``/``join``); ``release`` frees it, and so does the
    death of the process holding it. The base class holds nothing."""

    def release(self) -> None:
        pass


NO_CLAIM = Claim()


@dataclass(frozen=True)
class NoOptions:
    """Options of a backend that takes none."""


def validate_key(key: str) -> str:
    """Return ``key`` if it is a safe relative path, else raise InvalidKey.

    Rejects empty keys, absolute paths, ``.``/``..`` segments, empty segments,
    backslashes and NUL bytes, so no backend can be steered outside its root.
    """
    if not isinstance(key, str) or not key:
        raise InvalidKey(f"invalid key {key!r}: must be a non-empty string")
    if "\x00" in key or "\\" in key:
        raise InvalidKey(f"invalid key {key!r}: NUL and backslash are not allowed")
    if key.startswith("/"):
        raise InvalidKey(f"invalid key {key!r}: absolute paths are not allowed")
    for part in key.split("/"):
        if part in ("", ".", ".."):
            raise InvalidKey(f"invalid key {key!r}: empty, '.' and '..' segments are not allowed")
    return key


def validate_prefix(prefix: str) -> str:
    """A listing prefix: empty (everything) or a valid key, optionally ending in '/'."""
    if prefix == "":
        return prefix
    validate_key(prefix.rstrip("/") or "/")
    return prefix


class Sink(abc.ABC):
    """A synchronous, write-once stream that becomes visible only on ``commit``.

    Used as a context manager it commits on success and aborts on error, so
    an exception in ``torch.save`` never leaves a partial object behind.
    """

    bytes_written: int = 0

    @abc.abstractmethod
    def write(self, data) -> int: ...

    @abc.abstractmethod
    def commit(self) -> None:
        """Make the object durable and visible under its key."""

    @abc.abstractmethod
    def abort(self) -> None:
        """Discard everything written; the key keeps its previous value, if any."""

    def flush(self) -> None:  # torch.save calls flush on file objects
        pass

    def writable(self) -> bool:
        return True

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.abort()
            return False
        try:
            self.commit()
        except BaseException:
            self.abort()  # a failed commit must not leave anything claimed or half-visible
            raise
        return False


class Tier(abc.ABC):
    """Async storage backend. Keys are validated with ``validate_key``."""

    #: short backend name: the ``backend`` config key and metrics label
    backend: str = "abstract"
    #: the backend's config options (a frozen dataclass, validated in ``__post_init__``)
    Options: type = NoOptions

    @classmethod
    def from_options(cls, options, *, scope: TierScope) -> "Tier":
        """Build a tier from validated options for the process ``scope`` describes."""
        return cls()

    @classmethod
    def preflight(cls, options, *, need_bytes: int) -> None:
        """Check before a run writes anything that this tier can hold ``need_bytes``
        (directory writable with enough space, bucket reachable...); raises TierError."""

    def claim(self, holder) -> Claim:
        """Own the tier for this run's lifetime, or raise TierError naming the run that does
        (``holder``: a ``tiers.locking.Holder``). One process per run calls it; the others
        ``join``. The default locks nothing: such a backend can be shared by two runs."""
        return NO_CLAIM

    def join(self) -> Claim:
        """Use the tier as another process of the run that claimed it."""
        return NO_CLAIM

    async def recover_after_crash(self) -> str:
        """Remove what a crashed run left (partial files, multipart uploads); returns a
        one-line note of what was done, "" if nothing. Only one process per tier calls it."""
        return ""

    async def clean_up_after_run(self) -> str:
        """End of a run: release what failed operations could not (e.g. S3 uploads whose abort
        failed while the server was down). One process per tier calls it."""
        return ""

    @abc.abstractmethod
    async def put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        """Store ``data`` under ``key`` atomically and durably."""

    @abc.abstractmethod
    async def get(self, key: str) -> bytes:
        """Return the object's bytes; FileNotFoundError if it does not exist."""

    @abc.abstractmethod
    async def put_file(self, key: str, src: Path) -> None:
        """Copy a local file into the tier atomically and durably."""

    async def put_file_read_back(self, key: str, src: Path) -> tuple[int, int] | None:
        """``put_file``; a tier that can read its copy back while it copies (a bare directory)
        returns the CRC32C and the count of the bytes it read back. None (the default): the
        caller reads the object back after (``open_read``), as it must through any wrapper."""
        await self.put_file(key, src)
        return None

    @abc.abstractmethod
    async def get_file(self, key: str, dest: Path) -> None:
        """Copy an object into a local file (created or replaced)."""

    @abc.abstractmethod
    async def size(self, key: str) -> int | None:
        """The object's size in bytes, or None if it does not exist."""

    @abc.abstractmethod
    async def list(self, prefix: str = "") -> list[str]:
        """Sorted keys of every object whose key starts with ``prefix``."""

    @abc.abstractmethod
    async def delete(self, key: str) -> None:
        """Remove an object; deleting a missing key is not an error."""

    @abc.abstractmethod
    def open_write(self, key: str) -> Sink:
        """A synchronous sink for streaming writers such as ``torch.save``."""

    @abc.abstractmethod
    def open_read(self, key: str) -> BinaryIO:
        """A synchronous reader, seekable if ``local_path`` is None; FileNotFoundError if missing."""

    def local_path(self, key: str) -> Path | None:
        """A filesystem path holding the object, if this tier has one (for mmap loads)."""
        return None

    async def read_from_path(self, key: str, nbytes: int) -> None:
        """Account for ``nbytes`` of ``key`` read straight from ``local_path`` (a drain's copy).

        A plain tier has nothing to add; an emulated one makes the caller wait as its
        device would, so a read that bypasses ``open_read`` is not free.
        """
        return None

    async def close(self) -> None:
        """Release connections and threads; the default has nothing to release."""

    def describe(self) -> str:
        """Human-readable location for reports; never includes credentials."""
        return self.backend

    @property
    def in_host_memory(self) -> bool:
        """Whether the tier's bytes are this host's memory (a RAM-backed filesystem, a process's
        heap): a run empties such a tier when it ends, unless asked to keep it (run.keep_tiers)."""
        return False


class TierWrapper(Tier):
    """A tier around another: every call passes through to ``inner`` unless a subclass changes it.

    Wrappers that act before each request (latency, an injected outage) define
    ``request_error(what)`` and ``request_delay(what)``; the base applies them to
    every request, in the sync doors (opening a stream, committing a sink) and in
    the async ones, so no wrapper bridges sync and async itself.
    """

    def __init__(self, inner: Tier, *, sleep: Callable[[float], None] = time.sleep,
                 async_sleep: Callable | None = None):
        self.inner = inner
        self._sleep = sleep
        self._async_sleep = async_sleep or (asyncio.sleep if sleep is time.sleep else _as_async(sleep))

    # ------------------------------------------------------------------ hooks for subclasses

    def request_error(self, what: str) -> BaseException | None:
        """An error this request must fail with instead of reaching the inner tier."""
        return None

    def request_delay(self, what: str) -> float:
        """Seconds this request waits before reaching the inner tier."""
        return 0.0

    async def before(self, what: str) -> None:
        exc = self.request_error(what)
        if exc is not None:
            raise exc
        delay = self.request_delay(what)
        if delay > 0:
            await self._async_sleep(delay)

    def before_sync(self, what: str) -> None:
        exc = self.request_error(what)
        if exc is not None:
            raise exc
        delay = self.request_delay(what)
        if delay > 0:
            self._sleep(delay)

    # ------------------------------------------------------------------ pass-through

    @property
    def backend(self) -> str:  # metrics label the real backend
        return self.inner.backend

    async def put(self, key, data) -> None:
        await self.before(f"put {key}")
        await self.inner.put(key, data)

    async def get(self, key) -> bytes:
        await self.before(f"get {key}")
        return await self.inner.get(key)

    async def put_file(self, key, src) -> None:
        await self.before(f"upload {key}")
        await self.inner.put_file(key, src)

    async def get_file(self, key, dest) -> None:
        await self.before(f"download {key}")
        await self.inner.get_file(key, dest)

    async def size(self, key) -> int | None:
        await self.before(f"head {key}")
        return await self.inner.size(key)

    async def list(self, prefix: str = "") -> list[str]:
        await self.before(f"list {prefix}")
        return await self.inner.list(prefix)

    async def delete(self, key) -> None:
        await self.before(f"delete {key}")
        await self.inner.delete(key)

    def open_write(self, key) -> Sink:
        return WrappedSink(self, key, self.inner.open_write(key))

    def open_read(self, key) -> BinaryIO:
        self.before_sync(f"get {key}")
        return self.inner.open_read(key)

    def local_path(self, key) -> Path | None:
        return self.inner.local_path(key)

    async def read_from_path(self, key: str, nbytes: int) -> None:
        await self.inner.read_from_path(key, nbytes)

    def claim(self, holder) -> Claim:
        return self.inner.claim(holder)

    def join(self) -> Claim:
        return self.inner.join()

    async def recover_after_crash(self) -> str:
        return await self.inner.recover_after_crash()

    async def clean_up_after_run(self) -> str:
        return await self.inner.clean_up_after_run()

    async def close(self) -> None:
        await self.inner.close()

    def describe(self) -> str:
        return self.inner.describe()

    @property
    def in_host_memory(self) -> bool:
        return self.inner.in_host_memory


class WrappedSink(Sink):
    """A wrapper's sink: bytes pass through; the commit is a request like any other, and a
    commit that fails (the wrapper's or the inner one's) aborts, so nothing is left behind."""

    def __init__(self, tier: TierWrapper, key: str, inner: Sink):
        self._tier, self._key, self._inner = tier, key, inner
        self._done = False

    @property
    def bytes_written(self) -> int:
        return self._inner.bytes_written

    def write(self, data) -> int:
        return self._inner.write(data)

    def flush(self) -> None:
        self._inner.flush()

    def commit(self) -> None:
        if self._done:
            return
        try:
            self._tier.before_sync(f"commit {self._key}")
            self._inner.commit()
        except BaseException:
            self.abort()
            raise
        self._done = True

    def abort(self) -> None:
        if self._done:
            return
        self._done = True
        self._inner.abort()


def unwrap(tier: Tier | None) -> Tier | None:
    """The innermost backend behind any wrappers."""
    while isinstance(tier, TierWrapper):
        tier = tier.inner
    return tier


def _as_async(sleep: Callable[[float], None]):
    async def async_sleep(delay: float) -> None:
        sleep(delay)
    return async_sleep
