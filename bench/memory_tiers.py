"""The memory tiers (issue 24): a save into host memory, and the peer tier's transport.

``memory_save``: the pipeline's own write of one rank's file
(``save_rank_file``: torch.save through the CRC32C sink) into a DirTier on
/dev/shm that recycles its files as the memory tier does (the file deleted by
the previous round's retention is taken from the pool and copied into through
the shared mapping the tier keeps of it; the warm-up round allocates the file,
the first kept round maps it: that round is the max, about 3x), against the
floor of any save into host memory: one memcpy (glibc's memmove) of the same staged
tensors into a preallocated, already touched buffer. Ours also computes CRC32C over every byte,
in the same thread: in the same pass as the copy where ``tiers._copycrc`` is built
(``fused_copy``), else each 512 KiB piece right after it is copied; the memcpy does not.
Both run in one thread, so the CPU-time ratio (``cpu_ratio``, process CPU
seconds) says the same as the wall one; it is reported to show no other
thread does hidden work. Each round also times, for the notes: the same save
into a new file (``fresh_save_s``, before recycling), a bare write of the
tensors into a new file (``tmpfs_write_s``: page allocation alone keeps it
well above a memcpy) and over a kept one (``tmpfs_reused_write_s``: write()
into existing tmpfs pages, about 2x a memcpy), and CRC32C alone over the
bytes from memory (``crc_s``), so the ratio's parts can be told apart, and torch's
``copy_`` of the same bytes (``torch_copy_s``). That one stores through the cache (each line
is read before it is written) and is the slower memcpy here; glibc's, like ours, streams
large copies past the cache, so it is the floor.

``memory_rss``: a real ``ckpt-emu run`` (one rank, a memory tier on /dev/shm,
keep 1): the rank's peak RSS plus the most the memory tier held against state
+ staging + the keep + 1 tier copies, with and without the process's import
floor (as ``peak_rss``).

``peer_send``: one rank's file sent to the rank that holds its copy
(``PeerTransport.send_replicas``, gloo over loopback, CRC32C checked and
published on the receiver), against a loopback TCP stream of the same file
between the same two processes (read the file in 64 MiB chunks, ``sendall``;
``recv_into``, write a file on /dev/shm, one byte back when all is written).
Both ends on /dev/shm, so the ratio is the transport's, not a disk's.
"""
from __future__ import annotations

import asyncio
import ctypes
import json
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path

import crc32c

from .benches import make_state, save_rank_file, throughput_samples, _state_note
from .common import GIB, HIGHER, LOWER, MIB, Params, median, remove, result, run_pairs, run_rounds

SHM = Path("/dev/shm")
CHUNK = 64 * MIB


def bench_memory_tiers(params: Params, wd: Path) -> dict:
    shm = Path(tempfile.mkdtemp(prefix="ckpt-emu-bench-", dir=SHM if SHM.is_dir() else wd))
    try:
        return {**memory_save(params, shm), **peer_send(params, shm, wd), **memory_rss(params, shm, wd)}
    finally:
        shutil.rmtree(shm, ignore_errors=True)


# --------------------------------------------------------------------------- memory_save

