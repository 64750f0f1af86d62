"""The shipped Grafana dashboard and Prometheus rules (grafana/), read as Grafana and promtool would:
each panel's queries with Grafana's variables filled in, the recording rules, promtool itself.
"""
from __future__ import annotations

import json
import re
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
#: What only a soak feeds (sampled after its checkpoints: emulator/rank/soak.py): test_soak_live.py
#: proves those panels on a soak, the runs of the other live tests leave them out.
SOAK_ONLY = ("ckpt_emu_resident_bytes", "ckpt_emu_tier_files")


#: Families a panel or a rule queries that stay absent until there is something true to say,
#: and why (a 0 there would be a false statement; docs/metrics-and-dashboards.md).
ABSENT_UNTIL_MEASURED = {
    "ckpt_emu_last_complete_checkpoint_timestamp_seconds": "0 is a checkpoint in 1970; the age rule counts from the start instead",
    "ckpt_emu_throughput_bytes_per_second": "no save or load yet: 0 B/s would be a measurement that was not made",
    "ckpt_emu_slowdown_ratio": "measured at a mode's checkpoints: 0 would claim checkpointing is free",
    "ckpt_emu_last_lost_work_seconds": "set by a recovery: 0 would claim a failure that lost nothing",
    "ckpt_emu_resident_bytes": "sampled after a soak's checkpoints: 0 would be memory nobody measured",
    "ckpt_emu_tier_files": "sampled after a soak's checkpoints: 0 would claim an empty tier",
}


def queried_names() -> set[str]:
    """Every ckpt_emu_ series name a dashboard panel or a Prometheus rule reads."""
    text = DASHBOARD.read_text() + "".join(p.read_text() for p in (GRAFANA / "rules").glob("*-rules.yml"))
    return set(re.findall(r"\bckpt_emu_[a-z0-9_]+", text))


def multi_level(expr: str) -> bool:
    return any(name in expr for name in MULTI_LEVEL) and not soak_only(expr)


def soak_only(expr: str) -> bool:
    return any(name in expr for name in SOAK_ONLY)


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
