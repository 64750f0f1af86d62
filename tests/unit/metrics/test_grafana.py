"""The Grafana dashboard and the Prometheus files in grafana/: static checks, promtool,
and the real check: a short real emulator run scraped by a real Prometheus, where
every dashboard query and every recording rule must return data."""
from __future__ import annotations

import importlib.util
import json
import re
import signal
import subprocess
import sys
import time

import pytest
import yaml
from emu import results, small_config
from prom import ROOT, finite, free_port, http_get, prometheus, require  # noqa: F401 - fixture

from emulator.job.outdir import STOP as STOP_FILE
from dashboards import DASHBOARD, GRAFANA, RULES, dashboard, multi_level, promtool, recording_rules, substitute, targets


# --------------------------------------------------------------------------- static

def test_generated_dashboard_is_committed():
    if sys.version_info < (3, 11):
        pytest.skip("grafana/generate.py needs grafana-foundation-sdk, which needs Python 3.11")
    spec = importlib.util.spec_from_file_location("grafana_generate", GRAFANA / "generate.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert DASHBOARD.read_text() == gen.render(), "run: python grafana/generate.py"


def test_dashboard_sanity():
    d = dashboard()
    assert "__inputs" not in d and "__requires" not in d
    assert d["schemaVersion"] >= 39 and d["uid"] and d["title"]
    variables = {v["name"]: v for v in d["templating"]["list"]}
    ds = variables["datasource"]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    assert variables["job"]["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    assert d["panels"], "no panels"
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    for p in d["panels"]:
        assert p["type"] == "timeseries", p["title"]
        assert p.get("description", "").strip(), f"{p['title']}: no description"
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == "${datasource}", (p["title"], t)
            assert t["expr"].strip() and t["refId"]
            assert 'job=~"$job"' in t["expr"] or "ckpt_emu:" in t["expr"], t["expr"]
    # the panels the issue asks for
    titles = " | ".join(p["title"].lower() for p in d["panels"])
    for words in ("stall p50 / p99", "overhead: sync", "overhead: async", "drain overlap", "throughput per tier",
                  "backlog and deadline misses", "age of newest durable checkpoint", "gib/s"):
        assert words in titles, words
    overlap = next(p for p in d["panels"] if "overlap" in p["title"].lower())
    steps = overlap["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert any(s["value"] == 0.1 for s in steps)
    assert overlap["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] != "off"
    exprs = [t["expr"] for _, t in targets(d)]
    assert any("ckpt_emu:overhead:ratio" in e for e in exprs)
    assert any("histogram_quantile(0.99, sum by (le, mode)" in e and "stall_seconds_bucket" in e for e in exprs)


def test_provisioning_files():
    ds = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "ckpt-emu.yaml").read_text())
    assert ds["apiVersion"] == 1 and ds["datasources"][0]["type"] == "prometheus"
    dash = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "ckpt-emu.yaml").read_text())
    provider = dash["providers"][0]
    assert provider["type"] == "file" and provider["options"]["path"]
    prom = yaml.safe_load((GRAFANA / "prometheus.yml").read_text())
    assert prom["rule_files"] == ["rules/ckpt-emu-rules.yml"]
    assert "127.0.0.1:9400" in prom["scrape_configs"][0]["static_configs"][0]["targets"]


def test_promtool_check_config_and_rules():
    r = promtool("check", "config", str(GRAFANA / "prometheus.yml"))
    assert r.returncode == 0, r.stdout + r.stderr
    r = promtool("check", "rules", str(RULES))
    assert r.returncode == 0, r.stdout + r.stderr


def test_promtool_test_rules():
    r = promtool("test", "rules", str(GRAFANA / "rules" / "ckpt-emu-rules.test.yml"))
    assert r.returncode == 0, r.stdout + r.stderr


def test_rule_unit_tests_cover_every_rule():
    tests = yaml.safe_load((GRAFANA / "rules" / "ckpt-emu-rules.test.yml").read_text())["tests"]
    alerts = [r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]
    fired, quiet = set(), set()
    for t in tests:
        for a in t.get("alert_rule_test", []):
            (fired if a["exp_alerts"] else quiet).add(a["alertname"])
    assert set(alerts) <= fired and set(alerts) <= quiet, (alerts, fired, quiet)
    tested = {e["expr"] for t in tests for e in t.get("promql_expr_test", [])}
    assert {r["record"] for r in recording_rules()} <= tested


# --------------------------------------------------------------------------- the real check

def test_live_run_feeds_every_panel_and_rule(tmp_path, prometheus):
    """A real 2-rank run (sync then async, a checkpoint every ~1 s) scraped every second:
    every panel query and every recording rule returns data while it runs."""
    port = free_port()
    cfg = small_config(tmp_path, ranks=2, training={"step_seconds": 0.25},
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
