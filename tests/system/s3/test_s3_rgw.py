"""The S3 tier as users run it, on moto and on Ceph RGW (every test runs on both servers).

RGW differs from moto where the tier depends on it (../shared/MEASURED.md): it accepts and ignores
a CRC32C sent with an upload (so integrity rests on our own CRC of what a GET returns), answers
CompleteMultipartUpload with an empty ETag, and rejects aws-chunked uploads over HTTPS. These tests
run the real CLI (``ckpt-emu run``) and tamper with the server through a boto3 client of their own.
"""
import asyncio
import os
import subprocess
import sys
from pathlib import Path

import crc32c
import pytest
from corrupting_s3 import corrupt_object
from emu import results, small_config
from s3server import ON_RGW, MotoServer, make_bucket, raw_client, s3_bucket, s3_endpoint, s3_server  # noqa: F401 - pytest fixtures

from emulator.checkpoint import layout

from paths import SUPPORT as TESTS
PREFIX = "runs/rgw"
RANKS = 2


def run_cli(*args, timeout=300) -> subprocess.CompletedProcess:
    """``ckpt-emu`` in a subprocess that can import the test backends (tests/ on PYTHONPATH)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "emulator.cli", *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=timeout)


def check(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"ckpt-emu failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def s3_global(endpoint: str, bucket: str, **options) -> dict:
    return {"backend": "s3", "bucket": bucket, "prefix": PREFIX, "endpoint_url": endpoint,
            "part_size_mib": 5, **options}


def body(endpoint, bucket, key) -> bytes:
    return raw_client(endpoint).get_object(Bucket=bucket, Key=key)["Body"].read()


def manifest(endpoint, bucket, step) -> layout.Manifest:
    return layout.Manifest.from_json(body(endpoint, bucket, f"{PREFIX}/{layout.manifest_key(step)}"))


# ------------------------------------------------------------------ corruption behind the tier's back

@ON_RGW
def test_drain_verification_catches_an_object_corrupted_on_the_server(s3_endpoint, tmp_path):
    """Right after each rank file's first upload, another client PUTs a same-size copy with one byte
    flipped over it. The drain's read-back CRC must catch it and upload again; no server-side
    checksum is involved (RGW would accept anything)."""
    bucket = make_bucket(s3_endpoint)
    cfg = small_config(tmp_path, ranks=RANKS, checkpoint={"saves": 1, "loads": 0, "modes": ["sync"]},
                       tiers={"global": s3_global(s3_endpoint, bucket, backend="corrupting_s3:CorruptingS3Tier")})
    check(run_cli("run", cfg, "--quiet"))
    res = results(tmp_path / "out")
    assert res["modes"]["sync"]["checkpoints"] == 1 and res["modes"]["sync"]["incomplete"] == 0
    assert res["faults"]["counts"]["drain_retry"] == RANKS  # each rank file: caught once, sent again
    man = manifest(s3_endpoint, bucket, 2)
    for f in man.files:  # what the manifest promises is what the server now holds
        assert f"{crc32c.crc32c(body(s3_endpoint, bucket, f'{PREFIX}/{f.key}')):08x}" == f.crc32c


@ON_RGW
def test_restore_rejects_an_object_corrupted_on_the_server(s3_endpoint, tmp_path):
    """A run leaves steps 2 and 4 on S3; another client corrupts rank 0's file of step 4 (same size,
    one byte flipped); a second run restoring from S3 must refuse step 4 on its CRC32C and load step 2."""
    bucket = make_bucket(s3_endpoint)
    tiers = {"global": s3_global(s3_endpoint, bucket)}
    check(run_cli("run", small_config(tmp_path, ranks=RANKS, tiers=tiers,
                                      checkpoint={"saves": 2, "loads": 0, "modes": ["sync"]}), "--quiet"))
    victim = manifest(s3_endpoint, bucket, 4).entry_for_rank(0)
    corrupt_object(s3_endpoint, bucket, f"{PREFIX}/{victim.key}")
    assert len(body(s3_endpoint, bucket, f"{PREFIX}/{victim.key}")) == victim.size

    again = tmp_path / "again"
    again.mkdir()
    check(run_cli("run", small_config(again, ranks=RANKS, local=False, tiers=tiers,
                                      checkpoint={"saves": 0, "loads": 1, "modes": ["sync"]}), "--quiet"))
    ld = results(again / "out")["load"]
    assert ld["ok"] and ld["served_by"] == {"global": RANKS}
    assert any(f.startswith("global@4: checksum mismatch") for f in ld["fallbacks"]), ld["fallbacks"]
    for r in results(again / "out")["per_rank"]:
        assert [(x["ok"], x["step"]) for x in r["loads"]] == [(True, 2)]


# ------------------------------------------------------------------ bad input: one line, exit 2, nothing written

def assert_refused(proc: subprocess.CompletedProcess, tmp: Path, *words: str) -> None:
    """One line naming the problem on stderr, exit 2, no results folder content, nothing on the server."""
    assert proc.returncode == 2, f"exit {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    for word in words:
        assert word in proc.stderr, proc.stderr
    out = tmp / "out"
    assert not out.exists() or not any(out.iterdir()), sorted(out.rglob("*"))


def objects_in(endpoint, bucket) -> list[str]:
    return [o["Key"] for o in raw_client(endpoint).list_objects_v2(Bucket=bucket).get("Contents", ())]


def test_unreachable_endpoint_is_one_line_and_exit_2(s3_server, tmp_path):
    from emu import free_port
    endpoint = f"http://127.0.0.1:{free_port()}"
    cfg = small_config(tmp_path, ranks=1, tiers={"global": s3_global(endpoint, "some-bucket")})
    assert_refused(run_cli("run", cfg, "--quiet", timeout=120), tmp_path, "s3 tier", endpoint.split("//")[1])


def test_wrong_keys_are_one_line_and_exit_2(s3_server, s3_bucket, tmp_path, monkeypatch):
    if isinstance(s3_server, MotoServer):
        pytest.skip("moto accepts any credentials")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGWRONGWRONG1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong/secret/for+ckpt-emu")
    cfg = small_config(tmp_path, ranks=1, tiers={"global": s3_global(s3_server.endpoint, s3_bucket)})
    proc = run_cli("run", cfg, "--quiet", timeout=120)
    assert_refused(proc, tmp_path, "s3 tier")
    assert "WRONGWRONG" not in proc.stderr and "wrong/secret" not in proc.stderr
    assert objects_in(s3_server.endpoint, s3_bucket) == []


def test_missing_bucket_is_one_line_and_exit_2(s3_endpoint, tmp_path):
    cfg = small_config(tmp_path, ranks=1, tiers={"global": s3_global(s3_endpoint, "no-such-bucket-ckpt-emu")})
    assert_refused(run_cli("run", cfg, "--quiet", timeout=120), tmp_path, "bucket does not exist")


# ------------------------------------------------------------------ a lost lease stops the run

def complete_steps(endpoint, bucket) -> set[int]:
    return {int(k[len(PREFIX) + 6:][:8]) for k in objects_in(endpoint, bucket) if k.endswith("/manifest.json")}


@ON_RGW
def test_a_lost_lease_stops_writes_and_retention(s3_endpoint, tmp_path):
    """Another run's lease PUT over ours while we checkpoint: the run must stop with one line and a
    failure status, writing no checkpoint and deleting nothing after it noticed. Notice comes before
    the next manifest at the latest, so at most the one commit already in flight lands after the steal."""
    import json
    import time
    bucket = make_bucket(s3_endpoint)
    cfg = small_config(tmp_path, ranks=RANKS, training={"step_seconds": 0.15},
                       checkpoint={"saves": 40, "loads": 0, "keep": 2, "modes": ["sync"]},
                       tiers={"global": s3_global(s3_endpoint, bucket)})
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-m", "emulator.cli", "run", str(cfg), "--quiet"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while 4 not in complete_steps(s3_endpoint, bucket):
            assert proc.poll() is None and time.monotonic() < deadline, "the run ended before step 4"
            time.sleep(0.05)
        thief = {"job": "thief", "pid": 1, "host": "elsewhere", "started": time.time(), "expires": time.time() + 600}
        raw_client(s3_endpoint).put_object(Bucket=bucket, Key=f"{PREFIX}/.ckpt-emu.lease",
                                           Body=json.dumps(thief).encode())
        at_steal = complete_steps(s3_endpoint, bucket)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode not in (0, None), stdout
    assert stderr.count("\n") == 1 and "lost its lease" in stderr and "Traceback" not in stderr, stderr
    after = complete_steps(s3_endpoint, bucket)
    assert len(after - at_steal) <= 1, (at_steal, after)   # at most the commit in flight
    assert len(at_steal - after) <= 1, (at_steal, after)   # and its retention
    assert max(after) <= max(at_steal) + 2, (at_steal, after)
    lease = raw_client(s3_endpoint).get_object(Bucket=bucket, Key=f"{PREFIX}/.ckpt-emu.lease")["Body"].read()
    assert json.loads(lease)["job"] == "thief"  # the run left the new holder's lease alone


# ------------------------------------------------------------------ checksum_mode: servers that refuse aws-chunked

def test_checksum_mode_reaches_the_client(s3_endpoint):
    from tiers.base import TierScope
    from tiers.s3 import S3Options, S3Tier
    for mode in ("when_required", "when_supported"):
        tier = S3Tier.from_options(S3Options(bucket="b", endpoint_url=s3_endpoint, checksum_mode=mode),
                                   scope=TierScope())
        config = tier._client.meta.config
        assert (config.request_checksum_calculation, config.response_checksum_validation) == (mode, mode)
        asyncio.run(tier.close())
    assert S3Options(bucket="b").checksum_mode == "when_required"  # the default RGW accepts over HTTPS


def test_a_bad_checksum_mode_is_one_line_and_exit_2(s3_endpoint, tmp_path):
    bucket = make_bucket(s3_endpoint)
    cfg = small_config(tmp_path, ranks=1, tiers={"global": s3_global(s3_endpoint, bucket, checksum_mode="sometimes")})
    assert_refused(run_cli("run", cfg, "--quiet", timeout=120), tmp_path, "checksum_mode")


@pytest.fixture
def https_endpoint(s3_endpoint, tmp_path, monkeypatch):
    """The session's server behind TLS (tests/support/tlsproxy.py), its certificate trusted by boto3."""
    import tlsproxy
    if not tlsproxy.available():
        pytest.skip("no openssl here to make a certificate for the HTTPS proxy")
    proxy = tlsproxy.TlsProxy(s3_endpoint, tmp_path)
    monkeypatch.setenv("AWS_CA_BUNDLE", str(proxy.cert))
    yield proxy.url
    proxy.close()


