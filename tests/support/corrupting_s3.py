"""An S3 backend for the tests that corrupts its own uploads behind its back.

``CorruptingS3Tier`` is the real S3 tier, except that after the first upload of each rank file
(``put_file``, the drain's door) a separate boto3 client PUTs other bytes of the same size over the
object, as a faulty server, a bit flip at rest or another writer would. The tier never learns of it:
only a check of the bytes the server returns can catch it. A run names it as
``corrupting_s3:CorruptingS3Tier`` (tests/ on PYTHONPATH).
"""
from __future__ import annotations

import asyncio

import boto3

from tiers.s3 import S3Tier


def corrupted(data: bytes) -> bytes:
    """The same number of bytes with one byte in the middle flipped: only a checksum tells them apart."""
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1:]


def corrupt_object(endpoint: str, bucket: str, key: str) -> None:
    """Replace the object with a corrupted copy of itself through a client of its own."""
    client = boto3.session.Session().client("s3", endpoint_url=endpoint)
    data = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    client.put_object(Bucket=bucket, Key=key, Body=corrupted(data))


class CorruptingS3Tier(S3Tier):
    _corrupted: set = set()

    async def put_file(self, key, src) -> None:
        await super().put_file(key, src)
        if key.endswith(".pt") and key not in self._corrupted:
            self._corrupted.add(key)
            await asyncio.to_thread(corrupt_object, self.endpoint_url, self.bucket, self._full(key))
