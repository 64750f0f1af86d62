"""The in-process benchmarks: our save, drain, load and stall paths against their baselines.

Each function runs in its own worker process (``bench.worker``), builds one
rank's synthetic state the way a rank process does (``RankState`` of the
Llama-3 8B layout scaled to ``--rank-gib``, torch threads and torch.save's
CRC32 set as ``emulator.rank`` sets them), and returns ``{key: result}``.
Our path is the project's own code (``save_rank_file``, the pipeline's own local
write; ``Checkpointer``, ``Drainer``, ``S3Tier``, ``Restorer``).
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from . import baselines
from .common import (GIB, HIGHER, LOWER, MIB, Params, drop_page_cache, probe_drop_cache, remove, result,
                     run_pairs, run_rounds, warm_file)

PRESET = "llama3-8b"


# --------------------------------------------------------------------------- setup


def throughput_samples(pairs, nbytes: int) -> dict:
    """Samples of a throughput benchmark from (our seconds, baseline seconds) pairs on ``nbytes``:
    the ratio is baseline time / our time, i.e. our throughput over the baseline's."""
    return {"ratio_samples": [b / o for o, b in pairs],
            "ours_samples": [nbytes / o / GIB for o, _ in pairs],
            "base_samples": [nbytes / b / GIB for _, b in pairs]}


def timed_restore(restorer, nbytes: int):
    """A pair's "ours" side: one ``restorer.load()`` of ``nbytes``, its seconds (a failed or short
    restore raises: a fast wrong answer must not pass for a fast one)."""
    def ours(i):
        t = time.perf_counter()
        r = restorer.load()
        dt = time.perf_counter() - t
        if not r.ok or r.bytes != nbytes:
            raise RuntimeError(f"restore failed: {r.fallbacks}")
        return dt
    return ours


def rank_config(params: Params, rank_gib: float | None = None):
    """The preset's config with ``run.scale`` chosen so rank 0 holds ``rank_gib`` GiB."""
    from emulator import sizing
    from emulator.config import load_config
    cfg = load_config(PRESET)
    full = sizing.rank_size(cfg.model, cfg.parallelism, 0).total_bytes
    scale = min(1.0, (rank_gib or params.rank_gib) * GIB / full)
    return load_config(PRESET, [f"run.scale={scale!r}"])


def setup_process(params: Params, cfg) -> None:
    """Torch settings of a rank process (emulator.rank.run.main)."""
    import torch
    import torch.utils.serialization as ser
    torch.set_num_threads(params.threads)
    ser.config.save.compute_crc32 = cfg.checkpoint.torch_crc32


def make_state(params: Params):
    from emulator.design import resolve
    from emulator.workload.state import RankState
    cfg = rank_config(params)
    setup_process(params, cfg)
    state = RankState.of_run(cfg, resolve(cfg, run=True), 0)
    return cfg, state


def make_checkpointer(cfg, state, wd: Path):
    from emulator.checkpoint.checkpointer import Checkpointer
    from emulator.rank.comm import SoloComm
    from tiers.directory import DirTier
    local, global_ = DirTier(wd / "local"), DirTier(wd / "global")
    ck = Checkpointer(state, local, global_, SoloComm(), keep=cfg.checkpoint.keep,
                      drain_concurrency=cfg.drain.concurrency, drain_verify=cfg.drain.verify)
    return ck, local, global_


def save_rank_file(state, tier, key: str, step: int) -> tuple[int, str]:
    """The pipeline's own local write (``emulator.checkpoint.rank_file.save_rank_file``)."""
    from emulator.checkpoint.rank_file import save_rank_file as save
    return save(state, tier, key, step)


def _state_note(cfg, state) -> dict:
    return {"state_bytes": state.nbytes, "tensors": sum(1 for _ in state.tensors()),
            "preset": PRESET, "scale": cfg.run.scale}


# --------------------------------------------------------------------------- local write

def bench_local_write(params: Params, wd: Path) -> dict:
    """torch.save + fsync of the rank's payload through our ChecksumSink into a DirTier
    (the pipeline's local write) vs dd of the same byte count, same directory."""
    import time

    from tiers.directory import DirTier
    cfg, state = make_state(params)
    local = DirTier(wd / "local")
    nbytes, _ = save_rank_file(state, local, "probe.pt", 0)  # untimed: the size dd must match
    remove(local.local_path("probe.pt"))
    dd_file = wd / "local" / "dd.bin"
    source = baselines.random_file(wd / "random.bin", nbytes)

    def ours(i):
        key = f"step_{i:08d}/rank.pt"
        t = time.perf_counter()
        n, _ = save_rank_file(state, local, key, i)
        dt = time.perf_counter() - t
        assert n == nbytes, (n, nbytes)
        remove(local.local_path(key))
        return dt

    def base(i):
        dt = baselines.dd_write(dd_file, nbytes, source)
        remove(dd_file)
        return dt

    pairs = run_pairs(params, ours, base, before=lambda _: os.sync())
    return {"local_write": result(
        **throughput_samples(pairs, nbytes),
        unit="GiB/s", target=0.9, better=HIGHER,
        ratio_is="throughput ours/baseline (= dd time / our time, same bytes)",
        ours_is="torch.save(staged payload) -> ChecksumSink(CRC32C) -> DirTier sink: fsync, rename, fsync dir",
        baseline_is=f"dd if=RANDOM of=F bs=64M count={nbytes} iflag=count_bytes conv=fsync",
        bytes=nbytes, **_state_note(cfg, state))}