def round_trip(endpoint: str, bucket: str, mode: str) -> bool:
    """What a run does on its global tier, with ``checksum_mode=mode``: claim the prefix (the lease,
    a PUT without our CRC32C header), upload 11 MiB in 5 MiB parts and a small object, read both
    back, release the lease. True if every byte came back."""
    from tiers.locking import Holder
    from tiers.s3 import MIB, S3Tier
    data = os.urandom(11 * MIB)
    tier = S3Tier(bucket, endpoint_url=endpoint, part_size=5 * MIB, checksum_mode=mode)
    try:
        lease = tier.claim(Holder(job="checksum-mode"))
        asyncio.run(tier.put("small", b"x" * 1000))
        with tier.open_write("large") as sink:
            sink.write(data)
        with tier.open_read("large") as fh:
            same = fh.read() == data
        lease.release()
        return same and asyncio.run(tier.get("small")) == b"x" * 1000
    finally:
        asyncio.run(tier.close())


def test_when_required_works_over_https_on_every_server(https_endpoint, s3_endpoint):
    assert round_trip(https_endpoint, make_bucket(s3_endpoint), "when_required")


def test_when_supported_over_https_is_what_rgw_refuses(https_endpoint, s3_server):
    """boto3's own default over HTTPS sends a body that carries no checksum of ours (the lease's) as
    aws-chunked with a trailing checksum: moto takes it, RGW 16 answers 411 MissingContentLength
    (why checksum_mode defaults to when_required). Bodies with our CRC32C header go through either way."""
    from tiers.base import TierError
    bucket = make_bucket(s3_server.endpoint)
    if isinstance(s3_server, MotoServer):
        assert round_trip(https_endpoint, bucket, "when_supported")
        return
    with pytest.raises(TierError, match="lease: .*(411|MissingContentLength|length required)"):
        round_trip(https_endpoint, bucket, "when_supported")


