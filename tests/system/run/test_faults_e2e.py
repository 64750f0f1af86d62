"""Faults in real runs: a full local disk, a global outage, a corrupt file, an S3 server cut mid-drain,
wrong credentials.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import time

import crc32c
import pytest
from crashcheck import partials, verify_dir_tier
from emu import ckpt_emu, results, small_config
from faulting import (  # noqa: F401 - helpers and fixtures shared with tests/unit/
    MIB,
    Run,
    _can_mount_tmpfs,
    _closed_port,
    _key,
    _one_line_exit_2,
    cfg,
    meta,
    tmpfs,
)
from faultproxy import CutProxy
from s3server import ON_RGW, aws_env, make_bucket, raw_client, s3_endpoint, s3_server  # noqa: F401 - pytest fixtures

from emulator.checkpoint.layout import Manifest, manifest_key
from emulator.checkpoint.retry import RetryPolicy
from emulator.config import load_config
from tiers.directory import DirTier


def _s3_tier(bucket, url):
    from tiers.s3 import S3Tier

    # one try per request: the proxy's outage reaches our retry loop instead of botocore's
    return S3Tier(bucket, endpoint_url=url, part_size=5 * MIB, max_concurrency=2,
                  connect_timeout=2, read_timeout=10)


def _uploads(endpoint, bucket) -> list:
    return raw_client(endpoint).list_multipart_uploads(Bucket=bucket).get("Uploads", [])


def _s3_objects(endpoint, bucket) -> dict:
    got = raw_client(endpoint).list_objects_v2(Bucket=bucket).get("Contents", [])
    return {o["Key"]: o["Size"] for o in got}


def _moto_addr(endpoint):
    host, port = endpoint.rsplit("//", 1)[1].split(":")
    return host, int(port)


def test_s3_cut_mid_multipart_then_back_retry_completes_no_orphans(cfg, s3_endpoint, tmp_path):
    bucket = make_bucket(s3_endpoint)
    proxy = CutProxy(_moto_addr(s3_endpoint))
    glob = _s3_tier(bucket, proxy.url)
    run = Run(cfg, DirTier(tmp_path / "local"), glob, policy=RetryPolicy(retries=8, backoff_s=0.25))
    proxy.cut_after(6 * MIB, down_s=1.0)  # inside part 2 of the ~7 MiB file
    rec = run.to(2)
    assert proxy.cuts == 1 and rec.global_complete and rec.drain_retries >= 1, rec
    orphans = _uploads(s3_endpoint, bucket)  # its abort could not reach the server either
    assert orphans, "the cut should have left the failed attempt's multipart upload behind"
    asyncio.run(glob.abort_stale_uploads())  # what rank 0 does at the end of a run
    run.close()
    proxy.close()
    assert _uploads(s3_endpoint, bucket) == []
    manifest = Manifest.from_json(raw_client(s3_endpoint).get_object(
        Bucket=bucket, Key=manifest_key(2))["Body"].read())
    (entry,) = manifest.files
    body = raw_client(s3_endpoint).get_object(Bucket=bucket, Key=entry.key)["Body"].read()
    assert body == (tmp_path / "local" / entry.key).read_bytes() and len(body) == entry.size


def test_s3_stays_down_checkpoint_stays_incomplete_then_resumes(cfg, s3_endpoint, tmp_path):
    bucket = make_bucket(s3_endpoint)
    proxy = CutProxy(_moto_addr(s3_endpoint))
    glob = _s3_tier(bucket, proxy.url)
    run = Run(cfg, DirTier(tmp_path / "local"), glob, on_failure="continue")
    proxy.cut_after(6 * MIB, down_s=None)
    rec = run.to(2)
    assert not rec.global_complete and rec.abandoned
    assert _s3_objects(s3_endpoint, bucket) == {}  # no manifest and no half-uploaded object: invisible
    proxy.restore()
    run.close()
    again = Run(cfg, DirTier(tmp_path / "local"), glob)
    (resumed,) = again.ckpt.resume()
    asyncio.run(glob.abort_stale_uploads())
    again.close()
    proxy.close()
    assert resumed.global_complete and _uploads(s3_endpoint, bucket) == []
    assert sorted(_s3_objects(s3_endpoint, bucket)) == sorted([manifest_key(2), _key(tmp_path, "local", 2)])


def test_cli_local_disk_fills_up_mid_run(tmp_path, tmpfs):
    """A 110 MiB filesystem passes the preflight; the test fills it after the first checkpoint."""
    nvme = tmpfs("nvme", "110m")
    local = {"backend": "dir", "path": str((nvme or tmp_path / "nvme") / "node{node}")}
    if nvme is None:  # not permitted here: an emulated capacity of 1.5 checkpoints instead
        local["emulate"] = {"capacity_gib": 20 * MIB / (1 << 30)}
    cfg_path = small_config(tmp_path, tiers={"local": local},
                            training={"step_seconds": 0.1}, checkpoint={"saves": 4, "loads": 1})
    proc = subprocess.Popen([sys.executable, "-m", "emulator.cli", "run", str(cfg_path), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if nvme is not None:
        deadline = time.time() + 120
        while not list(nvme.glob("node0/step_*/manifest.json")) and time.time() < deadline and proc.poll() is None:
            time.sleep(0.02)
        free = shutil.disk_usage(nvme).free
        with open(nvme / "filler", "wb") as fh:  # leave 2 MiB: less than one rank's ~7 MiB file
            os.posix_fallocate(fh.fileno(), 0, max(0, free - 2 * MIB))
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    res = results(tmp_path / "out")
    f = res["faults"]
    assert f["local_full_files"] >= 1 and f["direct_to_global_files"] == f["local_full_files"], f
    assert f["counts"]["local_full"] == f["local_full_files"]
    assert all(m["incomplete"] == 0 for m in res["modes"].values())  # they went straight to global
    run_cfg = load_config(str(cfg_path))
    local_root = (nvme or tmp_path / "nvme") / "node0"
    assert not partials(local_root)
    verify_dir_tier(local_root, run_cfg)
    assert verify_dir_tier(tmp_path / "global", run_cfg, ranks=2)
    assert res["load"]["ok"]


def test_cli_global_outage_and_corrupt_file_async(tmp_path):
    """A 3 s outage from checkpoint 1 on, and rank 0's local copy of checkpoint 4 flipped."""
    cfg_path = small_config(
        tmp_path, training={"step_seconds": 0.25},
        checkpoint={"saves": 4, "loads": 1, "modes": ["async"]},
        drain={"retries": 1, "retry_backoff_s": 0.05},
        failures={"global_fault": {"checkpoint": 1, "seconds": 3},
                  "corrupt": {"checkpoint": 4, "tier": "local", "rank": 0, "how": "flip"}})
    ckpt_emu("run", cfg_path, "--quiet", check=True)  # async: training went on
    res = results(tmp_path / "out")
    f = res["faults"]
    assert f["abandoned_drains"] >= 1 and f["counts"]["drain_abandoned"] >= 1, f
    assert f["counts"]["injected"] >= 3  # the outage on both ranks, the corruption on rank 0
    assert res["modes"]["async"]["incomplete"] == f["abandoned_drains"]
    assert "abandoned after 2 attempt(s)" in " ".join(res["modes"]["async"]["errors"])
    # rank 0's local copy of the newest checkpoint is caught, never loaded: the global copy
    # serves it if the drain made it, else every rank goes back to the previous checkpoint
    assert res["load"]["ok"] and res["load"]["served_by"] in ({"local": 1, "global": 1}, {"local": 2})
    assert any(x.startswith("local@") and "checksum mismatch" in x for x in res["load"]["fallbacks"])
    assert f["counts"]["checksum_mismatch"] == 1
    verify_dir_tier(tmp_path / "global", load_config(str(cfg_path)), ranks=2)