# --------------------------------------------------------------------------- drain to a directory

def bench_drain_dir(params: Params, wd: Path) -> dict:
    """Our Drainer (DirTier.put_file: copy_file_range, fsync, rename, then the configured
    verification) vs ``cp`` + ``sync -f``, copying the same rank file; the source is in the
    page cache for both, as right after a local write. The same rounds also time the same
    drain verified by size only: ``drain_verify_cost`` is what reading the copy back for its
    CRC32C adds."""
    import time

    from emulator.checkpoint.drainer import Drainer
    from emulator.checkpoint.layout import FileEntry
    from emulator.checkpoint.loop import LoopThread
    from tiers.directory import DirTier
    cfg, state = make_state(params)
    local, global_ = DirTier(wd / "local"), DirTier(wd / "global")
    key = "step_00000001/rank00000.pt"
    nbytes, crc = save_rank_file(state, local, key, 1)
    del state  # free 2x rank size: the drain needs only the file
    src = local.local_path(key)
    entry = FileEntry(key, 0, nbytes, crc)
    loop = LoopThread("bench-drain")
    cp_dest = wd / "global" / "cp.bin"
    warm_file(src)

    def drain_with(verify: str):
        drainer = Drainer(local, global_, concurrency=cfg.drain.concurrency, verify=verify)

        def timed(i):
            t = time.perf_counter()
            res = loop.run(drainer.drain([entry]))
            dt = time.perf_counter() - t
            if not res.ok:
                raise RuntimeError(f"drain failed: {res.error}")
            loop.run(global_.delete(key))
            return dt
        return timed

    def cp(i):
        dt = baselines.cp_sync(src, cp_dest)
        remove(cp_dest)
        return dt

    sides = {"ours": drain_with(cfg.drain.verify), "size": drain_with("size"), "cp": cp}
    try:
        rounds = run_rounds(params, sides, before=lambda _: os.sync())
    finally:
        loop.close()
    return {"drain_dir": _drain_vs_cp(cfg, [(r["ours"], r["cp"]) for r in rounds], nbytes),
            "drain_verify_cost": _verify_cost(cfg, [(r["ours"], r["size"]) for r in rounds], nbytes)}


def _drain_vs_cp(cfg, pairs, nbytes: int) -> dict:
    return result(
        **throughput_samples(pairs, nbytes),
        unit="GiB/s", target=0.95, better=HIGHER,  # issue 58
        ratio_is="throughput ours/baseline (= cp+sync time / our time, same file)",
        ours_is=f"Drainer.drain (concurrency {cfg.drain.concurrency}, verify {cfg.drain.verify}) "
                "DirTier -> DirTier: copy_file_range, fsync, rename, fsync dir",
        baseline_is="cp SRC DST && sync -f DST", bytes=nbytes, source="in page cache (just written)")


def _verify_cost(cfg, pairs, nbytes: int) -> dict:
    """Drain time with the default (checksum) verification over the same drain verified by size:
    no target, a measured cost (the read-back of a copy just written comes from the page cache)."""
    return result(
        ratio_samples=[o / s for o, s in pairs], ours_samples=[o for o, _ in pairs],
        base_samples=[s for _, s in pairs], unit="s", target=None, better=LOWER,
        ratio_is="drain time verify checksum / verify size (same rounds, same file)",
        ours_is=f"Drainer.drain, verify {cfg.drain.verify}: the copy read back, its CRC32C compared "
                "with the local write's",
        baseline_is="Drainer.drain, verify size: the copy's size compared only", bytes=nbytes,
        source="in page cache (just written)")


# --------------------------------------------------------------------------- drain to S3

def _s3_sides(loop, tier, boto, src: Path, nbytes: int):
    """One upload of the object by our tier and by boto3's upload_file, each deleted after."""
    import time

    def ours(i):
        key = f"ours-{i}.bin"
        t = time.perf_counter()
        loop.run(tier.put_file(key, src))
        dt = time.perf_counter() - t
        size = loop.run(tier.size(key))
        assert size == nbytes, (size, nbytes)
        boto.delete(key)
        return dt

    def base(i):
        key = f"boto3-{i}.bin"
        dt = boto.upload(src, key)
        boto.delete(key)
        return dt
    return ours, base


