"""A soak: ``ckpt-emu run --duration`` with a checkpoint every 0.2 s, watched from outside.

Memory must stay flat (each rank's RSS, sampled from /proc, shows no upward
trend beyond a small tolerance once warmed up) and disk bounded (each tier
never holds more than keep + 1 checkpoints: the kept ones and the one in
flight). 20 s in CI; CKPT_EMU_SOAK_SECONDS=3600 makes it an hour, with the
same assertions.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from crashcheck import rank_pids, verify_dir_tier
from emu import results, small_config

SOAK_S = float(os.environ.get("CKPT_EMU_SOAK_SECONDS", "20"))
MIB = 1 << 20


def _rss(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _tier_bytes(root: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            try:
                total += os.stat(os.path.join(dirpath, name)).st_size
            except FileNotFoundError:  # deleted by retention while we walked
                pass
    return total


def _slope(points: list[tuple[float, int]]) -> float:
    """Least-squares bytes per second."""
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    return sum((t - mt) * (v - mv) for t, v in points) / var if var else 0.0


def test_soak_memory_flat_and_disk_bounded(tmp_path):
    keep = 2
    cfg_path = small_config(tmp_path, training={"step_seconds": 0.1},
                            checkpoint={"interval_steps": 2, "loads": 1, "keep": keep})
    proc = subprocess.Popen([sys.executable, "-m", "emulator.cli", "run", str(cfg_path), "--quiet",
                             "--duration", f"{SOAK_S:g}s"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    period = max(0.25, SOAK_S / 400)
    rss: dict[int, list[tuple[float, int]]] = {}
    disk = {"local": 0, "global": 0}
    status = tmp_path / "out" / "status.json"
    t0 = None
    while proc.poll() is None:
        if t0 is None and status.exists():
            t0 = time.time()  # training (and checkpointing) has begun
        if t0 is not None and time.time() - t0 < SOAK_S:  # not the loads at the end
            for pid in rank_pids(proc.pid):
                value = _rss(pid)
                if value:
                    rss.setdefault(pid, []).append((time.time() - t0, value))
        disk["local"] = max(disk["local"], _tier_bytes(tmp_path / "local"))
        disk["global"] = max(disk["global"], _tier_bytes(tmp_path / "global"))
        time.sleep(period)
    out, err = proc.communicate()
    assert proc.returncode == 0, err
    res = results(tmp_path / "out")
    checkpoints = sum(m["checkpoints"] for m in res["modes"].values())
    assert checkpoints >= SOAK_S / 2, res["modes"]  # at least one every 2 s, both modes
    assert all(m["incomplete"] == 0 for m in res["modes"].values())

    # memory: after warm-up (the first third), no trend beyond max(16 MiB, 3 %) over the soak
    assert len(rss) == 2, rss.keys()
    for pid, points in rss.items():
        warm = [p for p in points if p[0] >= SOAK_S / 3]
        assert len(warm) >= 10, len(warm)
        base = sorted(v for _, v in warm)[len(warm) // 2]
        growth = _slope(warm) * (warm[-1][0] - warm[0][0])
        tolerance = max(16 * MIB, 0.03 * base)
        print(f"rank pid {pid}: RSS median {base / MIB:.0f} MiB, trend {growth / MIB:+.1f} MiB over the soak")
        assert growth < tolerance, f"rank pid {pid}: RSS grew {growth / MIB:.1f} MiB (median {base / MIB:.0f} MiB)"
        assert max(v for _, v in warm) - base < 2 * tolerance

    # disk: never more than keep + 1 checkpoints per tier
    ckpt_bytes = max(sum(f.stat().st_size for f in d.glob("*.pt")) for d in (tmp_path / "global").glob("step_*"))
    for name in ("local", "global"):
        assert disk[name] <= (keep + 1) * ckpt_bytes + 64 * 1024, (name, disk[name], ckpt_bytes)
    assert len(verify_dir_tier(tmp_path / "global")) == keep