def test_cli_sync_outage_ends_with_one_line(tmp_path):
    cfg_path = small_config(tmp_path, checkpoint={"saves": 2, "modes": ["sync"]},
                            drain={"retries": 1, "retry_backoff_s": 0.05},
                            failures={"global_fault": {"checkpoint": 1, "seconds": 600}})
    proc = ckpt_emu("run", cfg_path, "--quiet")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 3 and len(lines) == 1, proc.stderr  # failed to run
    assert lines[0].startswith("ckpt-emu: error: rank ")
    assert "checkpoint at step 2 (sync) did not reach the global tier" in lines[0]
    assert "drain.on_failure=auto" in lines[0] and "Traceback" not in proc.stderr
    assert verify_dir_tier(tmp_path / "global") == [] and verify_dir_tier(tmp_path / "local" / "node0") == [2]


@ON_RGW
def test_cli_s3_server_cut_mid_drain(s3_endpoint, tmp_path):
    """The S3 endpoint dies for 2 s in the middle of a multipart drain, then comes back."""
    bucket = make_bucket(s3_endpoint)
    proxy = CutProxy(_moto_addr(s3_endpoint))
    cfg_path = small_config(
        tmp_path, checkpoint={"saves": 3, "loads": 1, "modes": ["async"]},
        drain={"retries": 3, "retry_backoff_s": 0.5},
        tiers={"global": {"backend": "s3", "bucket": bucket, "endpoint_url": proxy.url, "part_size_mib": 5}})
    proxy.cut_after(24 * MIB, down_s=2.0)  # the preflight and the first checkpoint pass
    proc = ckpt_emu("run", cfg_path, "--quiet")
    cuts = proxy.cuts
    proxy.close()
    assert proc.returncode == 0, proc.stderr
    assert cuts == 1
    res = results(tmp_path / "out")
    assert _uploads(s3_endpoint, bucket) == []  # no orphaned multipart upload after the run
    client = raw_client(s3_endpoint)
    objects = _s3_objects(s3_endpoint, bucket)
    visible = sorted(k for k in objects if k.endswith("/manifest.json"))
    assert visible, res["modes"]
    for key in visible:  # every visible checkpoint is whole; an incomplete one has no manifest
        m = Manifest.from_json(client.get_object(Bucket=bucket, Key=key)["Body"].read())
        assert sorted(e.rank for e in m.files) == [0, 1]
        for e in m.files:
            body = client.get_object(Bucket=bucket, Key=e.key)["Body"].read()
            assert len(body) == e.size and f"{crc32c.crc32c(body):08x}" == e.crc32c
    complete = res["modes"]["async"]["checkpoints"] - res["modes"]["async"]["incomplete"]
    assert complete >= 1 and res["load"]["ok"]


