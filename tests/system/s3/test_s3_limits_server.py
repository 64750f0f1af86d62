"""S3 request limits against a real server: throttling, retries of one part, listings of 1000 keys, real
runs under a low limit.
"""
from __future__ import annotations

import asyncio
import os
import time

import crc32c
import pytest
from httpfaults import Rule, S3FaultProxy
from s3server import ON_RGW, s3_bucket, s3_endpoint, s3_server  # noqa: F401 - pytest fixtures

from emulator.checkpoint import layout
from emulator.checkpoint.drainer import Drainer
from emulator.checkpoint.integrity import format_crc
from emulator.checkpoint.layout import FileEntry, Manifest
from emulator.checkpoint.retry import RetryPolicy
from tiers import s3_limits
from tiers.base import TierScope
from tiers.directory import DirTier
from tiers.emulated import EmulatedTier, EmulateOptions
from tiers.s3 import S3Tier

MIB = 1 << 20


@pytest.fixture
def proxy(s3_endpoint):
    p = S3FaultProxy(s3_endpoint)
    yield p
    p.close()


def test_a_throttled_part_is_retried_alone_not_the_whole_file(proxy, s3_bucket, tmp_path):
    """Two SlowDowns on the first part: the S3 tier backs off and sends that part again; the upload
    is not aborted, no other part is sent twice, and the drain needs no retry of its own."""
    proxy.rules.append(Rule("PUT", "partNumber", 503, "SlowDown", "Please reduce your request rate.", remaining=2))
    before = s3_limits.counts().get("slowdown_retry", 0)
    tier = S3Tier(s3_bucket, endpoint_url=proxy.url, part_size=5 * MIB, max_concurrency=1)
    local = DirTier(tmp_path / "local")
    data = os.urandom(3 * 5 * MIB)
    asyncio.run(local.put("f.pt", data))
    result = asyncio.run(Drainer(local, tier, policy=RetryPolicy(retries=0))
                         .drain([FileEntry("f.pt", 0, len(data), format_crc(crc32c.crc32c(data)))]))
    assert result.ok and result.retries == 0
    assert proxy.count("POST", "uploads") == 1 and proxy.count("DELETE", "uploadId") == 0
    assert [proxy.count("PUT", "partNumber", str(n)) for n in (1, 2, 3)] == [3, 1, 1]
    assert s3_limits.counts()["slowdown_retry"] - before == 2
    asyncio.run(tier.close())


FILES, PUT_PER_S = 1000, 100


def _small_checkpoint(folder, step: int, files: int = FILES) -> tuple[DirTier, list[FileEntry]]:
    """``files`` files of 1 KiB on a local tier: each drains in one PUT (one part)."""
    local = DirTier(folder)
    entries = []
    for rank in range(files):
        data = os.urandom(1024)
        key = layout.rank_file_key(step, rank, 0, 0)
        asyncio.run(local.put(key, data))
        entries.append(FileEntry(key, rank, len(data), format_crc(crc32c.crc32c(data))))
    return local, entries


@ON_RGW  # the limiter and the restore's listing are ours: the server only answers
def test_draining_1000_parts_at_100_put_per_s_takes_10_s_counts_retries_and_completes(s3_bucket, s3_endpoint,
                                                                                       tmp_path):
    """The issue's check: with a limit of 100 PUT/s per prefix, a checkpoint of 1,000 one-part files
    (one prefix: its step's folder) takes at least (1,000 PUTs + its manifest - burst) / 100 s to
    become durable; the SlowDowns and their retries are counted, and the checkpoint is complete."""
    step = 1
    local, entries = _small_checkpoint(tmp_path / "local", step)
    s3 = S3Tier(s3_bucket, prefix="ckpt", endpoint_url=s3_endpoint, max_concurrency=8)
    scope = TierScope(shared_dir=str(tmp_path / "shared"))
    tier = EmulatedTier.from_config(s3, EmulateOptions(put_per_s_per_prefix=PUT_PER_S), scope=scope)
    before = s3_limits.counts()
    start = time.monotonic()
    result = asyncio.run(Drainer(local, tier, concurrency=8, policy=RetryPolicy(retries=3, backoff_s=0.1))
                         .drain(entries))
    assert result.ok, result.error
    asyncio.run(layout.write_manifest(tier, Manifest(step, entries, world=FILES)))
    seconds = time.monotonic() - start
    after = s3_limits.counts()
    assert seconds >= (FILES + 1 - max(1, PUT_PER_S * s3_limits.BURST_S)) / PUT_PER_S
    assert after.get("slowdown", 0) > before.get("slowdown", 0)
    assert after.get("slowdown_retry", 0) - before.get("slowdown_retry", 0) > 0
    complete, seen = asyncio.run(layout.valid_steps(s3))
    assert complete == seen == [step]
    assert sorted(asyncio.run(s3.list(layout.step_dir(step) + "/"))) == sorted(
        [e.key for e in entries] + [layout.manifest_key(step)])
    asyncio.run(tier.close())


