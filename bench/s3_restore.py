"""The S3 restore against boto3's own download, on any S3 server (moto, Ceph RGW).

``restore_vs_download``: ``Restorer.load`` of a complete checkpoint of one rank the size of
``--s3-mib`` written straight to S3 by the product's tier with its default options (list the
steps, read the manifest, read the rank file into the staging buffers with its CRC32C verified,
restore the live state), against boto3's ``download_fileobj`` of the same rank file into memory
with its best ``TransferConfig`` for that server and object (``Boto3Download.tune``).
"""
from __future__ import annotations

import io
import time

from . import baselines
from .common import HIGHER, Params, result, run_pairs


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


def default_tier(url: str, bucket: str):
    """The product's S3 tier with its default options (64 MiB parts, one GET up to 256 MiB)."""
    from tiers.base import TierScope
    from tiers.s3 import S3Tier
    return S3Tier.from_options(S3Tier.Options(bucket=bucket, endpoint_url=url), scope=TierScope())


def restore_vs_download(params: Params, url: str, boto: baselines.Boto3Upload, server: str) -> dict:
    """One rank's checkpoint on S3 (``--s3-mib``), restored by ours and downloaded by boto3, in pairs."""
    from emulator.checkpoint.checkpointer import Checkpointer
    from emulator.checkpoint.restore import Restorer
    from emulator.design import resolve
    from emulator.rank.comm import SoloComm
    from emulator.workload.state import RankState

    from .benches import rank_config, setup_process, throughput_samples, timed_restore
    cfg = rank_config(params, rank_gib=params.s3_mib / 1024)
    setup_process(params, cfg)
    state, tier = RankState.of_run(cfg, resolve(cfg, run=True), 0), default_tier(url, boto.bucket)
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
    return result(
        **throughput_samples(pairs, nbytes), unit="GiB/s", target=0.9, better=HIGHER,
        ratio_is=f"throughput ours/baseline (= download_fileobj time / our time, same object, same {server})",
        ours_is="Restorer.load from the S3 tier (default options): list steps, read the manifest, read the "
                "rank file into the staging buffers with its CRC32C verified, restore the live state",
        baseline_is=f"boto3 download_fileobj into memory (BytesIO), best TransferConfig: {download.label}",
        bytes=nbytes, transfer_config_search=download.search, server=server)
