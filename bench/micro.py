"""``python -m bench.micro``: the small measurements behind the design choices, re-taken on this machine.

Each line is one figure that a module's design relies on (docs/performance.md,
"Why the code looks like this"): random generation vs copying, fresh vs warm
pages, memmove vs torch's copy_, CRC32C vs MD5, a copy fused with its CRC32C
(at every destination offset), and the kernel's copy paths.
Medians of ``--repeats`` runs on ``--mib`` MiB; nothing here is asserted.
"""
from __future__ import annotations

import argparse
import ctypes
import hashlib
import os
import statistics
import tempfile
import time
from pathlib import Path

import crc32c
import torch

from tiers.copycrc import FUSED, copy_crc32c

MIB = 1 << 20
GIB = 1 << 30


def _median_rate(fn, nbytes: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return nbytes / statistics.median(times) / GIB


def figures(mib: int, repeats: int, workdir: Path) -> list[tuple[str, float]]:
    n = mib * MIB
    torch.set_num_threads(1)
    src = torch.randint(0, 256, (n,), dtype=torch.uint8)
    warm = torch.empty(n, dtype=torch.uint8)
    warm.copy_(src)
    out = [
        ("torch.randint, 1 thread (GiB/s)", _median_rate(lambda: torch.randint(0, 256, (n,), dtype=torch.uint8), n, repeats)),
        ("touch fresh pages: torch.empty + fill_ (GiB/s)", _median_rate(lambda: torch.empty(n, dtype=torch.uint8).fill_(1), n, repeats)),
        ("copy into warm buffers, torch copy_ (GiB/s)", _median_rate(lambda: warm.copy_(src), n, repeats)),
        ("copy into warm buffers, libc memmove (GiB/s)",
         _median_rate(lambda: ctypes.memmove(warm.data_ptr(), src.data_ptr(), n), n, repeats)),
        ("CRC32C, crc32c package (GiB/s)", _median_rate(lambda: crc32c.crc32c(memoryview(src.numpy())), n, repeats)),
        (f"copy with its CRC32C, tiers.copycrc ({'fused' if FUSED else 'two passes'}) (GiB/s)",
         _median_rate(lambda: copy_crc32c(warm.numpy(), 0, src.numpy(), 0), n, repeats)),
        ("MD5, hashlib (GiB/s)", _median_rate(lambda: hashlib.md5(memoryview(src.numpy())).digest(), n, repeats)),
    ]
    out += _alignment_sweep(src, warm, min(n, 32 * MIB), repeats)
    path = workdir / "src.bin"
    path.write_bytes(memoryview(src.numpy()))
    for name, method in (("copy_file_range", os.copy_file_range), ("sendfile", None)):
        out.append((f"file copy, cached source, {name} (GiB/s)",
                    _median_rate(lambda m=method: _copy(path, workdir / "dst.bin", m), n, repeats)))
    return out


def _alignment_sweep(src, warm, n: int, repeats: int) -> list[tuple[str, float]]:
    """tiers.copycrc against memmove with the destination at each multiple of 64 bytes past the
    source (mod 4096): a copy loop whose loads fall 64-192 bytes behind its own stores, mod 4096,
    can run 40x slower ("4K aliasing"), so the worst offset is the figure that matters."""
    base = src.data_ptr() % 4096
    ratios = []
    for delta in range(0, 4096, 64):
        at = (base + delta - warm.data_ptr()) % 4096
        dst = warm.numpy()[at:at + n]
        rate = _median_rate(lambda: copy_crc32c(dst, 0, src.numpy()[:n], 0), n, repeats)
        ratios.append(_median_rate(lambda: ctypes.memmove(dst.ctypes.data, src.data_ptr(), n), n, repeats) / rate)
    return [("copy with CRC32C / memmove, median over 64 offsets (x)", statistics.median(ratios)),
            ("copy with CRC32C / memmove, worst of 64 offsets (x)", max(ratios))]


def _copy(src: Path, dst: Path, method) -> None:
    with open(src, "rb") as s, open(dst, "wb") as d:
        size, done = os.fstat(s.fileno()).st_size, 0
        while done < size:
            if method is None:
                done += os.sendfile(d.fileno(), s.fileno(), None, size - done)
            else:
                done += method(s.fileno(), d.fileno(), size - done)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.micro", description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=256, help="bytes per measurement, MiB (default 256)")
    ap.add_argument("--repeats", type=int, default=5, help="runs per figure; the median is shown")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ckpt-emu-micro-") as tmp:
        for label, value in figures(args.mib, args.repeats, Path(tmp)):
            print(f"{label:<55} {value:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
