"""The one interface every storage tier implements.

A tier is a flat namespace of keys (relative POSIX paths such as
``step_00000010/manifest.json``) holding immutable byte blobs. Writes are
atomic: a reader sees the whole new object or nothing, never a prefix. That
single property is what lets a manifest written last mark a checkpoint
complete.

Bulk checkpoint bytes move through three doors, chosen for speed:
``open_write`` (a synchronous stream, because ``torch.save`` writes to a file
object from a worker thread), ``put_file``/``get_file`` (whole-file copies, so
a directory tier can use the kernel's copy paths and S3 can use multipart
transfers), and ``open_read`` (a sequential stream for verification). Small
objects such as manifests use ``put``/``get``.
"""
from __future__ import annotations

import abc
import posixpath
from pathlib import Path
from typing import BinaryIO


class TierError(Exception):
    """A tier operation failed in a way the caller should report, not crash on."""


class InvalidKey(TierError, ValueError):
    """A key that could escape the tier's namespace or is not a plain relative path."""


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


def parent_prefix(key: str) -> str:
    return posixpath.dirname(key)


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
        if exc_type is None:
            self.commit()
        else:
            self.abort()
        return False


class Tier(abc.ABC):
    """Async storage backend. Keys are validated with ``validate_key``."""

    #: short backend name, used as the ``backend`` metrics label
    backend: str = "abstract"

    @abc.abstractmethod
    async def put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        """Store ``data`` under ``key`` atomically and durably."""

    @abc.abstractmethod
    async def get(self, key: str) -> bytes:
        """Return the object's bytes; FileNotFoundError if it does not exist."""

    @abc.abstractmethod
    async def put_file(self, key: str, src: Path) -> None:
        """Copy a local file into the tier atomically and durably."""

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
        """A synchronous, sequential reader; FileNotFoundError if missing."""

    def local_path(self, key: str) -> Path | None:
        """A filesystem path holding the object, if this tier has one (for mmap loads)."""
        return None

    async def close(self) -> None:
        """Release connections and threads; the default has nothing to release."""

    def describe(self) -> str:
        """Human-readable location for reports; never includes credentials."""
        return self.backend
