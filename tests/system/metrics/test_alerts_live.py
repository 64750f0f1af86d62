"""The shipped Prometheus config and rules, run as a user would, on a healthy run and a broken one.

grafana/prometheus.yml scrapes every 15 s and evaluates every 15 s. A healthy run checkpointing
every second must never fire CkptEmuNoDurableCheckpoint (it did: the age was computed at
evaluation time from a sample up to a scrape interval old, against a threshold of 3 seconds);
a run whose global tier stops taking checkpoints must fire it. Both runs go at once, each under
its own scrape job, for about two and a half minutes (the alert waits 1 minute before firing).

Whether the old rule misfired depended on where Prometheus placed its evaluations between a
target's scrapes (a fixed offset, from hashes of the job and target): here one run in three did.
So the healthy run is scraped by four jobs, each with its own offset: all four are very unlikely
to land where the old rule stayed quiet.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pytest
from emu import free_port, small_config
from prom import ROOT, Prometheus, shipped_config

pytestmark = pytest.mark.large

HEALTHY_JOBS = [f"healthy-{i}" for i in range(1, 5)]


def alert(job: str = "") -> str:
    where = f',job=~"{job}"' if job else ""
    return f'ALERTS{{alertname="CkptEmuNoDurableCheckpoint",alertstate="firing"{where}}}'
RUN_S = 150


def _run(tmp_path, name: str, port: int, **sections) -> subprocess.Popen:
    cfg = small_config(tmp_path / name, ranks=2, training={"step_seconds": 0.25},  # a checkpoint every 1 s
                       checkpoint={"interval_steps": 4, "modes": ["async"], "loads": 0}, **sections)
    return subprocess.Popen([sys.executable, "-m", "emulator.cli", "run", str(cfg), "--quiet",
                             "--metrics-port", str(port), "--duration", f"{RUN_S}s"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_no_durable_checkpoint_alert_with_the_shipped_config(tmp_path):
    ports = {"healthy": free_port(), "broken": free_port()}
    for name in (*ports, "prom"):
        (tmp_path / name).mkdir()
    jobs = {name: [f"127.0.0.1:{ports['healthy']}"] for name in HEALTHY_JOBS} | {"broken": [f"127.0.0.1:{ports['broken']}"]}
    prom = Prometheus(tmp_path / "prom", config=shipped_config(jobs))
    runs = {}
    try:
        started = time.time()
        runs["healthy"] = _run(tmp_path, "healthy", ports["healthy"])
        runs["broken"] = _run(tmp_path, "broken", ports["broken"],
                              drain={"retries": 0, "on_failure": "continue"},
                              failures={"global_fault": {"checkpoint": 3, "seconds": 3600, "kind": "error"}})
        fired_at = None
        while any(r.poll() is None for r in runs.values()):
            assert not prom.query(alert("healthy-.*")), "a healthy run fired the alert"
            if fired_at is None and prom.query(alert("broken")):
                fired_at = time.time() - started
            time.sleep(5)
        for name, r in runs.items():
            out, err = r.communicate()
            assert r.returncode == 0, (name, err)
        history = prom.query_range(alert(), started, time.time(), 5)
        assert {s["metric"]["job"] for s in history} == {"broken"}, history  # never any healthy-N
        assert fired_at is not None
    finally:
        for r in runs.values():
            if r.poll() is None:
                r.kill()
        prom.close()
        shutil.rmtree(tmp_path / "prom", ignore_errors=True)