def test_requests_well_under_the_default_limits_are_never_throttled(s3_bucket, s3_endpoint, tmp_path):
    """AWS's limits (3,500 PUT/s, 5,500 GET/s) and a drain of 8 files at once, far below them: no
    SlowDown, however the threads interleave (a thread that waited for the lock judges with the time
    after its wait, not before)."""
    local, entries = _small_checkpoint(tmp_path / "local", 1, files=200)
    s3 = S3Tier(s3_bucket, endpoint_url=s3_endpoint, max_concurrency=8)
    tier = EmulatedTier.from_config(s3, EmulateOptions(), scope=TierScope(shared_dir=str(tmp_path / "shared")))
    before = s3_limits.counts().get("slowdown", 0)
    result = asyncio.run(Drainer(local, tier, concurrency=8, policy=RetryPolicy(retries=0)).drain(entries))
    assert result.ok, result.error
    assert s3_limits.counts().get("slowdown", 0) == before
    asyncio.run(tier.close())


class ThreadComm:
    """The collectives of ``ranks`` ranks that are threads of this process (8 per node)."""

    def __init__(self, shared: dict, rank: int, ranks: int):
        self.shared, self.rank, self.world_size = shared, rank, ranks
        self.local_rank, self.local_world_size = rank % 8, min(8, ranks)
        self.node, self.nodes = rank // 8, max(1, ranks // 8)

    @property
    def is_node_leader(self) -> bool:
        return self.local_rank == 0

    def all_gather(self, obj) -> list:
        self.shared["slots"][self.rank] = obj
        self.shared["barrier"].wait()
        out = list(self.shared["slots"])
        self.shared["barrier"].wait()
        return out

    def broadcast(self, obj, src: int = 0):
        return self.all_gather(obj)[src]

    def all_min(self, value: float) -> float:
        return min(self.all_gather(value))

    def all_max(self, value: float) -> float:
        return max(self.all_gather(value))

    def barrier(self) -> None:
        self.shared["barrier"].wait()


RANKS, GET_PER_S = 64, 100


