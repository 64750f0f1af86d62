"""Two trials of the kill campaign (``python -m bench.crash``; 100 trials outside CI): kill the CLI,
torchrun or a rank at random instants, rerun in the same place, verify. Seed 4 kills the CLI, then
a rank: the two kinds of victim the three trials of seed 3 killed (the CLI twice), at a trial less."""
from __future__ import annotations

import json
import subprocess
import sys
from paths import ROOT



def test_a_few_kills_lose_nothing(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bench.crash", "--trials", "2", "--seed", "4", "--json",
                           "--workdir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    report = json.loads(proc.stdout)
    assert proc.returncode == 0, json.dumps(report["trials"], indent=1)
    s = report["summary"]
    assert (s["torn_or_wrong"], s["orphaned_runs"], s["rerun_failures"]) == (0, 0, 0)
    assert [r["victim"] for r in report["trials"]] == ["cli", "rank"]  # both kills happened
