"""scripts/rgw-server.sh: radosgw's port is picked seconds before radosgw binds it (the monitor and
the OSD start in between), and another process may take it first (a worker's RGW failed so beside
three other workers' servers): start picks another and says nothing."""
from __future__ import annotations

import socket
import subprocess
import urllib.request

import pytest
from planting import machine, plant_folder  # noqa: F401 - a fixture
from rgwserver import SCRIPT, missing_commands, start_rgw


@pytest.mark.skipif(bool(missing_commands()), reason="no Ceph RGW here")
def test_a_port_taken_before_radosgw_binds_it_is_picked_again(tmp_path, monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setenv("RGW_TRY_PORT", str(port))  # the first try's port: one in use
        server = start_rgw(tmp_path / "rgw")
        try:
            assert not server.endpoint.endswith(f":{port}"), server.endpoint
            urllib.request.urlopen(server.endpoint + "/", timeout=10).close()  # it answers
            # the first try took the port in use (radosgw may exit before its log says why: the script says so)
            retries = (tmp_path / "rgw" / "log" / "client.rgw.retries").read_text()
            assert f"127.0.0.1:{port} was taken" in retries, retries
        finally:
            server.stop()


@pytest.mark.skipif(bool(missing_commands()), reason="no Ceph RGW here")
def test_start_refuses_a_folder_another_user_made_first_and_writes_nothing_there(machine):
    """issue 54, 3: ``start DIR`` wrote ceph.conf, the keyring, pid files and logs as root into a DIR
    another user made first (empty, mode 0777: they could swap or edit what it wrote, and the daemons
    read that ceph.conf as root). Refused with one line; nothing is written or started."""
    shared, _ = machine
    plant_folder(shared / "rgw")
    proc = subprocess.run(["bash", str(SCRIPT), "start", str(shared / "rgw")], capture_output=True, text=True,
                          timeout=300)
    try:
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode != 0 and len(lines) == 1 and "belongs to another user (uid 65534)" in lines[0], \
            proc.stderr
        assert list((shared / "rgw").iterdir()) == [] and "endpoint=" not in proc.stdout
    finally:
        if (shared / "rgw" / "pids").exists():  # the old script started a cluster there: stop it
            subprocess.run(["bash", str(SCRIPT), "stop", str(shared / "rgw")], capture_output=True, timeout=120)