# ------------------------------------------------------------------ CompleteMultipartUpload's ETag (empty on RGW)

def test_multipart_objects_are_pinned_by_the_etag_of_a_head(s3_server, tmp_path):
    """RGW answers CompleteMultipartUpload with an empty ETag (moto's answer is blanked here to match):
    the tier never uses that answer; the ETag that pins a read to one version comes from a HEAD, so
    ranged reads of a multipart object work, and an object replaced mid-read fails the read."""
    from tiers.base import TierError
    from tiers.s3 import MIB, S3Tier
    bucket, data = make_bucket(s3_server.endpoint), os.urandom(16 * MIB)
    tier = S3Tier(bucket, endpoint_url=s3_server.endpoint, part_size=5 * MIB, single_get_threshold=5 * MIB,
                  max_concurrency=1)  # one range ahead: the replace lands before the next GET
    answers = []

    def blank(parsed, **_):
        answers.append(parsed.get("ETag"))
        parsed["ETag"] = ""
    tier._client.meta.events.register("after-call.s3.CompleteMultipartUpload", blank)
    try:
        with tier.open_write("streamed") as sink:
            sink.write(data)
        (tmp_path / "src").write_bytes(data)
        asyncio.run(tier.put_file("uploaded", tmp_path / "src"))
        if not isinstance(s3_server, MotoServer):
            assert answers == ["", ""]  # what RGW 16 answers; if this changes, the quirk is gone
        for key in ("streamed", "uploaded"):
            with tier.open_read(key) as fh:  # ranged GETs (above single_get_threshold), IfMatch each
                assert fh.read() == data
            asyncio.run(tier.get_file(key, tmp_path / key))
            assert (tmp_path / key).read_bytes() == data
        with tier.open_read("streamed") as fh:
            fh.read(1 << 20)
            raw_client(s3_server.endpoint).put_object(Bucket=bucket, Key="streamed", Body=data[::-1])
            with pytest.raises(TierError):  # the version it opened is gone: never mixes two versions
                fh.read()
    finally:
        asyncio.run(tier.close())


