"""Nodes that are really apart, as a proof of concept runs them (one agent per machine): each agent of
a 2-node job in a network namespace of its own, with its own address, joined to the other through a
bridge; the S3 store in a third. The rendezvous, the peer copies, the drains to the store and the
Prometheus scrape of both nodes go over those addresses, not loopback, and every listener of a node
binds the address it was given, and no other."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager

import pytest
from emu import results, small_config
from netns import Network, available
from prom import ROOT, free_port, prometheus  # noqa: F401 - a fixture
from s3server import CLEARED_ENV, TEST_ENV

NODES = ("n0", "n1")


@contextmanager
def moto_in(net: Network, name: str):
    """moto's S3 server inside namespace ``name``, on its address; yields its endpoint, a bucket made."""
    addr = net.addrs[name]
    code = ("import logging, sys; logging.getLogger('werkzeug').setLevel(logging.ERROR)\n"
            "from moto.server import ThreadedMotoServer\n"
            f"s = ThreadedMotoServer(ip_address='{addr}', port=0, verbose=False); s.start()\n"
            "print(s.get_host_and_port()[1], flush=True); sys.stdin.read()")
    server = net.popen(name, [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        endpoint = f"http://{addr}:{int(server.stdout.readline())}"
        import boto3
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                     aws_secret_access_key="testing").create_bucket(Bucket="ckpt")
        yield endpoint
    finally:
        server.kill()
        server.wait(timeout=30)


def _host(local: str) -> str:
    """The address part of ss's ``address:port`` (IPv6 in brackets, ``*`` for any)."""
    host = local.rpartition(":")[0]
    return host[1:-1] if host.startswith("[") else host


def test_a_two_node_job_with_a_namespace_per_node_talks_over_their_addresses_and_listens_on_them_only(
        tmp_path, prometheus):
    why = available()
    if why is not None:
        pytest.skip(why)
    shm = f"/dev/shm/ckpt-emu-test-{uuid.uuid4().hex[:8]}"
    port, rdzv = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k not in CLEARED_ENV and "proxy" not in k.lower()}
    env.update(TEST_ENV)
    try:
        with Network([*NODES, "store"]) as net, moto_in(net, "store") as endpoint:
            cfg = small_config(tmp_path, ranks=2, local=False, training={"step_seconds": 0.1},
                               checkpoint={"modes": ["async"], "saves": 4, "interval_steps": 2, "loads": 1},
                               tiers={"memory": {"backend": "dir", "path": shm + "/node{node}"},
                                      "peer": {"replicas": 1},
                                      "global": {"backend": "s3", "bucket": "ckpt", "prefix": "netns",
                                                 "endpoint_url": endpoint}})
            targets = [f"{net.addrs[n]}:{port + i}" for i, n in enumerate(NODES)]
            prometheus.set_targets(targets)
            started = time.time()
            agents = [net.popen(n, [sys.executable, "-m", "emulator.cli", "run", str(cfg), "--quiet",
                                    "--out", str(tmp_path / f"out{i}"), "--nnodes", "2", "--nproc-per-node", "1",
                                    "--rdzv-endpoint", f"{net.addrs['n0']}:{rdzv}", "--rdzv-id", "netns",
                                    "--node-addr", net.addrs[n], "--metrics-port", str(port)],
                                cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                      for i, n in enumerate(NODES)]
            seen = {n: set() for n in NODES}
            try:
                deadline = time.monotonic() + 400
                while any(a.poll() is None for a in agents) and time.monotonic() < deadline:
                    for n in NODES:
                        seen[n] |= net.listeners(n)
                    time.sleep(0.2)
            finally:
                for a in agents:
                    if a.poll() is None:
                        a.kill()
                errors = [a.communicate(timeout=60)[1] for a in agents]
                prometheus.set_targets([])
    finally:
        subprocess.run(["rm", "-rf", shm])
    assert [a.returncode for a in agents] == [0, 0], "\n".join(errors)
    for n in NODES:
        assert seen[n], f"{n}: nothing seen listening"
        stray = {(local, who) for local, who in seen[n] if _host(local) != net.addrs[n]}
        assert not stray, f"{n} ({net.addrs[n]}) listened elsewhere: {sorted(stray)}"
    res = results(tmp_path / "out0")
    assert res["nodes"] == 2
    peer, global_ = res["levels"]["peer"], res["levels"]["global"]
    assert peer["due"] > 0 and peer["complete"] == peer["due"], peer  # copies to the other node, over the bridge
    assert global_["due"] > 0 and global_["complete"] == global_["due"], global_  # drains to the store's namespace
    assert res["load"]["ok"]
    scraped = {s["metric"]["instance"] for s in prometheus.query_range("ckpt_emu_info", started, time.time())}
    assert scraped == set(targets)
