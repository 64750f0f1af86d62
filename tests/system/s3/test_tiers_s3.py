"""The tier contract on S3Tier against a real S3 server (moto over HTTP), plus S3-only behaviour:
multipart uploads, abort of a failed upload, ranged downloads and clear, credential-free errors."""
import asyncio
import io
import os

import pytest
from emu import free_port
from s3server import raw_client, s3_bucket, s3_endpoint, s3_server  # noqa: F401 - pytest fixtures

from tiers.base import TierError, TierScope
from tiers.s3 import MIB, S3Tier
from tiers.testing import TierContract


def run(coro):
    return asyncio.run(coro)


def make(endpoint, bucket, **kw) -> S3Tier:
    kw.setdefault("part_size", 5 * MIB)
    return S3Tier(bucket, endpoint_url=endpoint, **kw)


def count_calls(tier: S3Tier, op: str, seen: list):
    """Record the params of every ``op`` call the tier's client makes."""
    tier._client.meta.events.register(f"before-parameter-build.s3.{op}",
                                      lambda params, **_: seen.append(dict(params)))




class TestS3Tier(TierContract):
    @pytest.fixture
    def tier(self, s3_endpoint, s3_bucket):
        tier = make(s3_endpoint, s3_bucket, prefix="run1/global")
        yield tier
        run(tier.close())


class TestS3TierNoPrefix(TierContract):
    """Same contract with the bucket root as the tier (prefix '')."""

    @pytest.fixture
    def tier(self, s3_endpoint, s3_bucket):
        tier = make(s3_endpoint, s3_bucket)
        yield tier
        run(tier.close())

    # the bad-key cases are the same code path as with a prefix; one run is enough
    test_rejects_bad_keys = None


@pytest.fixture
def tier(s3_endpoint, s3_bucket):
    tier = make(s3_endpoint, s3_bucket, prefix="p/")
    yield tier
    run(tier.close())


def test_prefix_maps_keys(tier, s3_endpoint, s3_bucket):
    run(tier.put("step_1/manifest.json", b"{}"))
    raw = raw_client(s3_endpoint).list_objects_v2(Bucket=s3_bucket)
    assert [o["Key"] for o in raw["Contents"]] == ["p/step_1/manifest.json"]
    assert run(tier.list()) == ["step_1/manifest.json"]


def test_multipart_upload_parts_and_bytes(tier, tmp_path):
    data = os.urandom(12 * MIB + 123)
    src = tmp_path / "big.bin"
    src.write_bytes(data)
    parts = []
    count_calls(tier, "UploadPart", parts)
    run(tier.put_file("big.bin", src))
    assert sorted(p["PartNumber"] for p in parts) == [1, 2, 3]
    assert all("ChecksumCRC32C" in p for p in parts)
    assert run(tier.get("big.bin")) == data
    assert run(tier.list_multipart_uploads()) == []


def test_small_file_is_one_put(tier, tmp_path):
    src = tmp_path / "small.bin"
    src.write_bytes(os.urandom(5 * MIB))  # exactly one part: no multipart upload
    puts, parts = [], []
    count_calls(tier, "PutObject", puts)
    count_calls(tier, "UploadPart", parts)
    run(tier.put_file("small.bin", src))
    assert len(puts) == 1 and parts == []
    assert run(tier.get("small.bin")) == src.read_bytes()


def test_failed_upload_is_aborted(tier, tmp_path):
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(12 * MIB))
    tries = []

    def fail_part_2(params, **_):
        if params["PartNumber"] == 2:
            tries.append(2)
            raise ConnectionResetError("injected: connection reset on part 2")
    tier._client.meta.events.register("before-parameter-build.s3.UploadPart", fail_part_2)
    with pytest.raises(TierError) as err:
        run(tier.put_file("big.bin", src))
    msg = str(err.value)
    assert "part 2 of 3" in msg and "aborted" in msg and "\n" not in msg
    assert len(tries) == 1  # one request: retrying is the caller's one policy, not the tier's
    assert run(tier.list_multipart_uploads()) == []
    assert run(tier.size("big.bin")) is None


def test_failed_sink_commit_leaves_nothing(tier, tmp_path):
    tier.spool_dir = str(tmp_path)
    tier._client.meta.events.register(
        "before-parameter-build.s3.UploadPart",
        lambda params, **_: (_ for _ in ()).throw(ConnectionResetError("injected")))
    sink = tier.open_write("s/big")
    sink.write(os.urandom(6 * MIB))
    with pytest.raises(TierError):
        sink.commit()
    assert list(tmp_path.iterdir()) == []  # spool file removed
    assert run(tier.list()) == [] and run(tier.list_multipart_uploads()) == []


