"""The tier and recovery metrics against a real Prometheus with the shipped config: every tier panel and
rule has data, a stale tier fires its alert.
"""
from __future__ import annotations

import re
import shutil
import threading
import time

import pytest
from dashboards import dashboard, multi_level, recording_rules, substitute, targets
from prom import Prometheus, finite, prometheus, shipped_config  # noqa: F401 - fixture
from prometheus_client import CollectorRegistry, start_http_server

from emulator import metrics as M
from emulator.fullsize import DesignClock
from emulator.metrics import Metrics

EVERY = {"memory": 1, "peer": 2, "local": 4, "global": 8}  # which checkpoints reach each tier


RECOVERY = {"process": (2.0, 0.25), "node": (20.0, 0.5), "group": (120.0, 2.0)}  # seconds, lost work


class Feed:
    """One run's Metrics on its own registry and HTTP endpoint, fed from a thread as a multi-level
    async run would: a checkpoint every ``step`` seconds, every EVERY[tier]-th of them complete on
    the tier a little later; a recovery of each class every ``recover_every`` checkpoints (0: none).
    ``stop`` = (tier, seconds): that tier's newest checkpoint stops advancing after that long;
    ``every``: tiers reached by another share of the checkpoints than EVERY's."""

    def __init__(self, step: float, *, stop: tuple | None = None, recover_every: int = 0, every: dict | None = None):
        self.reg = CollectorRegistry()
        self.m = Metrics(self.reg)
        self.step, self.stop_tier, self.recover_every = step, stop, recover_every
        self.every = EVERY | (every or {})
        httpd, thread = start_http_server(0, addr="127.0.0.1", registry=self.reg)
        self.server = M.NodeServer(httpd, thread)
        self.target = f"127.0.0.1:{self.server.port}"
        self._halt = threading.Event()
        self.m.set_tiers(local="dir", global_="s3")
        self.m.set_clock(DesignClock())  # as a run does at start: the rules turn wall-clock ages into the design's
        self.m.set_interval("async", step)
        for tier, every in self.every.items():
            self.m.set_tier_interval(tier, every * step)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        start, n = time.monotonic(), 0
        while not self._halt.wait(self.step):
            n += 1
            for tier, every in self.every.items():
                stopped = self.stop_tier and tier == self.stop_tier[0] and time.monotonic() - start > self.stop_tier[1]
                if n % every == 0 and not stopped:
                    lag = 0.05 * every * self.step
                    self.m.observe_tier_lag(tier, lag)
                    if tier == "global":
                        self.m.observe_durability_lag("async", lag)
                    self.m.checkpoint_complete(tier, n, time.time())
            self.m.observe_phase("replicate", "peer", 0.01, backend="memory")
            if self.recover_every and n % self.recover_every == 0:
                for cls, (seconds, lost) in RECOVERY.items():
                    self.m.observe_recovery(cls, seconds, lost)

    def close(self):
        self._halt.set()
        self._thread.join(timeout=10)
        self.server.close()
        self.m.close()


def tier_queries() -> dict[str, str]:
    """Every dashboard query and recording rule of multi-level checkpointing, and the per-tier age panel."""
    queries = {f"panel {p['title']!r} {t['refId']}": substitute(t["expr"]) for p, t in targets(dashboard())
               if multi_level(t["expr"]) or p["title"].startswith("Age of newest durable checkpoint")}
    queries.update({f"rule {r['record']}": r["record"] for r in recording_rules()
                    if multi_level(r["record"]) or "global_interval" in r["record"]})
    return queries


def test_every_tier_panel_and_rule_has_data_for_every_tier_and_class(prometheus):
    """A healthy hand-fed run scraped every second: each multi-level panel query and rule returns
    data, for all four tiers or all three failure classes where it is split by them."""
    queries = tier_queries()
    assert len(queries) >= 10, sorted(queries)
    feed = Feed(0.25, recover_every=4)
    prometheus.set_targets([feed.target])
    pending, deadline = dict(queries), time.monotonic() + 90
    try:
        while pending:
            assert time.monotonic() < deadline, f"no full data in time for: {sorted(pending)}"
            for name, expr in list(pending.items()):
                result = prometheus.query(expr)
                if finite(result) and covers(expr, result):
                    del pending[name]
            time.sleep(1.0)
    finally:
        prometheus.set_targets([])
        feed.close()


def covers(expr: str, result: list) -> bool:
    """A query split by tier must show every tier; one split by failure class, every class."""
    split = "tier" if expr.startswith("ckpt_emu:tier_") else (re.findall(r"by \((?:le, )?(\w+)\)", expr) or [None])[0]
    wanted = {"tier": M.TIERS, "failure_class": M.FAILURE_CLASSES}.get(split)
    return wanted is None or {s["metric"].get(split) for s in result} == set(wanted)


STALE = "CkptEmuTierCheckpointStale"


NO_DURABLE = "CkptEmuNoDurableCheckpoint"


def firing(prom: Prometheus, alertname: str, start: float) -> set[tuple[str, str]]:
    """(job, tier) of every firing of the alert since start."""
    history = prom.query_range(f'ALERTS{{alertname="{alertname}",alertstate="firing"}}', start, time.time(), 5)
    return {(s["metric"]["job"], s["metric"].get("tier", "")) for s in history}


@pytest.mark.large
def test_a_stale_tier_fires_its_own_alert_with_the_shipped_config(tmp_path):
    """grafana/prometheus.yml as a user runs it (15 s scrapes and evaluations) over five hand-fed
    runs checkpointing every second: a healthy one, and one per tier whose newest checkpoint there
    stops advancing after 20 s. Each broken run fires for its own tier only (the global tier's
    alert is CkptEmuNoDurableCheckpoint); the healthy run never fires either alert, though its
    global tier gets every 80th checkpoint only: for more than the alert's minute after each one,
    its age is above three checkpoint intervals (what the global alert counted before it read
    the global tier's own interval)."""
    feeds = {"healthy": Feed(1.0, every={"global": 80})} | {f"broken-{tier}": Feed(1.0, stop=(tier, 20.0)) for tier in M.TIERS}
    prom = Prometheus(tmp_path, config=shipped_config({job: [f.target] for job, f in feeds.items()}))
    started = time.time()
    expected = {STALE: {(f"broken-{t}", t) for t in ("memory", "peer", "local")}, NO_DURABLE: {("broken-global", "")}}
    try:
        deadline = time.monotonic() + 240
        while any(firing(prom, name, started) != want for name, want in expected.items()):
            for name, want in expected.items():
                assert firing(prom, name, started) <= want, (name, firing(prom, name, started))
            assert time.monotonic() < deadline, {name: firing(prom, name, started) for name in expected}
            time.sleep(5)
    finally:
        prom.close()
        for f in feeds.values():
            f.close()
        shutil.rmtree(tmp_path / "data", ignore_errors=True)
