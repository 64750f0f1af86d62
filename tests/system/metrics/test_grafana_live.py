"""The shipped dashboard and rules against a real Prometheus scraping real runs: every panel and rule has
data.
"""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

from dashboards import (
    dashboard,
    multi_level,
    promtool,
    recording_rules,
    substitute,
    targets,
)
from emu import results, small_config
from prom import ROOT, finite, free_port, http_get, prometheus, require  # noqa: F401 - fixture

from emulator.job.outdir import STOP as STOP_FILE


def test_live_run_feeds_every_panel_and_rule(tmp_path, prometheus):
    """A real 2-rank run (sync then async, a checkpoint every ~1 s) scraped every second:
    every panel query and every recording rule returns data while it runs."""
    port = free_port()
    cfg = small_config(tmp_path, ranks=2, training={"step_seconds": 0.25}, run={"timeline": True},
                       checkpoint={"interval_steps": 4, "modes": ["sync", "async"], "loads": 1, "keep": 2,
                                   "baseline": True})
    out = tmp_path / "out"
    queries = {f"panel {p['title']!r} {t['refId']}": substitute(t["expr"]) for p, t in targets(dashboard())}
    queries.update({f"rule {r['record']}": r["record"] for r in recording_rules()})
    queries = {name: q for name, q in queries.items() if not multi_level(q) and not multi_level(name)}

    prometheus.set_targets([f"127.0.0.1:{port}"])
    started = time.time()
    log = open(tmp_path / "cli.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "emulator.cli", "run", str(cfg), "--quiet",
                             "--metrics-port", str(port), "--duration", "25s"],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    pending, live_text, ended = dict(queries), None, None
    stop = out / STOP_FILE
    try:
        deadline = time.monotonic() + 150
        while pending or live_text is None:
            assert time.monotonic() < deadline, f"no data in time for: {sorted(pending)}"
            if proc.poll() is not None:
                ended = ended or time.monotonic()
                if time.monotonic() - ended > 3:  # a last scrape and rule evaluation
                    break
            if live_text is None:
                try:
                    text = http_get(f"http://127.0.0.1:{port}/metrics", timeout=2)
                    # once every family is there: a drain finished and a checkpoint is complete
                    if 'phase="drain"' in text and "ckpt_emu_last_complete_checkpoint_timestamp_seconds{" in text:
                        live_text = text
                except OSError:
                    pass
            for name, expr in list(pending.items()):
                if finite(prometheus.query(expr)):
                    del pending[name]
            if not pending and live_text is not None and proc.poll() is None and not stop.exists():
                stop.touch()  # what Ctrl-C does: finish the step, write the report, exit 0
            time.sleep(1.0)
        rc = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()
        prometheus.set_targets([])
    cli_log = (tmp_path / "cli.log").read_text()
    assert rc == 0, cli_log
    # Whatever the 1 s polls missed (data between two polls, or in the run's last seconds)
    # is still in Prometheus: evaluate the rest over the run's span.
    for name, expr in list(pending.items()):
        if finite(prometheus.query_range(expr, started, time.time(), 1.0)):
            del pending[name]
    assert not pending, f"no data for: {json.dumps(pending, indent=1)}\n{cli_log}"

    assert live_text is not None, "the live endpoint never showed a finished drain"
    r = promtool("check", "metrics", input=live_text)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not re.search(r'[{,]step="', live_text)
    info = prometheus.query_range('ckpt_emu_info{job="ckpt-emu"}', started, time.time())
    assert info and info[0]["metric"]["ranks"] == "2" and info[0]["metric"]["modes"] == "sync,async"

    # the run's own timeline picture, and one drawn again from its results.json
    res = results(out)
    assert set(res["timeline"]) == {"none", "sync", "async"} and all(res["timeline"].values())
    from timeline_picture import assert_png_shows_kinds
    assert_png_shows_kinds(out / "timeline.png")


def test_live_levels_run_feeds_the_tier_and_recovery_panels(tmp_path, prometheus):
    """A real run with levels (host memory every checkpoint, NVMe every 2nd, global every 4th)
    that loses its node after the 8th checkpoint and recovers from global: every per-tier and
    per-class panel query and recording rule returns data over the run's span."""
    import shutil
    import uuid
    shm = f"/dev/shm/ckpt-emu-test-{uuid.uuid4().hex[:8]}"
    port = free_port()
    cfg = small_config(tmp_path, ranks=2, training={"step_seconds": 0.2},
                       checkpoint={"interval_steps": 2, "saves": 8, "modes": ["async"], "loads": 1},
                       tiers={"memory": {"backend": "dir", "path": shm + "/node{node}"},
                              "local": {"interval_steps": 4}, "global": {"interval_steps": 8}})
    queries = {f"panel {p['title']!r} {t['refId']}": substitute(t["expr"]) for p, t in targets(dashboard())}
    queries.update({f"rule {r['record']}": r["record"] for r in recording_rules()})
    queries = {name: q for name, q in queries.items() if multi_level(q) or multi_level(name)}
    assert len(queries) >= 6
    prometheus.set_targets([f"127.0.0.1:{port}"])
    started = time.time()
    try:
        proc = subprocess.run([sys.executable, "-m", "emulator.cli", "run", str(cfg), "--quiet",
                               "--metrics-port", str(port), "--lose-nodes", "8:0"],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
        time.sleep(3)  # the last rule evaluation
    finally:
        prometheus.set_targets([])
        shutil.rmtree(shm, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr
    assert results(tmp_path / "out")["recoveries"][0]["class"] == "node"
    pending = {name: q for name, q in queries.items()
               if not finite(prometheus.query_range(q, started, time.time(), 1.0))}
    assert not pending, f"no data for: {json.dumps(pending, indent=1)}"