def test_abort_stale_uploads(tier, s3_endpoint, s3_bucket):
    raw = raw_client(s3_endpoint)
    for key in ("p/a", "p/b", "other/c"):
        raw.create_multipart_upload(Bucket=s3_bucket, Key=key)
    assert sorted(u["key"] for u in run(tier.list_multipart_uploads())) == ["a", "b"]
    # moto dates every upload 2010-11-10, so "older than a century" spares them all
    assert run(tier.abort_stale_uploads(older_than_s=100 * 365 * 86400)) == 0
    assert run(tier.abort_stale_uploads()) == 2
    assert run(tier.list_multipart_uploads()) == []
    assert len(raw.list_multipart_uploads(Bucket=s3_bucket)["Uploads"]) == 1  # outside the prefix


def test_get_file_ranged_is_byte_identical(s3_endpoint, s3_bucket, tmp_path):
    tier = make(s3_endpoint, s3_bucket, single_get_threshold=0)
    data = os.urandom(11 * MIB + 5)
    run(tier.put("obj", data))
    gets = []
    count_calls(tier, "GetObject", gets)
    dest = tmp_path / "out.bin"
    run(tier.get_file("obj", dest))
    assert dest.read_bytes() == data
    assert sorted(g["Range"] for g in gets) == [
        "bytes=0-5242879", "bytes=10485760-11534340", "bytes=5242880-10485759"]
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]  # no temp file left
    run(tier.close())


def test_get_file_single_get_below_threshold(tier, tmp_path):
    data = os.urandom(7 * MIB)
    run(tier.put("obj", data))
    gets = []
    count_calls(tier, "GetObject", gets)
    run(tier.get_file("obj", tmp_path / "o"))
    assert len(gets) == 1 and "Range" not in gets[0]
    assert (tmp_path / "o").read_bytes() == data


def test_from_options(s3_endpoint):
    from emulator.config import load_config

    cfg = load_config("default", ["tiers.global={backend: s3, bucket: bkt, prefix: x/y/, part_size_mib: 16, "
                                  f"max_concurrency: 3, endpoint_url: '{s3_endpoint}'}}"])
    tier = S3Tier.from_options(cfg.tiers.global_.options, scope=TierScope())
    assert (tier.prefix, tier.part_size, tier.max_concurrency) == ("x/y/", 16 * MIB, 3)
    assert tier.describe().startswith("s3://bkt/x/y/ at 127.0.0.1:")


def test_missing_bucket_is_one_clear_line(s3_endpoint):
    tier = make(s3_endpoint, "no-such-bucket-here", prefix="p")
    with pytest.raises(TierError, match=r"^s3 tier s3://no-such-bucket-here/p/ .*: bucket does not exist$"):
        run(tier.check())
    with pytest.raises(TierError, match="bucket does not exist"):
        run(tier.put("k", b"x"))


def test_unreachable_endpoint_is_one_clear_line():
    url = f"http://127.0.0.1:{free_port()}"
    tier = S3Tier("bkt", endpoint_url=url, max_attempts=1)
    with pytest.raises(TierError, match=f"cannot reach endpoint {url}: connection refused$"):
        run(tier.check())
    with pytest.raises(TierError, match="connection refused"):
        run(tier.get("k"))


def test_credentials_never_in_messages(s3_endpoint, monkeypatch, tmp_path):
    key_id, secret = "AKIAMARKERKEYID12345", "SeCrEtMaRkEr/abcdefghijklmnop"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    url = f"http://127.0.0.1:{free_port()}"
    texts = []
    for tier in (make(s3_endpoint, "no-such-bucket-here"), S3Tier("bkt", endpoint_url=url, max_attempts=1)):
        texts.append(tier.describe())
        for coro in (tier.check(), tier.put("k", b"x"), tier.list()):
            with pytest.raises(TierError) as err:
                run(coro)
            texts.append(str(err.value))
    assert len(texts) == 8
    for text in texts:
        assert key_id not in text and secret not in text


def test_an_error_that_echoes_the_credentials_is_scrubbed(s3_endpoint, s3_bucket, monkeypatch):
    """Servers do echo credentials (an access key id in InvalidAccessKeyId, a canonical request in
    SignatureDoesNotMatch): an error whose text holds both key id and secret reaches the user as ***."""
    from httpfaults import Rule, S3FaultProxy
    key_id, secret = "AKIAMARKERKEYID12345", "SeCrEtMaRkEr/abcdefghijklmnop"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    proxy = S3FaultProxy(s3_endpoint)
    proxy.rules.append(Rule("PUT", None, 500, "InternalError",
                            f"debug dump: access key {key_id} secret {secret} failed"))
    try:
        tier = S3Tier(s3_bucket, endpoint_url=proxy.url)
        with pytest.raises(TierError) as err:
            run(tier.put("k", b"x"))
    finally:
        proxy.close()
    text = str(err.value)
    assert "debug dump: access key *** secret *** failed" in text  # the message itself still helps
    assert key_id not in text and secret not in text


