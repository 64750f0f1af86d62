"""A real S3 server for the tests: a single-node Ceph RGW on 127.0.0.1, started by scripts/rgw-server.sh.

``rgw_server`` starts one per test session in a temporary folder and stops exactly its daemons at the
end; ``rgw_bucket`` gives each test a fresh bucket. The S3 tests do not use these directly: the
``s3_server`` fixture in s3server.py runs each of them against moto and against this server (one RGW
for the session: it takes 8-11 s to start). Where ``CKPT_EMU_TEST_RGW`` names the folder of a cluster
already running (``.ci/test`` starts one for all its parts and workers), the session attaches to it
and leaves it running: every test makes its own bucket, so the workers share one server safely. Where
the Ceph packages are missing (``apt-get install --no-install-recommends ceph-mon ceph-osd radosgw
ceph-common``, as .ci/test does), every RGW case is skipped with that reason, never passed.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from paths import ROOT
from s3server import aws_environment, make_bucket, raw_client

SCRIPT = ROOT / "scripts" / "rgw-server.sh"
COMMANDS = ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "ceph", "monmaptool")
PACKAGES = "ceph-mon ceph-osd radosgw ceph-common"
USER = "ckpt-emu"  # the user the script creates
SHARED = "CKPT_EMU_TEST_RGW"  # the folder of a running cluster the session attaches to (.ci/test)


@dataclass
class RgwServer:
    folder: Path
    endpoint: str
    access_key: str
    secret_key: str

    def allow_keys(self, access_key: str, secret_key: str) -> None:
        """Give the user a second key pair (tests that need recognisable credentials of their own)."""
        subprocess.run(["radosgw-admin", "-c", str(self.folder / "ceph.conf"), "-n", "client.admin",
                        "key", "create", "--uid", USER, "--key-type", "s3",
                        "--access-key", access_key, "--secret-key", secret_key],
                       check=True, capture_output=True, timeout=60)

    def stop(self) -> None:
        """Stop the daemons, then free the OSD's data (its sparse file fills up to 8 GiB of disk as
        bluestore writes fresh extents; pytest keeps old temporary folders). Logs stay."""
        subprocess.run(["bash", str(SCRIPT), "stop", str(self.folder)], check=True, timeout=120)
        shutil.rmtree(self.folder / "osd", ignore_errors=True)


def missing_commands() -> list[str]:
    return [c for c in COMMANDS if shutil.which(c) is None]


def start_rgw(folder: Path) -> RgwServer:
    """Start a cluster in ``folder`` through the script; raises with the script's own error line."""
    proc = subprocess.run(["bash", str(SCRIPT), "start", str(folder)], capture_output=True, text=True,
                          timeout=300)
    if proc.returncode != 0:
        subprocess.run(["bash", str(SCRIPT), "stop", str(folder)], timeout=120)
        raise RuntimeError(f"scripts/rgw-server.sh start failed: {proc.stderr.strip()}")
    values = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    return RgwServer(folder, values["endpoint"], values["access_key"], values["secret_key"])


def attach_rgw(folder: Path) -> RgwServer:
    """The cluster that ``scripts/rgw-server.sh start`` left running in ``folder`` (its ``env`` file)."""
    values = dict(line.split("=", 1) for line in (folder / "env").read_text().splitlines() if "=" in line)
    return RgwServer(folder, values["endpoint"], values["access_key"], values["secret_key"])


@pytest.fixture(scope="session")
def rgw_server(tmp_path_factory):
    """A Ceph RGW shared by the whole session (conftest.py imports this fixture, so every module gets
    the same one), its credentials in the environment; stopped at the end, also when tests fail. The
    cluster in ``$CKPT_EMU_TEST_RGW`` instead, where set: attached to, left running for its owner.
    Skipped, with the reason, where the Ceph packages are missing."""
    missing = missing_commands()
    if missing:
        pytest.skip(f"no Ceph RGW here: {', '.join(missing)} missing (apt-get install {PACKAGES})")
    if os.environ.get(SHARED):
        server = attach_rgw(Path(os.environ[SHARED]))
        with aws_environment(server.access_key, server.secret_key):
            raw_client(server.endpoint).list_buckets()  # it answers, with these keys
            yield server
        return
    server = start_rgw(tmp_path_factory.mktemp("rgw"))
    try:
        with aws_environment(server.access_key, server.secret_key):
            yield server
    finally:
        server.stop()


@pytest.fixture
def rgw_bucket(rgw_server):
    """A fresh, empty bucket on the session's RGW."""
    return make_bucket(rgw_server.endpoint)
