"""A real S3 server (moto) on 127.0.0.1 for the tests, started once per test session.

Import the fixtures into a test module (``from s3server import s3_endpoint,
s3_bucket  # noqa: F401``). The server speaks HTTP on a free port, so boto3
goes through its whole network stack exactly as against AWS or MinIO; each
test gets a fresh bucket. moto keeps objects in memory, so tests keep objects
to tens of MiB.
"""
from __future__ import annotations

import logging
import os
import uuid

import pytest

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


@pytest.fixture(scope="session")
def s3_endpoint():
    """URL of a moto S3 server shared by the session, with test credentials in the environment."""
    saved = {k: os.environ.get(k) for k in (*TEST_ENV, *CLEARED_ENV)}
    os.environ.update(TEST_ENV)
    for k in CLEARED_ENV:
        os.environ.pop(k, None)
    server, url = start_moto_server()
    try:
        yield url
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


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
