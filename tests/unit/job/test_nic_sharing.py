"""A design's NIC carries the drain to global storage and the peer copies together (issue 24:
"the link rate comes from the design (the node's NIC, shared with the drain)").

The global tier the run builds (emulator/job/rank_tiers.py) takes its writes' bytes out of the
node's share of the file system and out of the NIC bucket the peer tier's sends use
(``OutDir.nic``): B bytes of each at once through a NIC of N B/s take 2B/N, not B/N each.
"""
import threading
import time
from pathlib import Path

import pytest
import yaml

from rundesign import run_of

from emulator.config import load_config
from emulator.job.outdir import OutDir
from emulator.job.rank_tiers import build_tiers, pace_tier
from tiers.pacing import BothBuckets, FileTokenBucket, TokenBucket

MIB = 1 << 20


class _Node0:
    rank = local_rank = node = 0
    local_world_size, nodes = 1, 2


def _design(tmp: Path, nic: str, global_rate: str) -> object:
    path = tmp / "design.yaml"
    path.write_text(yaml.safe_dump({
        "extends": "llama3-8b", "parallelism": {"ranks": 2}, "run": {"scale": 0.001, "out": str(tmp / "out")},
        "tiers": {"memory": {"backend": "dir", "path": str(tmp / "shm" / "node{node}")},
                  "peer": {"replicas": 1},
                  "global": {"backend": "dir", "path": str(tmp / "pfs")}},
        "design": {"node": {"nic": nic, "memory": {"capacity": "1 GiB", "write": "10 GB/s"}},
                   "global": {"write": global_rate, "read": global_rate}, "job": {"nodes": 2}}}))
    return load_config(str(path))


def _write(tier, key: str, nbytes: int) -> None:
    import asyncio
    asyncio.run(tier.put(key, b"x" * nbytes))


def _paced_global(cfg, tmp_path):
    """The global tier as a rank of node 0 builds it: bare, then paced to the design."""
    bare = build_tiers(cfg, _Node0(), tmp_path / "out")
    design, clock = run_of(cfg, nodes=_Node0.nodes)
    return pace_tier(design, clock, _Node0(), tmp_path / "out", "global", bare["global"])


def test_the_drain_and_the_peer_sends_share_the_node_nic(tmp_path):
    """NIC 200 Mb/s (25 MB/s), the file system faster than it: 5 MiB drained and 5 MiB sent to
    the peer at once finish together at 2 x 5 MiB / NIC, as one link carrying both."""
    cfg = _design(tmp_path, "200 Mb/s", "10 GB/s")
    global_ = _paced_global(cfg, tmp_path)
    nic_bps = cfg.design.nic_bps
    peer = FileTokenBucket(nic_bps, OutDir(tmp_path / "out").nic(0))  # what run.py's _nic() builds
    nbytes, ends = 5 * MIB, {}
    start = time.time()

    def drain():
        _write(global_, "step_1/rank0.pt", nbytes)
        ends["drain"] = time.time() - start

    def send():
        for _ in range(5):
            peer.acquire(MIB)
        ends["peer"] = time.time() - start

    threads = [threading.Thread(target=f) for f in (drain, send)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    both = 2 * nbytes / nic_bps
    # one link carrying both: at least 2 x bytes / NIC (each alone on its own link would take half)
    assert max(ends.values()) >= 0.85 * both, (ends, both)
    assert "NIC shared with peer copies" in global_.describe()


def test_without_a_peer_tier_the_drain_has_the_nic_to_itself(tmp_path):
    """No peer tier: the global tier's writes are paced by the node's share alone (the NIC is
    already in it: min(NIC, aggregate / nodes))."""
    cfg = _design(tmp_path, "200 Mb/s", "10 GB/s")
    data = yaml.safe_load((tmp_path / "design.yaml").read_text())
    del data["tiers"]["peer"]
    (tmp_path / "design.yaml").write_text(yaml.safe_dump(data))
    cfg = load_config(str(tmp_path / "design.yaml"))
    global_ = _paced_global(cfg, tmp_path)
    assert "NIC shared" not in global_.describe()


def test_with_a_compute_fabric_the_peer_sends_leave_the_nic_to_the_drain(tmp_path):
    """design.node.fabric: the peer copies go over the fabric (a bucket of their own), and the global
    tier's writes no longer take their bytes out of a NIC bucket the peers share."""
    cfg = _design(tmp_path, "200 Mb/s", "10 GB/s")
    data = yaml.safe_load((tmp_path / "design.yaml").read_text())
    data["design"]["node"]["fabric"] = "3.2 Tb/s"
    (tmp_path / "design.yaml").write_text(yaml.safe_dump(data))
    cfg = load_config(str(tmp_path / "design.yaml"))
    assert "NIC shared" not in _paced_global(cfg, tmp_path).describe()
    out = OutDir(tmp_path / "out")
    assert out.fabric(0) != out.nic(0)


def test_both_buckets_finish_when_the_slower_says_so():
    now = [0.0]
    clock = lambda: now[0]  # noqa: E731
    fast, slow = TokenBucket(100.0, burst=0, clock=clock), TokenBucket(10.0, burst=0, clock=clock)
    both = BothBuckets(fast, slow)
    assert both.reserve(50, 0.0) == pytest.approx(5.0)
    assert fast.reserve(100, 0.0) == pytest.approx(1.5)  # the fast one booked its own share only
    with pytest.raises(ValueError, match="same clock"):
        BothBuckets(fast, TokenBucket(1.0))
