"""The baselines: what a careful engineer gets from standard tools for the same bytes.

- ``dd_write``: ``dd if=RANDOM of=F bs=64M conv=fsync`` of an exact byte count
  (``iflag=count_bytes``), buffered writes then one fsync. The input is a file of
  random bytes (``random_file``, read from the page cache), not /dev/zero: storage
  that compresses or dedups would make zeros a flattering baseline.
- ``dd_read``: ``dd if=F of=/dev/null bs=64M``.
- ``cp_sync``: coreutils ``cp --reflink=never`` then ``sync -f`` on the destination's
  filesystem (cp clones by default on XFS/btrfs, which copies nothing).
- ``Boto3Upload``: boto3's own ``upload_file`` with the fastest ``TransferConfig``
  found by a small search on the same server and object.
- ``dcp_async_save``: ``torch.distributed.checkpoint.async_save`` (thread executor)
  on the same state dict; the stall is the time until the call returns.
- ``parallel_dd``: N ``dd`` writers at once, the scaling benchmark's reference.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from .common import MIB, timed_cmd

DD_BS = "64M"


def random_file(path: Path, nbytes: int) -> Path:
    """A file of at least ``nbytes`` random bytes (kept and reused), the dd writers' input."""
    path = Path(path)
    if not path.exists() or path.stat().st_size < nbytes:
        block = 64 * MIB
        with open(path, "wb") as fh:
            for off in range(0, nbytes, block):
                fh.write(os.urandom(min(block, nbytes - off)))
    return path


def dd_write(path, nbytes: int, source: Path) -> float:
    return timed_cmd(["dd", f"if={source}", f"of={path}", f"bs={DD_BS}", f"count={nbytes}",
                      "iflag=count_bytes", "conv=fsync", "status=none"])


def dd_read(path) -> float:
    return timed_cmd(["dd", f"if={path}", "of=/dev/null", f"bs={DD_BS}", "status=none"])


def cp_sync(src, dest) -> float:
    t = time.perf_counter()
    subprocess.run(["cp", "--reflink=never", str(src), str(dest)], check=True)
    subprocess.run(["sync", "-f", str(dest)], check=True)
    return time.perf_counter() - t


def parallel_dd(paths: list, nbytes: list[int], source: Path) -> tuple[float, list[float]]:
    """Start one ``dd ... conv=fsync`` per path at once; (wall time, per-writer times)."""
    t0 = time.perf_counter()
    procs = [subprocess.Popen(["dd", f"if={source}", f"of={p}", f"bs={DD_BS}", f"count={n}",
                               "iflag=count_bytes", "conv=fsync", "status=none"])
             for p, n in zip(paths, nbytes)]
    ends = [0.0] * len(procs)
    pending = set(range(len(procs)))
    while pending:  # poll so each writer's own finish time is known
        for i in list(pending):
            if procs[i].poll() is not None:
                ends[i] = time.perf_counter() - t0
                pending.discard(i)
                if procs[i].returncode != 0:
                    raise subprocess.CalledProcessError(procs[i].returncode, "dd")
        time.sleep(0.002)
    return max(ends), ends


# --------------------------------------------------------------------------- S3

class Boto3Upload:
    """boto3's ``upload_file`` with the best ``TransferConfig`` for this server and size.

    The client is boto3's default (only the endpoint and path-style addressing
    set, as any user would); ``tune`` tries part sizes and thread counts on the
    real object and keeps the fastest, so the baseline is boto3 at its best.
    """

    CHUNKS_MIB = (8, 16, 32, 64)
    THREADS = (4, 8, 16)

    def __init__(self, endpoint: str, bucket: str):
        import boto3
        from botocore.config import Config
        self.bucket = bucket
        self.client = boto3.session.Session().client(
            "s3", endpoint_url=endpoint, config=Config(s3={"addressing_style": "path"}))
        self.config = None
        self.label = "default TransferConfig"
        self.search: list[dict] = []

    @staticmethod
    def make_config(chunk_mib: int, threads: int):
        from boto3.s3.transfer import TransferConfig
        return TransferConfig(multipart_threshold=chunk_mib * MIB, multipart_chunksize=chunk_mib * MIB,
                              max_concurrency=threads, use_threads=True)

    def candidates(self, size: int) -> list[tuple[object, str]]:
        from boto3.s3.transfer import TransferConfig
        out = [(TransferConfig(), "default TransferConfig (8 MiB parts, 10 threads)")]
        for c in self.CHUNKS_MIB:
            if c * MIB >= size:  # the whole object in one PUT
                out.append((self.make_config(c, 1), f"single PUT (multipart_threshold={c} MiB)"))
                break
            out += [(self.make_config(c, t), f"multipart_chunksize={c} MiB, max_concurrency={t}")
                    for t in self.THREADS]
        return out

    def tune(self, src: Path, key: str, repeats: int = 1, quick: bool = False) -> None:
        """Try every candidate ``repeats`` times, keep the fastest (best of its tries)."""
        candidates = self.candidates(src.stat().st_size)
        if quick:
            candidates = candidates[:2]
        size = src.stat().st_size
        best = (float("inf"), None, "")
        for cfg, label in candidates:
            times = []
            for _ in range(repeats):
                times.append(self.upload(src, key, cfg))
                self.delete(key)
            t = min(times)
            self.search.append({"config": label, "seconds": t, "gib_s": size / t / (1 << 30)})
            if t < best[0]:
                best = (t, cfg, label)
        _, self.config, self.label = best

    def upload(self, src: Path, key: str, config=None) -> float:
        t = time.perf_counter()
        self.client.upload_file(str(src), self.bucket, key, Config=config or self.config)
        return time.perf_counter() - t

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=key)


# --------------------------------------------------------------------------- DCP

def dcp_async_save(state_dict: dict, checkpoint_dir: Path, stager=None) -> dict:
    """One ``dcp.async_save``: the stall (until it returns), staging and total times.

    ``stager=None`` is the default (a fresh DefaultStager that copies into new CPU
    memory before returning); a reused ``DefaultStager`` with async staging returns
    at once and copies in a background thread (``staged_s`` is when that copy ends).
    """
    import torch.distributed.checkpoint as dcp
    t = time.perf_counter()
    if stager is None:
        fut = dcp.async_save(state_dict, checkpoint_id=str(checkpoint_dir))
    else:
        fut = dcp.async_save(state_dict, checkpoint_id=str(checkpoint_dir), async_stager=stager)
    stall = time.perf_counter() - t
    staged = stall
    upload = getattr(fut, "upload_completion", fut)
    staging = getattr(fut, "staging_completion", None)
    if staging is not None:
        staging.result()
        staged = time.perf_counter() - t
    upload.result()
    total = time.perf_counter() - t
    shutil.rmtree(checkpoint_dir, ignore_errors=True)
    return {"stall_s": stall, "staged_s": staged, "total_s": total}
