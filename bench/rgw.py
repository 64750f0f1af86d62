"""The S3 paths against boto3 on a real S3 server: a throwaway Ceph RGW (scripts/rgw-server.sh).

``bench_s3_rgw`` starts one RGW in the benchmark's folder (about 10 s) and measures, on the same
server and the same bytes:

* ``drain_s3_rgw``: ``S3Tier.put_file`` (the drain's upload) against boto3's ``upload_file`` with
  its best ``TransferConfig`` (``baselines.Boto3Upload``), as ``drain_s3`` does against moto;
* ``restore_s3_rgw``: ``Restorer.load`` of a complete checkpoint on S3 (manifest, the rank file read
  from memory with its CRC32C verified, the live state restored) against boto3's
  ``download_fileobj`` of the same rank file into memory, with its best ``TransferConfig``.

Where the Ceph packages are missing the suite leaves it out (``available``).
"""
from __future__ import annotations

import io
import os
import shutil
import subprocess
import time
from pathlib import Path

from . import baselines
from .common import HIGHER, MIB, Params, remove, result, run_pairs

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "rgw-server.sh"
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


class Boto3Download:
    """boto3's ``download_fileobj`` into memory with the best ``TransferConfig`` for this server and
    object (the same candidates as ``Boto3Upload``, tried once each; the fastest is kept)."""

    def __init__(self, upload: baselines.Boto3Upload):
        self.client, self.bucket, self.upload = upload.client, upload.bucket, upload
        self.config, self.label, self.search = None, "default TransferConfig", []

    def tune(self, key: str, size: int, quick: bool = False) -> None:
        candidates = self.upload.candidates(size)[:2 if quick else None]
        best = float("inf")
        for cfg, label in candidates:
            t = self.download(key, size, cfg)
            self.search.append({"config": label, "seconds": t, "gib_s": size / t / (1 << 30)})
            if t < best:
                best, self.config, self.label = t, cfg, label

    def download(self, key: str, size: int, config=None) -> float:
        buf = io.BytesIO()
        t = time.perf_counter()
        self.client.download_fileobj(self.bucket, key, buf, Config=config or self.config)
        dt = time.perf_counter() - t
        if buf.getbuffer().nbytes != size:
            raise RuntimeError(f"download_fileobj of {key} gave {buf.getbuffer().nbytes} of {size} bytes")
        return dt


def bench_s3_rgw(params: Params, wd: Path) -> dict:
    """Both S3 benchmarks on one RGW started for them."""
    with RgwServer(wd / "rgw") as server:
        boto = baselines.Boto3Upload(server.url, "bench")
        boto.client.create_bucket(Bucket="bench")
        return {**_drain(params, wd, server, boto), **_restore(params, server, boto)}


def _tier(server: RgwServer):
    """The product's S3 tier with its default options (64 MiB parts: objects up to that go in one PUT,
    as boto3's best TransferConfig also chooses on RGW)."""
    from tiers.base import TierScope
    from tiers.s3 import S3Tier
    return S3Tier.from_options(S3Tier.Options(bucket="bench", endpoint_url=server.url), scope=TierScope())


def _drain(params: Params, wd: Path, server: RgwServer, boto) -> dict:
    from emulator.checkpoint.loop import LoopThread

    from .benches import _s3_sides, throughput_samples
    nbytes = params.s3_mib * MIB
    src = wd / "object.bin"
    src.write_bytes(os.urandom(nbytes))
    tier, loop = _tier(server), LoopThread("bench-rgw")
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
        transfer_config_search=boto.search, server="Ceph RGW 16 (scripts/rgw-server.sh, 127.0.0.1)")}


def _restore(params: Params, server: RgwServer, boto) -> dict:
    """A checkpoint of a rank the size of ``--s3-mib`` written straight to S3, then restored."""
    from emulator.checkpoint.checkpointer import Checkpointer
    from emulator.checkpoint.restore import Restorer
    from emulator.rank.comm import SoloComm
    from emulator.workload.state import RankState

    from .benches import rank_config, setup_process, throughput_samples, timed_restore
    cfg = rank_config(params, rank_gib=params.s3_mib / 1024)
    setup_process(params, cfg)
    state, tier = RankState.from_config(cfg, 0), _tier(server)
    ck = Checkpointer(state, None, tier, SoloComm(), keep=cfg.checkpoint.keep)
    try:
        rec = ck.checkpoint(1, "sync")
        if not rec.global_complete:
            raise RuntimeError(f"setup checkpoint failed: {rec.error}")
        key = next(k for k in ck.loop.run(tier.list()) if k.endswith(".pt"))
        nbytes = ck.loop.run(tier.size(key))
        restorer = Restorer(state, [("global", tier)], SoloComm(), loop=ck.loop)
        download = Boto3Download(boto)
        download.tune(key, nbytes, quick=params.quick)

        pairs = run_pairs(params, timed_restore(restorer, nbytes), lambda i: download.download(key, nbytes))
    finally:
        ck.close()
    return {"restore_s3_rgw": result(
        **throughput_samples(pairs, nbytes), unit="GiB/s", target=0.9, better=HIGHER,
        ratio_is="throughput ours/baseline (= download_fileobj time / our time, same object, same RGW)",
        ours_is="Restorer.load from the S3 tier: list steps, read the manifest, read the rank file into "
                "the staging buffers with its CRC32C verified, restore the live state",
        baseline_is=f"boto3 download_fileobj into memory (BytesIO), best TransferConfig: {download.label}",
        bytes=nbytes, transfer_config_search=download.search,
        server="Ceph RGW 16 (scripts/rgw-server.sh, 127.0.0.1)")}
