"""The soak stack's compose file, checked by docker compose itself where it is installed."""
from __future__ import annotations

import shutil
import subprocess

import pytest
from paths import ROOT

GRAFANA = ROOT / "grafana"


COMPOSE = GRAFANA / "compose.yaml"


def test_docker_compose_accepts_it_where_installed():
    docker = shutil.which("docker")
    if not docker or subprocess.run([docker, "compose", "version"], capture_output=True).returncode != 0:
        pytest.skip("no docker compose plugin here (the schema check above still runs)")
    proc = subprocess.run([docker, "compose", "-f", str(COMPOSE), "config", "--quiet"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
