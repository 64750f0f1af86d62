"""End to end through the real CLI and torchrun, draining to S3 (Ceph RGW over HTTP on 127.0.0.1).

One run (sync and async, multipart uploads of ~7 MiB rank files in 5 MiB parts) checks
what a drain leaves on S3: manifests listing every object with size and CRC32C, objects
byte-identical to the node-local files, retention, no multipart upload left behind and
no credential anywhere in what the run printed or wrote. A second run, of the shipped
``design-nvme-s3`` config pointed at the test server with ``--set``, loses the node's
local tier and must restore from S3.
"""
import os
import subprocess
import sys
from pathlib import Path

import crc32c
import pytest
from emu import assert_file_holds_state, results, small_config
from s3server import ON_RGW, make_bucket, raw_client, s3_endpoint, s3_server  # noqa: F401 - pytest fixtures

from emulator.checkpoint import layout
from emulator.config import load_config

# recognisable strings: a leak anywhere shows up in a plain substring search
ACCESS_KEY = "AKIACKPTEMUE2ETESTKEY"
SECRET_KEY = "ckptEmuE2eSecret/DoNotLog+5f3a9c"
PREFIX = "runs/e2e"
RANKS = 2

pytestmark = ON_RGW  # whole runs: the contract suite checks the S3 tier on both servers


@pytest.fixture(scope="module", autouse=True)
def e2e_credentials(s3_server):
    """The server accepts the recognisable credentials (moto accepts any; RGW gets a second key)."""
    s3_server.allow_keys(ACCESS_KEY, SECRET_KEY)


