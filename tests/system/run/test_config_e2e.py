"""A config error in a real process: one line, no traceback."""
from __future__ import annotations

import subprocess
import sys


def test_no_traceback_from_real_process(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("checkpoint: {interval_steps: -1}\n")
    proc = subprocess.run([sys.executable, "-m", "emulator.cli", "run", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip() == "ckpt-emu: error: checkpoint.interval_steps: must be >= 1"
