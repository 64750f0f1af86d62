"""A real run writes every file of its own through the one safe reach and write (issue 54): the CLI,
torchrun's agent and every rank run under the write audit (tests/support/writeaudit.py, installed
in each process by its sitecustomize), over the results folder and the tiers; a write there that
tiers/safepath.py or tiers/fileops.py did not make is a line in the audit's log.

What libraries write by themselves is allowed only in the private working folders the CLI made for
them (mode 0700, never another user's): torchrun's logs in ``.torchrun`` and Prometheus' files in
``.metrics``."""
from __future__ import annotations

import subprocess
import sys

from emu import results, small_config
from writeaudit import child_env

#: the working folders a library writes in by itself (emulator/job/outdir.py), made 0700 by the CLI
LIBRARY_FOLDERS = ("/.torchrun/", "/.metrics/")


def test_a_run_writes_only_through_the_safe_modules_in_every_process(tmp_path):
    cfg = small_config(tmp_path, run={"timeline": True}, checkpoint={"saves": 2, "loads": 1})
    log = tmp_path / "audit.log"
    proc = subprocess.run([sys.executable, "-m", "emulator.cli", "run", str(cfg), "--quiet"],
                          capture_output=True, text=True, timeout=400,
                          env=child_env(log, tmp_path / "out", tmp_path / "local", tmp_path / "global"))
    assert proc.returncode == 0, proc.stderr
    res = results(tmp_path / "out")
    assert res["load"]["ok"] and {p.name for p in (tmp_path / "out").iterdir()} >= {
        "results.json", "report.txt", "timeline.png", "config.json", "torchrun.log"}
    lines = log.read_text().splitlines() if log.exists() else []
    stray = [line for line in lines if not any(folder in line.split(" ", 2)[2].split(" by ")[0] + "/"
                                               for folder in LIBRARY_FOLDERS)]
    assert not stray, "\n".join(stray)
