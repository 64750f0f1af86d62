"""The S3 paths against boto3 on a real S3 server: a throwaway Ceph RGW (scripts/rgw-server.sh).

``bench_s3_rgw`` starts one RGW in the benchmark's folder (about 10 s) and measures, on the same
server and the same bytes:

* ``drain_s3_rgw``: ``S3Tier.put_file`` (the drain's upload) against boto3's ``upload_file`` with
  its best ``TransferConfig`` (``baselines.Boto3Upload``), as ``drain_s3`` does against moto;
* ``restore_s3_rgw``: ``Restorer.load`` of a complete checkpoint on S3 against boto3's
  ``download_fileobj`` of the same rank file into memory (``bench/s3_restore.py``).

Where the Ceph packages are missing the suite leaves it out (``available``).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from . import baselines
from .common import HIGHER, MIB, Params, remove, result, run_pairs
from .s3_restore import default_tier, restore_vs_download

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "rgw-server.sh"
RGW = "Ceph RGW 16 (scripts/rgw-server.sh, 127.0.0.1)"
COMMANDS = ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "ceph", "monmaptool")


def available() -> bool:
    """Whether this machine can start an RGW (the Debian packages ceph-mon ceph-osd radosgw ceph-common)."""
    return all(shutil.which(c) for c in COMMANDS)


class RgwServer:
    """A Ceph RGW started in ``folder`` by the project's script, its keys in this process's environment."""

    def __init__(self, folder: Path):
        self.folder = folder
        proc = subprocess.run(["bash", str(SCRIPT), "start", str(folder)], capture_output=True, text=True,
                              timeout=300)
        if proc.returncode != 0:
            self.stop()
            raise RuntimeError(f"scripts/rgw-server.sh start failed: {proc.stderr.strip()}")
        values = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
        self.url = values["endpoint"]
        os.environ.update(AWS_ACCESS_KEY_ID=values["access_key"], AWS_SECRET_ACCESS_KEY=values["secret_key"],
                          AWS_DEFAULT_REGION="us-east-1", AWS_CONFIG_FILE=os.devnull,
                          AWS_SHARED_CREDENTIALS_FILE=os.devnull)

    def stop(self) -> None:
        subprocess.run(["bash", str(SCRIPT), "stop", str(self.folder)], capture_output=True, timeout=120)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


def bench_s3_rgw(params: Params, wd: Path) -> dict:
    """Both S3 benchmarks on one RGW started for them."""
    with RgwServer(wd / "rgw") as server:
        boto = baselines.Boto3Upload(server.url, "bench")
        boto.client.create_bucket(Bucket="bench")
        return {**_drain(params, wd, server, boto),
                "restore_s3_rgw": restore_vs_download(params, server.url, boto, RGW)}


def _drain(params: Params, wd: Path, server: RgwServer, boto) -> dict:
    from emulator.checkpoint.loop import LoopThread

    from .benches import _s3_sides, throughput_samples
    nbytes = params.s3_mib * MIB
    src = wd / "object.bin"
    src.write_bytes(os.urandom(nbytes))
    tier, loop = default_tier(server.url, "bench"), LoopThread("bench-rgw")
    try:
        boto.tune(src, "tune.bin", quick=params.quick)
        pairs = run_pairs(params, *_s3_sides(loop, tier, boto, src, nbytes))
    finally:
        loop.run(tier.close())
        loop.close()
        remove(src)
    return {"drain_s3_rgw": result(
        **throughput_samples(pairs, nbytes), unit="GiB/s", target=0.9, better=HIGHER,
        ratio_is="throughput ours/baseline (= upload_file time / our time, same object, same RGW)",
        ours_is=f"S3Tier.put_file, default tier config (part_size_mib={tier.part_size // MIB}, max_concurrency={tier.max_concurrency}, "
                "CRC32C per request)",
        baseline_is=f"boto3 upload_file, best TransferConfig: {boto.label}", bytes=nbytes,
        transfer_config_search=boto.search, server=RGW)}