def bench_drain_s3(params: Params, wd: Path) -> dict:
    """S3Tier.put_file with the product's default tier settings vs boto3's upload_file
    with its best TransferConfig, same moto server (fresh, own process), same object; then on
    the same server the restore from S3 vs boto3's download_fileobj (``restore_s3``,
    bench/s3_restore.py)."""
    from emulator.checkpoint.loop import LoopThread
    from tiers.base import TierScope
    from tiers.s3 import S3Tier

    from .motoserver import MotoServer, use_test_credentials
    from .s3_restore import restore_vs_download
    use_test_credentials()
    nbytes = params.s3_mib * MIB
    src = wd / "object.bin"
    with open(src, "wb") as fh:
        fh.write(os.urandom(nbytes))
    with MotoServer(wd / "moto.log") as server:
        boto = baselines.Boto3Upload(server.url, "bench")
        boto.client.create_bucket(Bucket="bench")
        # 16 MiB parts: the object moves as a real multipart upload (3 parts at the default 48 MiB)
        tier = S3Tier.from_options(S3Tier.Options(bucket="bench", endpoint_url=server.url, part_size_mib=16),
                                   scope=TierScope())
        loop = LoopThread("bench-s3")
        try:
            boto.tune(src, "tune.bin", quick=params.quick)
            ours, base = _s3_sides(loop, tier, boto, src, nbytes)
            pairs = run_pairs(params, ours, base)
            moto_rss = server.rss_bytes()
        finally:
            loop.run(tier.close())
            loop.close()
        remove(src)
        restore = restore_vs_download(params, server.url, boto, "moto (own process, 127.0.0.1)")
    return {"restore_s3": restore, "drain_s3": result(
        **throughput_samples(pairs, nbytes),
        unit="GiB/s", target=0.9, better=HIGHER,
        ratio_is="throughput ours/baseline (= upload_file time / our time, same object)",
        ours_is=f"S3Tier.put_file, default tier config (part_size_mib={tier.part_size // MIB}, "
                f"max_concurrency={tier.max_concurrency}, CRC32C per request)",
        baseline_is=f"boto3 upload_file, best TransferConfig: {boto.label}",
        bytes=nbytes, transfer_config_search=boto.search, moto_rss_bytes=moto_rss,
        server="moto (own process, 127.0.0.1)")}


# --------------------------------------------------------------------------- load

def bench_load(params: Params, wd: Path) -> dict:
    """Restorer.load (list, manifest, CRC32C-verified read, live state restored) of a
    complete local checkpoint vs dd reading the same file, each after dropping the page
    cache when that is permitted (checked with mincore), else both warm."""
    from emulator.checkpoint.restore import Restorer
    from emulator.rank.comm import SoloComm
    cfg, state = make_state(params)
    ck, local, _ = make_checkpointer(cfg, state, wd)
    try:
        rec = ck.checkpoint(1, "sync")
        if not rec.global_complete:
            raise RuntimeError(f"setup checkpoint failed: {rec.error}")
        path = next((wd / "local").rglob("*_states.pt"))
        nbytes = path.stat().st_size
        restorer = Restorer(state, [("local", local)], SoloComm(), loop=ck.loop)
        dropping, how = (False, "not asked (--no-drop-cache)")
        if params.drop_cache:
            dropping, how = probe_drop_cache(wd)

        def before(_):
            if dropping:
                drop_page_cache()
            else:
                warm_file(path)

        pairs = run_pairs(params, timed_restore(restorer, nbytes), lambda i: baselines.dd_read(path), before=before)
    finally:
        ck.close()
    cache = "cold (page cache dropped before each read)" if dropping else "warm vs warm (page cache NOT dropped)"
    return {"load": result(
        **throughput_samples(pairs, nbytes),
        unit="GiB/s", target=0.9, better=HIGHER,
        ratio_is="throughput ours/baseline (= dd time / our time, same file)",
        ours_is="Restorer.load from the local DirTier: list steps, read the manifest, read the rank file "
                "with its CRC32C verified, restore the live state",
        baseline_is="dd if=F of=/dev/null bs=64M", bytes=nbytes, cache=cache, drop_cache=how)}


# --------------------------------------------------------------------------- async stall

BENCHES = {
    "local_write": bench_local_write,
    "drain_dir": bench_drain_dir,
    "drain_s3": bench_drain_s3,
    "load": bench_load,
}


def clean(wd: Path) -> None:
    shutil.rmtree(wd, ignore_errors=True)
