"""A fresh moto S3 server on 127.0.0.1 in its own process, one per benchmark.

Its own process, so the server's request handling does not share the
benchmark's GIL (our path and boto3 would otherwise be timed against a server
competing with them for one interpreter); fresh per benchmark because moto
keeps every uploaded byte in memory, and keeps much of it after a delete.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

TEST_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": os.devnull,  # keep a developer's ~/.aws out of it
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}
CLEARED_ENV = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def use_test_credentials() -> None:
    """Point boto3's credential chain at moto's dummy credentials (this process only)."""
    os.environ.update(TEST_ENV)
    for k in CLEARED_ENV:
        os.environ.pop(k, None)


class MotoServer:
    def __init__(self, log_path=None):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = open(log_path, "wb") if log_path else subprocess.DEVNULL
        env = dict(os.environ, **TEST_ENV)
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=self._log, stderr=subprocess.STDOUT, env=env)
        self._wait_ready()

    def _wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto server exited with status {self.proc.returncode}")
            try:
                urllib.request.urlopen(self.url + "/", timeout=1).read()
                return
            except urllib.error.HTTPError:  # it answers: ready
                return
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"moto server did not answer on {self.url} within {timeout:.0f} s")

    def rss_bytes(self) -> int:
        from .common import proc_status
        st = proc_status(self.proc.pid) or {}
        return st.get("VmRSS", 0)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not subprocess.DEVNULL:
            self._log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False