# ------------------------------------------------------------------ python -m bench against RGW

def test_bench_s3_rgw_pair_runs(tmp_path):
    """One tiny pair of the RGW benchmarks (bench/rgw.py, its own RGW): results keep their shape.
    Never a target or an absolute time: the machine is shared."""
    from bench import rgw
    from bench.common import Params
    from bench.suite import select
    from bench.worker import run as run_in_process
    if not rgw.available():
        assert "s3_rgw" not in select(None)
        pytest.skip("no Ceph RGW here")
    assert "s3_rgw" in select(None)
    res = run_in_process("s3_rgw", Params(workdir=str(tmp_path), pairs=1, warmup=0, s3_mib=8, quick=True))
    assert list(res) == ["drain_s3_rgw", "restore_s3_rgw"]
    for key, r in res.items():
        assert "error" not in r and r["pairs"] == 1 and r["unit"] == "GiB/s" and r["target"] == 0.9, (key, r)
        assert r["ratio"] > 0 and r["ours"] > 0 and r["baseline"] > 0 and r["bytes"] > 0
    assert "Restorer.load" in res["restore_s3_rgw"]["ours_is"]
    assert "download_fileobj" in res["restore_s3_rgw"]["baseline_is"]
    assert not list(tmp_path.glob("s3_rgw/*")), "the workdir is left clean"


def test_a_deleted_lease_stops_every_write_of_its_holder(s3_endpoint, tmp_path):
    """In the tier itself (no run): the lease object deleted behind the holder's back is found before
    the next small object (a manifest) is written; from then on every write and delete refuses,
    on_lost is told once, and nothing was written."""
    from tiers.base import TierError
    from tiers.locking import Holder
    from tiers.s3 import MIB, S3Tier
    bucket = make_bucket(s3_endpoint)
    tier = S3Tier(bucket, prefix=PREFIX, endpoint_url=s3_endpoint, part_size=5 * MIB)
    told = []
    try:
        lease = tier.claim(Holder(job="holder"))
        lease.on_lost = told.append
        asyncio.run(tier.put("before", b"1"))
        raw_client(s3_endpoint).delete_object(Bucket=bucket, Key=f"{PREFIX}/.ckpt-emu.lease")
        with pytest.raises(TierError, match="lost its lease: its lease object was deleted"):
            asyncio.run(tier.put("manifest.json", b"2"))
        (tmp_path / "f").write_bytes(b"3")
        for attempt in (lambda: asyncio.run(tier.put_file("file", tmp_path / "f")),
                        lambda: tier.open_write("sink"), lambda: asyncio.run(tier.delete("before"))):
            with pytest.raises(TierError, match="lost its lease"):
                attempt()
        assert len(told) == 1 and "lost its lease" in told[0]
        assert objects_in(s3_endpoint, bucket) == [f"{PREFIX}/before"]
        lease.release()  # the run is over: its end needs no lease
        asyncio.run(tier.delete("before"))
    finally:
        asyncio.run(tier.close())


def test_a_server_that_ignores_conditional_writes_is_refused_at_the_claim(s3_endpoint):
    """A store that drops If-None-Match / If-Match (simulated by stripping them from every PutObject
    before it is sent, on moto and RGW) cannot keep two runs off one prefix: the claim refuses with one
    line that says why, and nothing but the claim's own probe is left behind."""
    from tiers.base import TierError
    from tiers.locking import Holder
    from tiers.s3 import MIB, S3Tier
    bucket = make_bucket(s3_endpoint)
    tier = S3Tier(bucket, prefix=PREFIX, endpoint_url=s3_endpoint, part_size=5 * MIB)

    def ignore_conditions(params, **_):
        params.pop("IfNoneMatch", None)
        params.pop("IfMatch", None)
    tier._client.meta.events.register("before-parameter-build.s3.PutObject", ignore_conditions)
    with pytest.raises(TierError) as err:
        tier.claim(Holder(job="no-conditions"))
    line = str(err.value)
    assert "\n" not in line and "ignores conditional writes" in line, line
    assert objects_in(s3_endpoint, bucket) == []  # the probe's lease object is removed again