def run_cli(*args, timeout=300) -> subprocess.CompletedProcess:
    """``ckpt-emu`` in a subprocess whose environment carries the recognisable test credentials."""
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
               AWS_DEFAULT_REGION="us-east-1")
    return subprocess.run([sys.executable, "-m", "emulator.cli", *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=timeout)


def check(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"ckpt-emu failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def objects(endpoint, bucket, prefix="") -> dict:
    """key -> size of every object in the bucket under ``prefix``."""
    out = {}
    for page in raw_client(endpoint).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out.update({o["Key"]: o["Size"] for o in page.get("Contents", ())})
    return out


def body(endpoint, bucket, key) -> bytes:
    return raw_client(endpoint).get_object(Bucket=bucket, Key=key)["Body"].read()


def manifest(endpoint, bucket, prefix, step) -> layout.Manifest:
    """The step's manifest object, parsed and verified as the Restorer reads it."""
    return layout.Manifest.from_json(body(endpoint, bucket, f"{prefix}/step_{step:08d}/manifest.json"))


def complete_steps_on_s3(endpoint, bucket, prefix) -> list[int]:
    return sorted(int(k[len(prefix) + 6:][:8]) for k in objects(endpoint, bucket, prefix + "/")
                  if k.endswith("/manifest.json"))


def complete_steps_on_dir(root: Path) -> list[int]:
    return sorted(int(p.parent.name[5:]) for p in root.glob("step_*/manifest.json"))


def assert_no_credentials(proc, out: Path) -> None:
    texts = {"stdout": proc.stdout, "stderr": proc.stderr}
    for path in out.rglob("*"):  # results.json, report.txt, torchrun.log, config.json, ...
        if path.is_file():
            texts[str(path)] = path.read_bytes().decode("utf-8", "replace")
    assert {"results.json", "report.txt", "torchrun.log"} <= {Path(k).name for k in texts}
    for where, text in texts.items():
        assert ACCESS_KEY not in text, f"access key id leaked into {where}"
        assert SECRET_KEY not in text, f"secret key leaked into {where}"


# ------------------------------------------------------------------ drain to S3, then load from local

@pytest.fixture(scope="module")
def drained(s3_endpoint, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("s3run")
    bucket = make_bucket(s3_endpoint)
    cfg_path = small_config(tmp, ranks=RANKS, checkpoint={"saves": 3, "loads": 1, "keep": 2},
                            tiers={"global": {"backend": "s3", "bucket": bucket, "prefix": PREFIX,
                                              "endpoint_url": s3_endpoint, "part_size_mib": 5,
                                              "max_concurrency": 4}})
    proc = check(run_cli("run", cfg_path, "--quiet"))
    return tmp, cfg_path, bucket, proc


def test_run_completes_and_reports_s3(drained):
    tmp, _, bucket, proc = drained
    res = results(tmp / "out")
    for mode, m in res["modes"].items():
        assert m["checkpoints"] == 3 and m["incomplete"] == 0 and not m["errors"], (mode, m)
        assert m["drain_mean_s"] > 0
    assert res["tiers"]["global"].startswith(f"s3://{bucket}/{PREFIX}/ at 127.0.0.1:")
    assert res["load"]["ok"] and res["load"]["served_by"] == {"local": RANKS}
    assert (tmp / "out" / "report.txt").read_text() in proc.stdout


def test_manifests_list_every_object_with_size_and_crc32c(drained, s3_endpoint):
    tmp, _, bucket, _ = drained
    steps = complete_steps_on_s3(s3_endpoint, bucket, PREFIX)
    assert steps == [10, 12]  # 2 modes x 3 checkpoints every 2 steps; keep 2
    sizes = objects(s3_endpoint, bucket, PREFIX + "/")
    for step in steps:
        man = manifest(s3_endpoint, bucket, PREFIX, step)
        assert man.step == step and man.tier == "global" and man.world == RANKS
        assert sorted(f.rank for f in man.files) == list(range(RANKS))
        for f in man.files:
            key = f"{PREFIX}/{f.key}"
            assert sizes[key] == f.size > 5 << 20  # bigger than one part: uploaded in parts
            assert f"{crc32c.crc32c(body(s3_endpoint, bucket, key)):08x}" == f.crc32c
            etag = raw_client(s3_endpoint).head_object(Bucket=bucket, Key=key)["ETag"]
            assert etag.strip('"').endswith("-2"), f"{key} was not a 2-part multipart upload ({etag})"


def test_objects_are_byte_identical_to_local_files(drained, s3_endpoint):
    tmp, cfg_path, bucket, _ = drained
    local = tmp / "local" / "node0"
    common = sorted(set(complete_steps_on_dir(local)) & set(complete_steps_on_s3(s3_endpoint, bucket, PREFIX)))
    assert common == [10, 12]
    cfg = load_config(str(cfg_path))
    for step in common:
        for f in manifest(s3_endpoint, bucket, PREFIX, step).files:
            data = body(s3_endpoint, bucket, f"{PREFIX}/{f.key}")
            assert data == (local / f.key).read_bytes(), f"{f.key} differs between S3 and local"
    # and the bytes are the state the rank had at that step
    newest = manifest(s3_endpoint, bucket, PREFIX, 12).entry_for_rank(1)
    copy = tmp / "from-s3.pt"
    copy.write_bytes(body(s3_endpoint, bucket, f"{PREFIX}/{newest.key}"))
    assert_file_holds_state(copy, cfg, 1, 12)


def test_retention_keeps_only_complete_checkpoints(drained, s3_endpoint):
    _, _, bucket, _ = drained
    keys = sorted(objects(s3_endpoint, bucket))  # the whole bucket, not only the prefix
    assert all(k.startswith(PREFIX + "/step_") for k in keys), keys
    by_step = {}
    for k in keys:
        by_step.setdefault(int(k[len(PREFIX) + 6:][:8]), []).append(k.rsplit("/", 1)[1])
    assert sorted(by_step) == [10, 12]  # keep: 2, nothing of older or incomplete checkpoints
    for step, names in by_step.items():
        assert "manifest.json" in names and len(names) == 1 + RANKS, (step, names)


def test_no_multipart_upload_left_behind(drained, s3_endpoint):
    _, _, bucket, _ = drained
    listing = raw_client(s3_endpoint).list_multipart_uploads(Bucket=bucket)
    assert not listing.get("Uploads"), listing.get("Uploads")


def test_credentials_never_appear_in_outputs(drained):
    tmp, _, _, proc = drained
    assert_no_credentials(proc, tmp / "out")


def test_missing_bucket_fails_before_launch_without_credentials(s3_endpoint, tmp_path):
    cfg_path = small_config(tmp_path, ranks=1, tiers={"global": {
        "backend": "s3", "bucket": "no-such-bucket-ckpt-emu", "endpoint_url": s3_endpoint}})
    proc = run_cli("run", cfg_path, "--quiet", timeout=120)
    assert proc.returncode == 2
    assert "bucket does not exist" in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert ACCESS_KEY not in proc.stdout + proc.stderr and SECRET_KEY not in proc.stdout + proc.stderr
    assert not (tmp_path / "out" / "torchrun.log").exists()  # nothing launched


# ------------------------------------------------------------------ node loss: restore from S3

def test_design_nvme_s3_restores_from_s3_after_local_loss(s3_endpoint, tmp_path):
    """The shipped S3 design, pointed at the test server with --set, shrunk to 2 ranks."""
    bucket = make_bucket(s3_endpoint)
    prefix = "design/loss"
    overrides = [
        f"tiers.global.bucket={bucket}", f"tiers.global.endpoint_url={s3_endpoint}",
        f"tiers.global.prefix={prefix}", "tiers.global.part_size_mib=5",
        f"tiers.local.path={tmp_path}/nvme/node{{node}}", f"run.out={tmp_path}/out",
        f"parallelism.ranks={RANKS}", "run.scale=0.0005", "training.step_seconds=100",  # 0.05 s here
        "checkpoint.interval_steps=2", "checkpoint.saves=3", "checkpoint.loads=2", "checkpoint.modes=[sync]",
        "checkpoint.baseline=false",
        "run.dilation=1",  # the restore is checked, not the pacing (auto took 225 s for 25 on a busy host)
    ]
    args = ["run", "design-nvme-s3", "--quiet", "--lose-local-after", "2"]
    for o in overrides:
        args += ["--set", o]
    proc = check(run_cli(*args))
    res = results(tmp_path / "out")
    assert res["failure"] == {"kind": "lose_local", "after_checkpoint": 2, "node": 0}
    assert res["modes"]["sync"]["checkpoints"] == 2 and res["modes"]["sync"]["incomplete"] == 0
    assert complete_steps_on_dir(tmp_path / "nvme" / "node0") == []  # the node came back empty
    assert complete_steps_on_s3(s3_endpoint, bucket, prefix) == [2, 4]

    ld = res["load"]
    assert ld["ok"] and ld["loads"] == 2
    assert ld["served_by"] == {"global": 2 * RANKS}
    assert set(ld["recovery_mean_s_by_tier"]) == {"global"} and ld["recovery_mean_s_by_tier"]["global"] > 0
    assert "local@4: not complete on this tier" in ld["fallbacks"]
    assert "recovery per tier: global" in proc.stdout
    for r in res["per_rank"]:
        for load in r["loads"]:
            assert (load["ok"], load["step"], load["tier"]) == (True, 4, "global"), load
            assert load["bytes"] > 0

    # the Restorer checked the CRC32C of what it loaded against the manifest; the manifest's
    # objects must in turn be exactly the state each rank had at step 4
    cfg = load_config("design-nvme-s3", overrides)
    man = manifest(s3_endpoint, bucket, prefix, 4)
    assert {f.rank: f.size for f in man.files} == {r["rank"]: r["loads"][0]["bytes"] for r in res["per_rank"]}
    for f in man.files:
        copy = tmp_path / f"rank{f.rank}.pt"
        copy.write_bytes(body(s3_endpoint, bucket, f"{prefix}/{f.key}"))
        assert f"{crc32c.crc32c(copy.read_bytes()):08x}" == f.crc32c
        assert_file_holds_state(copy, cfg, f.rank, 4)
    assert not raw_client(s3_endpoint).list_multipart_uploads(Bucket=bucket).get("Uploads")
    assert_no_credentials(proc, tmp_path / "out")


def test_without_permission_to_list_uploads_a_run_warns_and_goes_on(s3_endpoint, tmp_path):
    """Least-privilege policies often lack s3:ListBucketMultipartUploads: crash clean-up is skipped
    with one warning line, never a traceback."""
    from httpfaults import Rule, S3FaultProxy
    proxy = S3FaultProxy(s3_endpoint)
    proxy.rules.append(Rule("GET", "uploads", 403, "AccessDenied", "Access Denied"))
    bucket = make_bucket(s3_endpoint)
    try:
        cfg_path = small_config(tmp_path, ranks=1, checkpoint={"saves": 1, "loads": 1},
                                tiers={"global": {"backend": "s3", "bucket": bucket, "prefix": PREFIX,
                                                  "endpoint_url": proxy.url, "part_size_mib": 5}})
        proc = check(run_cli("run", cfg_path, "--quiet"))
    finally:
        proxy.close()
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("ckpt-emu: warning:")]
    assert len(warnings) >= 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "clean-up of an earlier crash skipped" in warnings[0] and "access denied" in warnings[0]
    res = results(tmp_path / "out")
    assert all(m["incomplete"] == 0 for m in res["modes"].values()) and res["load"]["ok"]