def memory_save(params: Params, shm: Path) -> dict:
    import torch

    from tiers.copycrc import FUSED
    from tiers.directory import DirTier
    cfg, state = make_state(params)
    tier = DirTier(shm / "memory", recycle=True)  # as the memory tier is built (emulator/job/rank_tiers.py)
    fresh = DirTier(shm / "fresh")
    nbytes, _ = save_rank_file(state, fresh, "probe.pt", 0)  # untimed: the file's size
    remove(fresh.local_path("probe.pt"))
    tensors = [t.reshape(-1).view(torch.uint8) for t in state.tensors("staging")]
    floor = torch.zeros(sum(t.numel() for t in tensors), dtype=torch.uint8)  # touched: no page faults
    reused = shm / "memory" / "reused.bin"

    def save(target, i, drop):
        key = f"step_{i:08d}/rank.pt"
        t, c = time.perf_counter(), time.process_time()
        n, _ = save_rank_file(state, target, key, i)
        dt, dc = time.perf_counter() - t, time.process_time() - c
        assert n == nbytes, (n, nbytes)
        drop(target, key)
        return dt, dc

    def ours(i):  # retention's delete gives the file to the pool, the next save takes it (warm-up: allocates)
        return save(tier, i, lambda t, key: asyncio.run(t.delete(key)))

    def fresh_save(i):  # the same save into a new file every time (before recycling)
        return save(fresh, i, lambda t, key: remove(t.local_path(key)))[0]

    def memcpy(i):  # glibc's: it streams large copies past the cache, as ours does
        t, c, off = time.perf_counter(), time.process_time(), 0
        for src in tensors:
            ctypes.memmove(floor.data_ptr() + off, src.data_ptr(), src.numel())
            off += src.numel()
        return time.perf_counter() - t, time.process_time() - c

    def torch_copy(i):  # a note: torch's copy_ stores through the cache (slower here, so not the floor)
        t, off = time.perf_counter(), 0
        for src in tensors:
            floor[off:off + src.numel()].copy_(src)
            off += src.numel()
        return time.perf_counter() - t

    def tmpfs(i):  # not the baseline: what any new file on /dev/shm costs, fresh pages and all
        path = shm / "fresh" / "floor.bin"
        dt = _write_tensors(path, tensors, "wb")
        remove(path)
        return dt

    def tmpfs_reused(i):  # the same bytes over a file whose pages are already there (kept)
        return _write_tensors(reused, tensors, "r+b" if reused.exists() else "wb")

    def crc(i):  # the checksum alone over the same bytes (save_rank_file computes it in its thread)
        t, c = time.perf_counter(), 0
        for src in tensors:
            c = crc32c.crc32c(memoryview(src.numpy()), c)
        return time.perf_counter() - t

    crc_how = "in the copy's pass (tiers._copycrc)" if FUSED else "per 512 KiB piece after its copy"
    rounds = run_rounds(params, {"ours": ours, "memcpy": memcpy, "torch_copy": torch_copy, "fresh": fresh_save, "tmpfs": tmpfs,
                                 "tmpfs_reused": tmpfs_reused, "crc": crc})
    wall = [{k: v[0] if k in ("ours", "memcpy") else v for k, v in r.items()} for r in rounds]
    cpu = [r["ours"][1] / r["memcpy"][1] for r in rounds]
    rounds = wall
    return {"memory_save": result(
        ratio_samples=[r["ours"] / r["memcpy"] for r in rounds], ours_samples=[r["ours"] for r in rounds],
        base_samples=[r["memcpy"] for r in rounds], unit="s", target=1.2, better=LOWER,
        ratio_is="time ours/memcpy (same bytes: the staged tensors)",
        ours_is=f"save_rank_file: torch.save -> ChecksumSink(CRC32C, same thread: {crc_how}) -> DirTier "
                f"sink (recycle: a pooled file copied into through the tier's kept shared mapping) on "
                f"{tier.describe()}: fsync, rename, fsync dir",
        baseline_is="glibc memmove (ctypes) of every staged tensor into one preallocated, touched buffer (no CRC)",
        cpu_ratio=median(cpu), cpu_ratio_samples=cpu, fused_copy=FUSED,
        torch_copy_s=median(r["torch_copy"] for r in rounds),
        ratio_vs_torch_copy=median(r["ours"] / r["torch_copy"] for r in rounds),
        fresh_save_s=median(r["fresh"] for r in rounds),
        ratio_fresh_save=median(r["fresh"] / r["memcpy"] for r in rounds),
        tmpfs_write_s=median(r["tmpfs"] for r in rounds),
        ratio_vs_tmpfs_write=median(r["ours"] / r["tmpfs"] for r in rounds),
        tmpfs_reused_write_s=median(r["tmpfs_reused"] for r in rounds),
        ratio_tmpfs_reused_write=median(r["tmpfs_reused"] / r["memcpy"] for r in rounds),
        crc_s=median(r["crc"] for r in rounds), ratio_crc=median(r["crc"] / r["memcpy"] for r in rounds),
        bytes=nbytes, memcpy_bytes=floor.numel(), **_state_note(cfg, state))}


