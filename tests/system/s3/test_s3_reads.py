"""What a restore's reads from S3 cost (tiers/s3_wire.py, tiers/s3_stream.py), on real servers:
the bytes go from the socket straight into the caller's buffer, a fully read body gives its
connection back, every response is read with a quick ACK asked for, and a restore's structure
and body are asked for at once."""
import asyncio
import io
import os
import socket

import pytest
import torch
from s3server import s3_bucket, s3_endpoint, s3_server  # noqa: F401 - pytest fixtures
from urllib3.response import HTTPResponse

from tiers import s3_wire
from tiers.s3 import MIB, S3Tier
from tiers.s3_stream import BLOCK


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(params=[False, True], ids=["one-get", "ranged-gets"])
def tier(request, s3_endpoint, s3_bucket):
    tier = S3Tier(s3_bucket, endpoint_url=s3_endpoint, part_size=5 * MIB,
                  single_get_threshold=0 if request.param else None)
    yield tier
    run(tier.close())


def _gets(tier: S3Tier, keys: bool = False) -> list:
    """The Range (or, with ``keys``, the key and Range) of every GET the tier makes from now on."""
    seen = []
    tier._client.meta.events.register(
        "before-parameter-build.s3.GetObject",
        lambda params, **_: seen.append((params["Key"], params.get("Range")) if keys else params.get("Range")))
    return seen


def test_a_large_read_is_not_copied_through_urllib3(tier, monkeypatch):
    """urllib3's readinto reads a new bytes object and copies it: a large read must not go there."""
    data = os.urandom(12 * MIB + 5)
    run(tier.put("big", data))
    read = HTTPResponse.read

    def no_large_read(self, amt=None, *args, **kwargs):
        assert amt is None or amt < BLOCK, f"a read of {amt} bytes went through urllib3"
        return read(self, amt, *args, **kwargs)

    monkeypatch.setattr(HTTPResponse, "read", no_large_read)
    buf, out = bytearray(4 * MIB), bytearray()
    with tier.open_read("big") as fh:
        while n := fh.readinto(memoryview(buf)):
            out += buf[:n]
    assert out == data


def test_a_body_read_to_its_end_gives_its_connection_back(tier):
    run(tier.put("obj", os.urandom(3 * MIB)))
    body = tier._get_object(tier._full("obj"), "obj")
    raw, buf, got = body._raw_stream, bytearray(MIB), 0
    while n := s3_wire.readinto(body, memoryview(buf)):
        got += n
    assert got == 3 * MIB and raw.length_remaining == 0
    pool = raw._pool
    s3_wire.finish(body)
    assert raw._connection is None  # handed to the pool, not closed (the pool keeps it if it can)
    assert pool is not None


def test_each_response_is_read_with_a_quick_ack(tier, monkeypatch):
    asked = []
    monkeypatch.setattr(s3_wire, "_ask_quick_ack", asked.append)
    run(tier.put("m.json", b"{}"))
    assert run(tier.get("m.json")) == b"{}"
    assert run(tier.list()) == ["m.json"]
    assert len(asked) >= 3 and all(isinstance(s, socket.socket) for s in asked)


def test_will_read_all_asks_for_the_structure_and_the_body_at_once(tier):
    """A restore's pattern: the structure by torch.load, then every byte from the start. Block 0, the
    last block and (one GET up to the threshold) the rest from block 0's end are asked for together;
    nothing is asked for twice."""
    buf = io.BytesIO()
    torch.save({f"t{i}": torch.arange(MIB // 8, dtype=torch.int64) + i for i in range(12)}, buf)
    data = buf.getvalue()
    run(tier.put("ckpt.pt", data))
    gets = _gets(tier)
    with tier.open_read("ckpt.pt") as fh:
        fh.will_read_all()
        meta = torch.load(fh, map_location="meta", weights_only=True)
        fh.seek(0)
        out = bytearray()
        while chunk := fh.read(3 * MIB):
            out += chunk
    assert meta["t11"].shape == (MIB // 8,) and out == data
    blocks = {f"bytes=0-{BLOCK - 1}", f"bytes={len(data) - BLOCK}-{len(data) - 1}"}
    assert blocks <= set(gets), gets
    if tier.single_get_threshold:  # one stream from block 0's end, asked for with the blocks
        assert sorted(gets) == sorted(blocks | {f"bytes={BLOCK}-{len(data) - 1}"}), gets
    else:
        assert len(gets) == len(set(gets)), gets


def test_a_restore_reads_the_rank_file_in_one_get(s3_endpoint, s3_bucket, tmp_path, monkeypatch):
    """From S3 a rank's file is read laid out as the run writes it (emulator/checkpoint/file_plan.py):
    its manifest, then one GET of the whole file, no ranged GET for the structure."""
    import torch.utils.serialization as serialization

    from emulator.checkpoint.checkpointer import Checkpointer
    from emulator.checkpoint.restore import Restorer
    from emulator.config import load_config
    from emulator.design import resolve
    from emulator.rank.comm import SoloComm
    from emulator.workload.state import RankState
    monkeypatch.setattr(serialization.config.save, "compute_crc32", False)  # as a rank sets it
    cfg = load_config("llama3-8b", ["run.scale=0.0002", "parallelism.ranks=1"])
    state = RankState.of_run(cfg, resolve(cfg, run=True), 0)
    tier = S3Tier(s3_bucket, endpoint_url=s3_endpoint, prefix="run")
    ck = Checkpointer(state, None, tier, SoloComm(), keep=1)
    try:
        assert ck.checkpoint(2, "sync").global_complete
        saved = [t.reshape(-1).view(torch.uint8).clone() for t in state.tensors("live")]
        for t in state.tensors("live"):
            t.view(-1).view(torch.uint8)[::31] ^= 0xA5
        gets = _gets(tier, keys=True)
        rec = Restorer(state, [("global", tier)], SoloComm(), loop=ck.loop).load()
    finally:
        ck.close()
        run(tier.close())
    assert rec.ok and rec.step == 2 and rec.fallbacks == []
    assert [r for k, r in gets if k.endswith(".pt")] == [None], gets  # the rank file: one GET, whole
    assert all(torch.equal(t.reshape(-1).view(torch.uint8), s) for t, s in zip(state.tensors("live"), saved))
