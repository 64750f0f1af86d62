"""A run whose stderr is a file (nohup, CI) says it is alive: a soak of 60 s writes a progress line
about every 10 s, with the share done and an ETA (tests/unit/launch/test_progress.py: the display itself)."""
from __future__ import annotations

import re
import subprocess
import sys

from emu import small_config

LINE = re.compile(r"^ckpt-emu: \[\s*(\d+)%\] .*; elapsed \S+, ETA \S+$")


def test_a_60_second_soak_logs_at_least_5_progress_lines(tmp_path):
    cfg = small_config(tmp_path, training={"step_seconds": 0.25}, checkpoint={"interval_steps": 8, "loads": 1})
    log = tmp_path / "stderr.log"
    with open(log, "w") as err:
        proc = subprocess.run([sys.executable, "-m", "emulator.cli", "run", str(cfg), "--duration", "60s"],
                              stdout=subprocess.PIPE, stderr=err, text=True, timeout=400)
    assert proc.returncode == 0, log.read_text()
    lines = [m for m in map(LINE.match, log.read_text().splitlines()) if m]
    assert len(lines) >= 5, log.read_text()
    shares = [int(m.group(1)) for m in lines]
    # lines keep coming to the end: the last within one line's step of it (not a fixed share: how much
    # of the run a 10 s step covers depends on how fast this machine runs it)
    assert shares == sorted(shares) and shares[-1] + max(b - a for a, b in zip(shares, shares[1:])) >= 98, shares