def _write_tensors(path: Path, tensors, mode: str) -> float:
    """Seconds to write the tensors' bytes to ``path`` from offset 0 (unbuffered)."""
    from tiers.fileops import write_all
    t = time.perf_counter()
    with open(path, mode, buffering=0) as fh:
        for src in tensors:
            write_all(fh.fileno(), memoryview(src.numpy()))
    return time.perf_counter() - t


# --------------------------------------------------------------------------- memory_rss

def memory_rss(params: Params, shm: Path, wd: Path) -> dict:
    """A real run (one rank, a memory tier on /dev/shm, keep 1): the rank's peak RSS plus the most
    the memory tier held, against state + staging + the keep + 1 tier copies the design puts there."""
    from .realrun import import_floor_bytes, rank_scale, run_ckpt_emu
    scale = rank_scale(params.rank_gib)
    saves = 2 if params.quick else 3
    results, sampler = run_ckpt_emu(wd / "rss", [
        "parallelism.subset=false", "parallelism.ranks=1", f"run.scale={scale!r}", "training.compute=sleep",
        f"training.step_seconds={0.2 / scale!r}", "checkpoint.interval_steps=2", f"checkpoint.saves={saves}",
        "checkpoint.loads=1", "checkpoint.modes=[sync,async]", "checkpoint.keep=1", "checkpoint.baseline=false",
        "tiers.memory.backend=dir", f"tiers.memory.path={shm / 'rss' / 'node{node}'}"])
    ranks = sampler.ranks()
    if 0 not in ranks:
        raise RuntimeError("the sampler never saw the rank process")
    hwm = max(m[1].get("VmHWM", 0) for m in ranks[0]["mem"])
    mapped = results["per_rank"][0].get("mapped_tier_peak_bytes", 0)  # the tier's pages, in VmHWM too
    hm = results["host_memory"]
    used, expected, floor = hwm - mapped + hm["tier_peak_bytes"], hm["expected_bytes"], import_floor_bytes()
    return {"memory_rss": result(
        ratio_samples=[used / expected], ours_samples=[used / GIB], base_samples=[expected / GIB],
        unit="GiB", target=1.1, better=LOWER,
        ratio_is=f"(rank peak RSS + most the memory tier held) / (state + staging + {hm['tier_copies']} "
                 "tier copies)",
        ours_is="VmHWM of the rank process over a ckpt-emu run (sync, async, a load; memory tier on /dev/shm, "
                "keep 1, recycling), less the tier pages it kept mapped (counted as the tier's), + the memory "
                "tier's peak bytes (results.json host_memory)",
        baseline_is="state x 2 (live + staging) + (keep + 1) x the rank's file",
        state_bytes=results["bytes"]["run_actual_state"], rank_peak_rss_bytes=hwm, mapped_tier_peak_bytes=mapped,
        tier_peak_bytes=hm["tier_peak_bytes"], tier_copies=hm["tier_copies"], expected_bytes=expected,
        report_ratio=hm["ratio"], import_floor_bytes=floor, ratio_without_floor=(used - floor) / expected)}


# --------------------------------------------------------------------------- peer_send

