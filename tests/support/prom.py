"""A real Prometheus for the tests: started once per session, on 127.0.0.1, on a free port.

Use the ``prometheus`` fixture (import it into the test module: ``from prom import
prometheus``). It scrapes every second and evaluates the project's rules
(grafana/rules/ckpt-emu-rules.yml) every second. Targets come from a file
(``file_sd``), so a test points it at whatever it starts: ``prom.set_targets([...])``.
Prometheus applies target changes at most every 5 s, and the first scrape of a new
target comes 5-7 s after it is set: poll with a deadline (``wait_for``).
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from emu import free_port

from paths import ROOT
RULES = ROOT / "grafana" / "rules" / "ckpt-emu-rules.yml"
JOB = "ckpt-emu"


def require(tool: str) -> str:
    """The path of Prometheus' ``tool``. Where it is missing the test is skipped, with the reason,
    after a plain ``pip install`` (the quick tier passes there); under CI (``CI`` set), whose
    .ci/test installs it, it fails."""
    path = shutil.which(tool)
    if path is None:
        why = (f"{tool} not found: install the Debian package prometheus "
               "(apt-get install -y --no-install-recommends prometheus; bash .ci/test does)")
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return path




def http_get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode()


def finite(result: list) -> bool:
    """True when an API result (vector or matrix) holds at least one finite value."""
    for series in result:
        values = series.get("values") or ([series["value"]] if "value" in series else [])
        if any(math.isfinite(float(v)) for _, v in values):
            return True
    return False


SHIPPED_CONFIG = ROOT / "grafana" / "prometheus.yml"


def shipped_config(jobs: dict[str, list[str]]) -> dict:
    """grafana/prometheus.yml as a user runs it (its global settings and rule files), with the
    scrape job copied once per run under that run's name, pointed at its targets."""
    config = yaml.safe_load(SHIPPED_CONFIG.read_text())
    config["rule_files"] = [str((SHIPPED_CONFIG.parent / f).resolve()) for f in config["rule_files"]]
    (job,) = config["scrape_configs"]
    config["scrape_configs"] = [{**job, "job_name": name, "static_configs": [{"targets": targets}]}
                                for name, targets in jobs.items()]
    return config


class Prometheus:
    def __init__(self, workdir: Path, *, rule_files=(RULES,), interval: str = "1s", config: dict | None = None):
        self.binary = require("prometheus")
        self.workdir = Path(workdir)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.targets_file = self.workdir / "targets.json"
        self.set_targets([])
        config = config or {
            "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": [{"job_name": JOB, "file_sd_configs": [
                {"files": [str(self.targets_file)], "refresh_interval": "1s"}]}],
        }
        self.config = self.workdir / "prometheus.yml"
        self.config.write_text(yaml.safe_dump(config))
        self.log = self.workdir / "prometheus.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [self.binary, f"--config.file={self.config}", f"--storage.tsdb.path={self.workdir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._wait_ready(60)
        except BaseException:
            self.close()
            raise

    def _wait_ready(self, timeout: float):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                http_get(self.url + "/-/ready", timeout=2)
                return
            except (urllib.error.URLError, OSError):
                time.sleep(0.2)
        raise RuntimeError(f"prometheus not ready after {timeout} s:\n{self.log.read_text()[-3000:]}")

    def set_targets(self, targets: list[str]) -> None:
        """Replace the scrape targets (host:port); atomic, so Prometheus never reads half a file."""
        tmp = self.targets_file.with_suffix(".tmp")
        tmp.write_text(json.dumps([{"targets": list(targets)}] if targets else []))
        tmp.replace(self.targets_file)

    def api(self, path: str, **params) -> dict:
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        body = json.loads(http_get(url, timeout=10))
        if body.get("status") != "success":
            raise AssertionError(f"{path} {params}: {body}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return self.api("query", **params)["result"]

    def query_range(self, expr: str, start: float, end: float, step: float = 1.0) -> list:
        return self.api("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=str(step))["result"]

    def rules(self) -> list[dict]:
        return [r for g in self.api("rules")["groups"] for r in g["rules"]]

    def wait_for(self, expr: str, timeout: float, ok=finite) -> list:
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(expr)
            if ok(result):
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"no data for {expr!r} after {timeout} s")
            time.sleep(0.5)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


@pytest.fixture(scope="session")
def prometheus():
    workdir = Path(tempfile.mkdtemp(prefix="ckpt-emu-prom-"))
    prom = Prometheus(workdir)
    try:
        yield prom
    finally:
        prom.close()
        shutil.rmtree(workdir, ignore_errors=True)