@ON_RGW  # the limiter and the restore's listing are ours: the server only answers
def test_a_restore_of_64_ranks_lists_the_global_tier_once(proxy, s3_bucket, tmp_path):
    """DLIO issue 347: every rank LISTing the bucket on restart. 64 ranks (threads, each with its own
    S3 client, as processes would have) restore from S3 under a low GET limit shared by all of them,
    their local tiers lost: the global tier sees one LIST for the whole restore, one manifest GET per
    rank, and every rank loads the checkpoint. Two layers, not 80: the requests are the same, and
    64 ranks' torch.load of 483 tensors each took most of the test's CPU."""
    import threading

    from emulator.checkpoint.rank_file import save_rank_file
    from emulator.checkpoint.restore import Restorer
    from emulator.config import load_config
    from rundesign import rank_state

    cfg = load_config("llama3-70b", ["run.scale=0.00005", "model.num_layers=2"])
    assert cfg.parallelism.world_size == RANKS
    scope = TierScope(shared_dir=str(tmp_path / "shared"))
    limits = EmulateOptions(put_per_s_per_prefix=None, get_per_s_per_prefix=GET_PER_S)

    def global_tier():
        s3 = S3Tier(s3_bucket, prefix="ckpt", endpoint_url=proxy.url, max_concurrency=2)
        return EmulatedTier.from_config(s3, limits, scope=scope)

    states = [rank_state(cfg, r) for r in range(RANKS)]
    writer, step, entries = global_tier(), 3, []
    for r, state in enumerate(states):
        state.snapshot()
        key = layout.rank_file_key(step, r, state.coords.dp, 0)
        size, crc = save_rank_file(state, writer, key, step)
        entries.append(FileEntry(key, r, size, crc))
    asyncio.run(layout.write_manifest(writer, Manifest(step, entries, world=RANKS)))
    asyncio.run(writer.close())
    proxy.requests.clear()

    shared = {"slots": [None] * RANKS, "barrier": threading.Barrier(RANKS)}
    records = [None] * RANKS

    def rank(r: int) -> None:
        tier = global_tier()
        local = DirTier(tmp_path / f"local{r // 8}")  # lost with its node: empty
        restorer = Restorer(states[r], [("local", local), ("global", tier)], ThreadComm(shared, r, RANKS))
        records[r] = restorer.load()
        asyncio.run(tier.close())

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(RANKS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(rec.ok and rec.step == step and rec.tier == "global" for rec in records), \
        [rec.error or rec.fallbacks for rec in records if not rec.ok][:3]
    lists = sum(1 for m, _, q in proxy.requests if m == "GET" and "list-type" in q)
    manifest_gets = sum(1 for m, p, _ in proxy.requests if m == "GET" and p.endswith("/" + layout.MANIFEST))
    assert lists == 1
    assert manifest_gets == RANKS


@ON_RGW
def test_a_run_under_a_low_limit_completes_and_reports_its_slowdowns(s3_bucket, s3_endpoint, tmp_path):
    """``ckpt-emu run`` with the global tier at 5 PUT/s per prefix (in the run's time): every checkpoint still completes,
    and results.json's fault counts and the report say how often S3 said SlowDown and what was retried."""
    from emu import ckpt_emu, results, small_config

    # a limit is per second of the design's time: a run at time factor k (scale 0.0005, undilated)
    # meets it k times as often, so 0.0025 PUT/s at full size is 5 PUT/s here
    cfg = small_config(tmp_path, run={"dilation": 1}, checkpoint={"saves": 2, "loads": 1, "keep": 2},
                       tiers={"global": {"backend": "s3", "bucket": s3_bucket, "prefix": "runs",
                                         "endpoint_url": s3_endpoint, "part_size_mib": 5,
                                         "emulate": {"put_per_s_per_prefix": 5 * 0.0005}}})
    proc = ckpt_emu("run", cfg, "--quiet", check=True)
    res = results(tmp_path / "out")
    for mode, m in res["modes"].items():
        assert m["checkpoints"] == 2 and m["incomplete"] == 0 and not m["errors"], (mode, m)
    counts = res["faults"]["counts"]
    assert counts["slowdown"] > 0 and counts["slowdown_retry"] > 0
    assert f"slowdown_retry {counts['slowdown_retry']}" in proc.stdout


def test_a_listing_pages_at_1000_keys(proxy, s3_bucket, s3_endpoint):
    """1,001 keys: two LIST requests (1,000, then the continuation's 1), and every key comes back."""
    from concurrent.futures import ThreadPoolExecutor

    from s3server import raw_client

    keys = [f"p/step_00000001/k{i:05d}" for i in range(1001)]
    client = raw_client(s3_endpoint)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: client.put_object(Bucket=s3_bucket, Key=k, Body=b"x"), keys))
    tier = S3Tier(s3_bucket, prefix="p", endpoint_url=proxy.url)
    assert asyncio.run(tier.list("step_")) == [k[2:] for k in keys]
    assert [q.get("max-keys") for m, _, q in proxy.requests if m == "GET" and "list-type" in q] == [["1000"]] * 2
    asyncio.run(tier.close())
