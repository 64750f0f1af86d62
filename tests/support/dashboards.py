"""The shipped Grafana dashboard and Prometheus rules (grafana/), read as Grafana and promtool would:
each panel's queries with Grafana's variables filled in, the recording rules, promtool itself.
"""
from __future__ import annotations

import json
import subprocess

import yaml
from prom import ROOT, require


GRAFANA = ROOT / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "ckpt-emu.json"
RULES = GRAFANA / "rules" / "ckpt-emu-rules.yml"


# What Grafana would put in for its variables, at a 1 s scrape interval.
SUBSTITUTIONS = {"$__rate_interval": "10s", "$__interval": "2s", "$__range": "30s", "$window": "10s",
                 "$job": ".+", "${job}": ".+"}


#: What a run feeds only with multi-level checkpointing and an injected failure (tier intervals
#: and lags, recoveries): test_live_levels_run_feeds_the_tier_and_recovery_panels proves them on a
#: real run with levels and a node loss, the plain run below leaves them out.
MULTI_LEVEL = ("ckpt_emu_tier_", "ckpt_emu_last_tier_", "ckpt_emu_recovery_", "ckpt_emu_last_lost_work_",
               "ckpt_emu:tier_")


def multi_level(expr: str) -> bool:
    return any(name in expr for name in MULTI_LEVEL)


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def targets(d: dict):
    for p in d["panels"]:
        for t in p.get("targets", []):
            yield p, t


def substitute(expr: str) -> str:
    for k in sorted(SUBSTITUTIONS, key=len, reverse=True):
        expr = expr.replace(k, SUBSTITUTIONS[k])
    assert "$" not in expr, f"unsubstituted variable in {expr!r}"
    return expr


def recording_rules() -> list[dict]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [r for g in groups for r in g["rules"] if "record" in r]


def promtool(*args, input=None) -> subprocess.CompletedProcess:
    return subprocess.run([require("promtool"), *args], capture_output=True, text=True, input=input, timeout=60)