def test_endpoint_userinfo_not_in_describe():
    tier = S3Tier("bkt", endpoint_url="http://user:pa55word@127.0.0.1:9000")
    assert tier.describe() == "s3://bkt/ at 127.0.0.1:9000"
    from tiers.s3_errors import endpoint_text
    assert endpoint_text(tier.endpoint_url) == "http://127.0.0.1:9000"


def test_transient_part_failure_is_retried_by_the_drain(tier, tmp_path):
    """The tier makes each request once; the drain's retry policy tries the file again."""
    from emulator.checkpoint.drainer import Drainer
    from emulator.checkpoint.integrity import crc_of_stream
    from emulator.checkpoint.layout import FileEntry
    from emulator.checkpoint.retry import RetryPolicy
    from tiers.directory import DirTier
    data = os.urandom(11 * MIB)
    local = DirTier(tmp_path / "local")
    run(local.put("big.bin", data))
    failures = []

    def fail_once(params, **_):
        if params["PartNumber"] == 3 and not failures:
            failures.append(3)
            raise ConnectionResetError("injected: one-off reset")
    tier._client.meta.events.register("before-parameter-build.s3.UploadPart", fail_once)
    result = run(Drainer(local, tier, policy=RetryPolicy(retries=2, backoff_s=0.01))
                 .drain([FileEntry("big.bin", 0, len(data), crc_of_stream(io.BytesIO(data))[0])]))
    assert result.ok and result.retries == 1 and failures == [3] and run(tier.get("big.bin")) == data
    assert run(tier.list_multipart_uploads()) == []  # the failed attempt's upload was aborted


def test_make_tier_s3_with_emulation(s3_endpoint, s3_bucket):
    from emulator.config import EmulateConfig, TierConfig
    from tiers import make_tier, unwrap

    cfg = TierConfig("s3", S3Tier.Options(bucket=s3_bucket, prefix="g", endpoint_url=s3_endpoint),
                     emulate=EmulateConfig(write_gib_s=4, latency_ms=1))
    tier = make_tier(cfg, scope=TierScope(rank=0))
    assert tier.backend == "s3" and "emulated: write 4 GiB/s, 1 ms" in tier.describe()
    run(unwrap(tier).check())
    run(tier.put("m.json", b"{}"))
    assert run(tier.list()) == ["m.json"] and run(tier.recover_after_crash()) == ""  # through the wrapper


def test_open_read_streams_with_readinto(tier):
    data = os.urandom(3 * MIB + 11)
    run(tier.put("r", data))
    buf, out = bytearray(MIB), bytearray()
    with tier.open_read("r") as fh:
        while n := fh.readinto(memoryview(buf)):
            out += buf[:n]
    assert out == data


# --------------------------------------------------------------------------- the streaming sink

def _watch_folder(folder):
    """Names seen in ``folder`` by a thread polling it until the returned stop() is called."""
    import threading
    seen, stop = set(), threading.Event()

    def poll():
        while not stop.is_set():
            seen.update(p.name for p in folder.iterdir())
            stop.wait(0.001)
    thread = threading.Thread(target=poll, daemon=True)
    thread.start()

    def finish():
        stop.set()
        thread.join()
        return seen
    return finish


def test_sink_uploads_parts_from_memory_while_writing(tier, tmp_path, monkeypatch):
    """A direct-to-S3 write puts nothing on the host's disk: parts go out of memory as they fill,
    the object appears only on commit, and no upload is left."""
    import tempfile
    spool = tmp_path / "spool"
    spool.mkdir()
    tier.spool_dir = str(spool)
    monkeypatch.setattr(tempfile, "tempdir", str(spool))  # the system temporary folder too
    data = os.urandom(17 * MIB + 5)
    parts = []
    count_calls(tier, "UploadPart", parts)
    stop = _watch_folder(spool)
    with tier.open_write("s/obj") as sink:
        for off in range(0, len(data), MIB):
            sink.write(data[off:off + MIB])
        parts_before_commit = len(parts)
        assert run(tier.size("s/obj")) is None  # nothing visible before commit
    assert stop() == set()  # no spool file, ever
    assert parts_before_commit >= 2  # parts were sent while writing, not at commit
    assert sorted(p["PartNumber"] for p in parts) == [1, 2, 3, 4]
    assert all("ChecksumCRC32C" in p for p in parts)
    assert run(tier.get("s/obj")) == data
    assert run(tier.list_multipart_uploads()) == []


