"""A soak (``ckpt-emu run --soak``) as a proof of concept runs one, against the shipped rules: async
checkpoints only, a local-tier loss every few checkpoints that the run survives, each recovery
measured, reported and served, the restore as long as the planner says, and what must stay flat
flat.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from dashboards import dashboard, substitute
from emu import ckpt_emu, free_port, results, small_config
from prom import ROOT, finite, prometheus  # noqa: F401 - a fixture
from schemas import assert_valid

from emulator.launch.progress import run_fraction

#: the live test's paced design (test_grafana_live.py): k = 0.01, a step of 25 s at full size 0.25 s here
DESIGN = {"node": {"local": {"write": "7GB/s", "read": "7GB/s"}, "nic": "400Gb/s"},
          "global": {"write": "2GB/s", "read": "4GB/s"}}
SOAK_S, EVERY = 40, 3


def test_a_soak_survives_a_local_loss_every_few_checkpoints_and_serves_each_recovery(tmp_path, prometheus):
    port = free_port()
    cfg = small_config(tmp_path, ranks=2, training={"step_seconds": 0.25 / 20}, run={"dilation": 20},
                       checkpoint={"interval_steps": 8, "loads": 1, "keep": 1}, design=DESIGN)
    prometheus.set_targets([f"127.0.0.1:{port}"])
    started = time.time()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "emulator.cli", "run", str(cfg), "--quiet", "--soak", f"{SOAK_S}s",
                                 "--lose-local-after", str(EVERY), "--metrics-port", str(port)],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        shown = _progress_while(proc, tmp_path / "out" / "progress.json")
        out, err = proc.communicate(timeout=400)
        time.sleep(3)  # the last rule evaluation
    finally:
        prometheus.set_targets([])
    assert proc.returncode == 0, out[-3000:] + err
    # the progress the CLI shows is the soak's: it never goes back at a recovery (it went back to 0 %
    # of the time left after each, its ETA from there: "4:06 of 16:30, 25 %, ETA 53:25" 17 min into 30)
    assert len(shown) >= 10 and all(b >= a - 0.02 for a, b in zip(shown, shown[1:])), shown
    assert shown[-1] >= 0.9, shown
    res = results(tmp_path / "out")
    assert_valid("results", res)
    assert list(res["modes"]) == ["async"] and res["baseline"] is None  # async alone
    span = res["modes"]["async"]
    assert span["mode_wall_s"] >= SOAK_S * 0.97, span["mode_wall_s"]  # ran to its end, failures and all
    soak, checkpoints = res["soak"], res["modes"]["async"]["checkpoints"]
    recoveries = soak["recoveries"]
    # one after every EVERY-th checkpoint (but one due as the soak ended)
    assert 2 <= checkpoints // EVERY - 1 <= recoveries["count"] <= checkpoints // EVERY, (checkpoints, recoveries)
    assert recoveries["ok"] and all(e["served_by"] == ["global"] for e in recoveries["events"])  # node 0 from global
    assert res["levels"]["global"]["complete"] == res["levels"]["global"]["due"] == checkpoints
    # each recovery served, and the soak's panels fed
    count = prometheus.query_range("sum(ckpt_emu_recovery_seconds_count)", started, time.time(), 1.0)
    assert max(float(v) for _, v in count[0]["values"]) == recoveries["count"]
    for p in dashboard()["panels"]:
        if p["title"].startswith("Soak:") or p["title"].startswith("Recovery time"):
            for t in p["targets"]:
                expr = substitute(t["expr"].replace("$window", "10m"))
                assert finite(prometheus.query_range(expr, started, time.time(), 1.0)), (p["title"], expr)
    # the restore after a node's NVMe is lost: node 0 reads global storage alone, as the planner has it
    plan = json.loads(ckpt_emu("plan", tmp_path / "run.yaml", "--json", check=True).stdout)
    assert recoveries["p50_s"] == pytest.approx(plan["classes"]["node"]["restore_s"], rel=0.15)
    # flat: the files of each tier at rest (their floor) and the resident memory, the soak's first tenth once
    # warm against its last (the global tier is never lost: exactly flat; the local one is emptied by each
    # loss, so its last samples may fall before it refilled: it must not grow past the 5 %, a leak's sign)
    assert soak["files"]["global"]["growth"] == 0 and soak["files"]["local"]["growth"] <= 0.05, soak["files"]
    assert soak["rss_bytes"]["growth"] < 0.05, soak["rss_bytes"]
    assert "soak:" in out and "recoveries:" in out


def _progress_while(proc, path) -> list[float]:
    """The fraction done the CLI shows from the run's progress file, sampled while ``proc`` runs."""
    shown = []
    while proc.poll() is None:
        try:
            p = json.loads(path.read_text())
        except (OSError, ValueError):
            p = {}
        if p.get("budget_s"):
            shown.append(run_fraction(p))
        time.sleep(0.2)
    return shown