def test_wrong_s3_credentials(tmp_path, capsys, aws_env):
    """A moto server that enforces authentication: our test keys are unknown to it."""
    port = _closed_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              env=dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="0"),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        _one_line_exit_2(capsys, [
            "run", "--quiet", "--out", str(tmp_path / "out"), "--set", "tiers.global.backend=s3",
            "--set", "tiers.global.bucket=ckpt", "--set", f"tiers.global.endpoint_url=http://127.0.0.1:{port}"],
            tmp_path / "out", "tiers.global: s3 tier s3://ckpt/ at 127.0.0.1:"
                              f"{port}: access denied (check credentials and bucket permissions)")
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_a_run_that_writes_fewer_checkpoints_than_it_keeps_needs_room_for_those_only(tmp_path, tmpfs):
    """One save in one mode: one checkpoint ever exists, not keep + 1 (a full-size one-save run on
    a disk that holds it once was refused); the run then completes on that filesystem."""
    nvme = tmpfs("nvme", "95m")  # ~14 MiB a checkpoint per node: keep + 1 needs ~108 MiB, one ~79
    if nvme is None:
        pytest.skip("mounting a tmpfs is not permitted here")
    cfg_path = small_config(tmp_path, tiers={"local": {"backend": "dir", "path": f"{nvme}/node{{node}}"}},
                            checkpoint={"saves": 1, "loads": 0, "keep": 2, "modes": ["sync"]})
    ckpt_emu("run", cfg_path, "--quiet", check=True, timeout=240)
    res = results(tmp_path / "out")
    assert res["modes"]["sync"]["checkpoints"] == 1 and res["modes"]["sync"]["incomplete"] == 0
    refused = small_config(tmp_path, tiers={"local": {"backend": "dir", "path": f"{nvme}/node{{node}}"}},
                           checkpoint={"saves": 3, "loads": 0, "keep": 2, "modes": ["sync"]})
    proc = ckpt_emu("run", refused, "--quiet")
    assert proc.returncode == 2 and "(2 kept + 1 in flight)" in proc.stderr, proc.stderr
