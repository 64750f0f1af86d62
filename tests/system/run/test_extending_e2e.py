"""The example backend of docs/extending.md in a real run."""
from __future__ import annotations

import os
import subprocess
import sys

from emu import results, small_config
from paths import SUPPORT as TESTS


def test_the_example_backend_in_a_real_run(tmp_path):
    """Drains to it, completes checkpoints on it, restores from it after the local tier is lost."""
    cfg = small_config(tmp_path, checkpoint={"saves": 2, "loads": 1},
                       failures={"lose_local_after": 3},
                       tiers={"local": {"backend": "dir", "path": str(tmp_path / "local" / "node{node}")},
                              "global": {"backend": "example_backend:FlatDirTier", "folder": str(tmp_path / "flat")}})
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", "emulator.cli", "run", str(cfg), "--quiet"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    res = results(tmp_path / "out")
    assert res["tiers"]["global"] == f"flatdir:{tmp_path / 'flat'}"
    assert res["modes"]["sync"]["incomplete"] == 0
    assert res["load"]["ok"] and res["load"]["served_by"] == {"global": 2}
    assert any(name.endswith("manifest.json") for name in os.listdir(tmp_path / "flat"))
