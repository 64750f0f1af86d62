"""Real S3 servers on 127.0.0.1 for the tests: every S3 test runs against moto and against Ceph RGW,
but whole runs (``ON_RGW``), which go to RGW alone.

Import the fixtures into a test module, ``s3_server`` included (``from s3server
import s3_bucket, s3_endpoint, s3_server  # noqa: F401``). ``s3_server`` is parametrized over ``SERVERS``, so
each test that uses it (through ``s3_endpoint`` or ``s3_bucket``) runs once per
server, each server started once per session. Both speak HTTP on a free port, so
boto3 goes through its whole network stack exactly as against AWS or MinIO; each
test gets a fresh bucket. moto keeps objects in memory, so tests keep objects
to tens of MiB. The RGW cases skip, with the reason, where Ceph is not installed
(rgwserver.py); a test that fails only on RGW is marked ``@pytest.mark.rgw_xfail(reason)``.
"""
from __future__ import annotations

import logging
import os
import uuid
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

SERVERS = ("moto", "rgw")

#: A whole run (the CLI, torchrun, the drain) against S3 goes to RGW alone: what the S3 tier asks of a
#: server is checked on both servers by the contract suite (test_tiers_s3.py, test_retries.py) and the
#: in-process tests beside it, and a run adds nothing that depends on which server answers
#: (docs/testing.md). ``@ON_RGW`` on a test, or in a module's ``pytestmark``.
ON_RGW = pytest.mark.parametrize("s3_server", ["rgw"], indirect=True)

TEST_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    # keep a developer's ~/.aws profile out of the tests
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}
CLEARED_ENV = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")


def start_moto_server():
    """Start moto's threaded server on a free port; returns (server, endpoint_url)."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no access log per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, f"http://{host}:{port}"


@contextmanager
def aws_environment(access_key: str, secret_key: str):
    """The test environment (these credentials, no profile, no endpoint from the environment),
    restored on exit."""
    saved = {k: os.environ.get(k) for k in (*TEST_ENV, *CLEARED_ENV)}
    os.environ.update(TEST_ENV, AWS_ACCESS_KEY_ID=access_key, AWS_SECRET_ACCESS_KEY=secret_key)
    for k in CLEARED_ENV:
        os.environ.pop(k, None)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def aws_env(monkeypatch):
    """The test credentials in the environment, with no server: for runs that must fail to reach one."""
    for k, v in TEST_ENV.items():
        monkeypatch.setenv(k, v)


@dataclass
class MotoServer:
    endpoint: str

    def allow_keys(self, access_key: str, secret_key: str) -> None:
        """moto accepts any credentials."""


@pytest.fixture(scope="session", params=SERVERS)
def s3_server(request):
    """A server of each kind (``.endpoint``, ``.allow_keys``), with test credentials for it in the
    environment. Each module that imports this fixture gets its own moto, freed when the module ends."""
    if request.param == "rgw":  # one for the whole session (rgwserver.py, imported by conftest.py)
        rgw = request.getfixturevalue("rgw_server")
        with aws_environment(rgw.access_key, rgw.secret_key):
            yield rgw
        return
    with aws_environment(TEST_ENV["AWS_ACCESS_KEY_ID"], TEST_ENV["AWS_SECRET_ACCESS_KEY"]):
        server, url = start_moto_server()
        try:
            yield MotoServer(url)
        finally:
            server.stop()


@pytest.fixture(scope="session")
def s3_endpoint(s3_server):
    """URL of the session's S3 server of the current kind."""
    return s3_server.endpoint


_clients: dict = {}


def raw_client(endpoint: str):
    """A plain boto3 client for the server (cached: creating one costs ~0.1 s)."""
    if endpoint not in _clients:
        import boto3

        _clients[endpoint] = boto3.session.Session().client("s3", endpoint_url=endpoint)
    return _clients[endpoint]


def make_bucket(endpoint: str) -> str:
    name = f"test-{uuid.uuid4().hex[:16]}"
    raw_client(endpoint).create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_bucket(s3_endpoint):
    """A fresh, empty bucket on the session's server."""
    return make_bucket(s3_endpoint)