def test_sink_holds_at_most_two_parts_in_flight(s3_endpoint, s3_bucket):
    """Memory stays bounded however large the file: a write waits while two parts are uploading."""
    import threading
    import time
    tier = make(s3_endpoint, s3_bucket, max_concurrency=8)
    lock, now, most = threading.Lock(), [0], [0]

    def slow_part(params, **_):
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        time.sleep(0.05)
        with lock:
            now[0] -= 1
    tier._client.meta.events.register("before-parameter-build.s3.UploadPart", slow_part)
    data = os.urandom(6 * 5 * MIB + 1)
    with tier.open_write("s/bounded") as sink:
        sink.write(data)  # one call with everything, as torch.save does with a large tensor
    assert most[0] == 2
    assert run(tier.get("s/bounded")) == data
    run(tier.close())


@pytest.mark.parametrize("size", [0, 1, 5 * MIB])
def test_sink_of_one_part_or_less_is_one_put(tier, size):
    uploads, puts = [], []
    count_calls(tier, "CreateMultipartUpload", uploads)
    count_calls(tier, "PutObject", puts)
    data = os.urandom(size)
    with tier.open_write("s/small") as sink:
        sink.write(data)
    assert (len(uploads), len(puts)) == (0, 1)
    assert run(tier.get("s/small")) == data


def test_sink_failing_part_aborts_the_upload_at_once(tier):
    """A part that fails while writing stops the write (no point sending the rest) and aborts."""
    tier._client.meta.events.register(
        "before-parameter-build.s3.UploadPart",
        lambda params, **_: (_ for _ in ()).throw(ConnectionResetError("injected")))
    with pytest.raises(TierError) as err:
        with tier.open_write("s/doomed") as sink:
            for _ in range(8):
                sink.write(os.urandom(5 * MIB))
    assert "aborted" in str(err.value) and "\n" not in str(err.value)
    assert run(tier.list()) == [] and run(tier.list_multipart_uploads()) == []


def test_sink_abort_leaves_nothing(tier):
    sink = tier.open_write("s/dropped")
    sink.write(os.urandom(12 * MIB))
    sink.abort()
    assert run(tier.list()) == [] and run(tier.list_multipart_uploads()) == []


# --------------------------------------------------------------------------- the seekable reader

@pytest.mark.parametrize("ranged", [False, True], ids=["one-get", "ranged-gets"])
def test_reader_seeks_and_reads_byte_exact(s3_endpoint, s3_bucket, ranged):
    """Small reads anywhere, then a sequential pass in small and large reads: every byte right,
    in a few GETs (one stream, or part-sized ranges above single_get_threshold)."""
    import random
    tier = make(s3_endpoint, s3_bucket, single_get_threshold=0 if ranged else None)
    data = os.urandom(12 * MIB + 7)
    run(tier.put("r", data))
    gets = []
    count_calls(tier, "GetObject", gets)
    rng = random.Random(1)
    with tier.open_read("r") as fh:
        assert fh.seekable() and fh.seek(0, os.SEEK_END) == len(data)
        for pos in (0, len(data) - 22, len(data) - 4096, 3, len(data) - 100):  # like a zip reader
            fh.seek(pos)
            assert fh.read(20) == data[pos:pos + 20]
        fh.seek(0)
        out = bytearray()
        while chunk := fh.read(rng.choice((1, 100, 70_000, 3 * MIB))):
            out += chunk
        assert out == data and fh.tell() == len(data)
    assert all("IfMatch" in g for g in gets)
    # three 256 KiB blocks serve the scattered reads, then one stream or three part-sized ranges
    assert len(gets) == 3 + (3 if ranged else 1), [g["Range"] for g in gets]
    run(tier.close())


def test_reader_of_a_missing_object(tier):
    with pytest.raises(FileNotFoundError):
        tier.open_read("nope")


def test_reader_refuses_an_object_replaced_mid_read(tier):
    run(tier.put("v", os.urandom(MIB)))
    with tier.open_read("v") as fh:
        fh.read(10)
        run(tier.put("v", os.urandom(MIB)))
        fh.seek(MIB // 2)
        with pytest.raises(TierError) as err:
            fh.read(10)
    assert "\n" not in str(err.value)


def test_torch_load_reads_only_the_structure(tier):
    """torch.load(map_location="meta") through the reader: a few small GETs, not the object."""
    import io

    import torch
    buf = io.BytesIO()
    torch.save({f"t{i}": torch.zeros(MIB // 4) for i in range(24)}, buf)  # 24 MiB of tensors
    run(tier.put("ckpt.pt", buf.getvalue()))
    gets = []
    count_calls(tier, "GetObject", gets)
    with tier.open_read("ckpt.pt") as fh:
        meta = torch.load(fh, map_location="meta", weights_only=True)
    assert meta["t23"].shape == (MIB // 4,) and meta["t23"].is_meta
    sizes = [int(g["Range"].split("-")[1]) - int(g["Range"].split("=")[1].split("-")[0]) + 1 for g in gets]
    assert len(gets) <= 4 and sum(sizes) <= 4 * 256 * 1024, sizes
