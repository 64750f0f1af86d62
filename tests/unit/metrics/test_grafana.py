"""The Grafana dashboard and the Prometheus files in grafana/: static checks, promtool,
and the real check: a short real emulator run scraped by a real Prometheus, where
every dashboard query and every recording rule must return data."""
from __future__ import annotations

import importlib.util
import sys

import pytest
import yaml
from prom import ROOT, finite, free_port, http_get, prometheus, require  # noqa: F401 - fixture

from dashboards import DASHBOARD, GRAFANA, RULES, dashboard, promtool, recording_rules, targets


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
                  "backlog and deadline misses", "age of newest durable checkpoint", "throughput at full size"):
        assert words in titles, words
    overlap = next(p for p in d["panels"] if "overlap" in p["title"].lower())
    steps = overlap["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert any(s["value"] == 0.1 for s in steps)
    assert overlap["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] != "off"
    exprs = [t["expr"] for _, t in targets(d)]
    assert any("ckpt_emu:overhead:ratio" in e for e in exprs)
    assert any("histogram_quantile(0.99, sum by (le, mode)" in e and "stall_seconds_bucket" in e for e in exprs)


#: Grafana's byte units, by family: what the dashboard may use (decimal, the family the shipped designs
#: are written in) and what it may not (binary)
DECIMAL_BYTE_UNITS = {"decbytes", "Bps", "decKBs", "MBs", "GBs"}
BINARY_BYTE_UNITS = {"bytes", "binBps", "kbytes", "mbytes", "gbytes", "KiBs", "MiBs", "GiBs", "TiBs"}


def test_every_byte_figure_is_decimal_and_every_duration_served_as_is():
    """One unit family (decimal in, decimal out) and the design's figures as served: no panel divides a
    byte figure by a binary unit or a duration by the time factor (the series are full size already);
    only the wall clock's derivations (a rate, an age) meet the time factor."""
    units = {}
    for p in dashboard()["panels"]:
        units[p["title"]] = p["fieldConfig"]["defaults"]["unit"]
        for o in p["fieldConfig"].get("overrides", []):
            units[p["title"] + " (override)"] = next(
                (x["value"] for x in o["properties"] if x["id"] == "unit"), None)
    assert not {u for u in units.values() if u in BINARY_BYTE_UNITS}, units
    assert {u for u in units.values() if u in DECIMAL_BYTE_UNITS} >= {"decbytes", "Bps"}
    for _, t in targets(dashboard()):
        expr = t["expr"]
        assert "1073741824" not in expr and "/ 1e9" not in expr, expr
        if "time_factor" in expr:
            assert "rate(" in expr or "timestamp(" in expr, expr


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
