"""scripts/rgw-server.sh: radosgw's port is picked seconds before radosgw binds it (the monitor and
the OSD start in between), and another process may take it first (a worker's RGW failed so beside
three other workers' servers): start picks another and says nothing."""
from __future__ import annotations

import socket
import urllib.request

import pytest
from rgwserver import missing_commands, start_rgw


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