def peer_send(params: Params, shm: Path, wd: Path) -> dict:
    import torch.multiprocessing as mp
    nbytes = max(MIB, int(params.rank_gib * GIB) // MIB * MIB)
    out = wd / "peer_send.json"
    mp.start_processes(_peer_process, args=(str(shm / "peer"), str(wd), nbytes, params.to_json(), str(out)),
                       nprocs=2, start_method="spawn")
    got = json.loads(out.read_text())
    pairs = list(zip(got["ours"], got["tcp"]))
    return {"peer_send": result(
        **throughput_samples(pairs, nbytes), unit="GiB/s", target=0.9, better=HIGHER,  # issue 58
        ratio_is="throughput ours/TCP (= TCP time / our time, same file, same two processes)",
        ours_is=f"PeerTransport.send_replicas, 2 nodes x 1 rank, replicas 1: gloo isend/irecv on loopback in "
                f"{CHUNK // MIB} MiB chunks, CRC32C on receipt, DirTier sink on /dev/shm (fsync, rename)",
        baseline_is=f"loopback TCP socket: readinto {CHUNK // MIB} MiB + sendall; recv_into + write to a file "
                    "on /dev/shm; a 1-byte ack",
        bytes=nbytes, chunk=CHUNK)}


def _peer_process(rank: int, root: str, wd: str, nbytes: int, params_json: str, out: str) -> None:
    """One of the two processes: rank 0 (node 0) sends, rank 1 (node 1) receives."""
    import torch.distributed as dist

    from emulator.checkpoint.layout import FileEntry
    from emulator.checkpoint.peer import PeerTransport
    from emulator.checkpoint.placement import PeerLayout
    from tiers.directory import DirTier
    params = Params.from_json(params_json)
    dist.init_process_group("gloo", init_method=f"file://{wd}/peer_store", rank=rank, world_size=2)
    src, dst = DirTier(Path(root) / "src"), DirTier(Path(root) / "dst")
    entries = [_source_file(src, nbytes)] if rank == 0 else []
    files = [FileEntry(k, 0, n, crc) for k, n, crc in entries]
    transport, layout = PeerTransport(ranks_per_node=1, chunk=CHUNK), PeerLayout(2, 1, "jump", 1)
    conn = _tcp_pair(rank)

    def ours(i):
        dist.barrier()
        t = time.perf_counter()
        res = transport.send_replicas(layout, files, src, dst)
        dt = time.perf_counter() - t
        res.raise_for_errors()
        if rank == 1:
            (got,) = res.received
            assert got.size == nbytes
            remove(dst.local_path(got.key))
        return dt

    def tcp(i):
        dist.barrier()
        t = time.perf_counter()
        if rank == 0:
            _tcp_send(conn, src.local_path(files[0].key))
        else:
            _tcp_recv(conn, Path(root) / "tcp.bin", nbytes)
        dt = time.perf_counter() - t
        remove(Path(root) / "tcp.bin")
        return dt

    pairs = run_pairs(params, ours, tcp)
    if rank == 0:
        Path(out).write_text(json.dumps({"ours": [o for o, _ in pairs], "tcp": [b for _, b in pairs]}))
    conn.close()
    dist.barrier()
    dist.destroy_process_group()


def _source_file(tier, nbytes: int) -> tuple[str, int, str]:
    """Rank 0's file of ``nbytes`` incompressible bytes; (key, size, crc32c)."""
    import crc32c
    key, crc = "step_00000000/rank00000.pt", 0
    with tier.open_write(key) as sink:
        for off in range(0, nbytes, CHUNK):
            block = os.urandom(min(CHUNK, nbytes - off))
            crc = crc32c.crc32c(block, crc)
            sink.write(block)
    return key, nbytes, f"{crc:08x}"


def _tcp_pair(rank: int) -> socket.socket:
    """A loopback TCP connection between the two ranks (rank 0 listens, the port by broadcast)."""
    import torch.distributed as dist
    if rank == 0:
        server = socket.create_server(("127.0.0.1", 0))
        box = [server.getsockname()[1]]
        dist.broadcast_object_list(box, src=0)
        conn, _ = server.accept()
        server.close()
        return conn
    box = [None]
    dist.broadcast_object_list(box, src=0)
    return socket.create_connection(("127.0.0.1", box[0]))


def _tcp_send(conn: socket.socket, path: Path) -> None:
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as fh:
        while n := fh.readinto(view):
            conn.sendall(view[:n])
    if conn.recv(1) != b"k":
        raise RuntimeError("the TCP receiver did not acknowledge")


def _tcp_recv(conn: socket.socket, path: Path, nbytes: int) -> None:
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    with open(path, "wb", buffering=0) as fh:
        left = nbytes
        while left:
            n = conn.recv_into(view, min(CHUNK, left))
            if not n:
                raise RuntimeError("the TCP sender closed early")
            fh.write(view[:n])
            left -= n
    conn.sendall(b"k")
