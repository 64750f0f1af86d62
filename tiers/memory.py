"""An in-memory tier for tests: the reference behaviour of the Tier contract."""
from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import BinaryIO

from .base import Sink, Tier, validate_key, validate_prefix


class MemorySink(Sink):
    def __init__(self, tier: "MemoryTier", key: str):
        self._tier, self._key = tier, key
        self._buf = io.BytesIO()
        self.bytes_written = 0
        self._done = False

    def write(self, data) -> int:
        n = self._buf.write(data)
        self.bytes_written += n
        return n

    def commit(self) -> None:
        if not self._done:
            self._done = True
            self._tier._objects[self._key] = self._buf.getvalue()

    def abort(self) -> None:
        self._done = True
        self._buf = io.BytesIO()


class MemoryTier(Tier):
    backend = "memory"

    def __init__(self):
        self._objects: dict[str, bytes] = {}

    async def put(self, key, data) -> None:
        self._objects[validate_key(key)] = bytes(data)

    async def get(self, key) -> bytes:
        try:
            return self._objects[validate_key(key)]
        except KeyError:
            raise FileNotFoundError(key) from None

    async def put_file(self, key, src) -> None:
        self._objects[validate_key(key)] = await asyncio.to_thread(Path(src).read_bytes)

    async def get_file(self, key, dest) -> None:
        data = await self.get(key)
        Path(dest).parent.mkdir(parents=True, exist_ok=True)  # as every backend's get_file does
        await asyncio.to_thread(Path(dest).write_bytes, data)

    async def size(self, key) -> int | None:
        data = self._objects.get(validate_key(key))
        return None if data is None else len(data)

    async def list(self, prefix: str = "") -> list[str]:
        validate_prefix(prefix)
        return sorted(k for k in self._objects if k.startswith(prefix))

    async def delete(self, key) -> None:
        self._objects.pop(validate_key(key), None)

    def open_write(self, key) -> Sink:
        return MemorySink(self, validate_key(key))

    def open_read(self, key) -> BinaryIO:
        try:
            return io.BytesIO(self._objects[validate_key(key)])
        except KeyError:
            raise FileNotFoundError(key) from None

    def describe(self) -> str:
        return "memory"

    @property
    def in_host_memory(self) -> bool:
        return True
