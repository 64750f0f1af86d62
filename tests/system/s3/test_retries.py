"""One layer owns the retry budget for global-tier work (emulator/checkpoint/retry.py): botocore and the S3
tier make each request once, so a persistent 5xx costs exactly drain.retries + 1 requests per
part, as docs/faults.md states, counted here on the wire by an HTTP proxy in front of moto."""
from __future__ import annotations

import asyncio
import os

import pytest
from httpfaults import Rule, S3FaultProxy
from s3server import raw_client, s3_bucket, s3_endpoint, s3_server  # noqa: F401 - pytest fixtures

from emulator.checkpoint.drainer import Drainer
from emulator.checkpoint.layout import FileEntry
from emulator.checkpoint.retry import RetryPolicy
from tiers.directory import DirTier
from tiers.s3 import S3Tier

MIB = 1 << 20
PARTS = 3


@pytest.fixture
def proxy(s3_endpoint):
    p = S3FaultProxy(s3_endpoint)
    yield p
    p.close()


@pytest.mark.parametrize("retries", [0, 2])
def test_a_persistent_5xx_costs_retries_plus_one_requests_per_part(proxy, s3_bucket, tmp_path, retries):
    proxy.rules.append(Rule("PUT", "partNumber", 503, "ServiceUnavailable", "Service is unable to handle request."))
    tier = S3Tier(s3_bucket, endpoint_url=proxy.url, part_size=5 * MIB, max_concurrency=1)
    local = DirTier(tmp_path / "local")
    asyncio.run(local.put("f.pt", os.urandom(PARTS * 5 * MIB)))
    result = asyncio.run(Drainer(local, tier, policy=RetryPolicy(retries=retries, backoff_s=0.01))
                         .drain([FileEntry("f.pt", 0, PARTS * 5 * MIB, "")]))
    assert not result.ok and result.abandoned and "ServiceUnavailable" in result.error
    attempts = retries + 1
    # the first failing part cancels the others of its attempt: part 1 is tried once per attempt
    assert proxy.count("PUT", "partNumber", "1") == attempts
    assert all(proxy.count("PUT", "partNumber", str(n)) <= attempts for n in range(1, PARTS + 1))
    assert proxy.count("POST", "uploads") == attempts  # one CreateMultipartUpload per attempt
    assert proxy.count("DELETE", "uploadId") == attempts  # and every one aborted
    assert raw_client(proxy.url).list_multipart_uploads(Bucket=s3_bucket).get("Uploads", []) == []
    asyncio.run(tier.close())


def test_a_permanent_error_is_not_retried(proxy, s3_bucket, tmp_path):
    proxy.rules.append(Rule("PUT", None, 403, "AccessDenied", "Access Denied"))
    tier = S3Tier(s3_bucket, endpoint_url=proxy.url, part_size=5 * MIB)
    local = DirTier(tmp_path / "local")
    asyncio.run(local.put("m.json", b"{}"))
    result = asyncio.run(Drainer(local, tier, policy=RetryPolicy(retries=3, backoff_s=0.01))
                         .drain([FileEntry("m.json", 0, 2, "")]))
    assert not result.ok and result.retries == 0 and "access denied" in result.error
    assert sum(1 for m, _, _ in proxy.requests if m == "PUT") == 1
    asyncio.run(tier.close())


@pytest.mark.parametrize("retries", [0, 2])
def test_a_direct_write_streamed_to_s3_costs_retries_plus_one_requests_per_part(proxy, s3_bucket, retries):
    """The streaming sink of a direct write sends each part once per attempt too; every attempt's
    upload is aborted and none is left."""
    from emulator.checkpoint.rank_file import save_rank_file
    from emulator.checkpoint.retry import Abandoned, retrying
    from emulator.config import load_config
    from rundesign import rank_state

    proxy.rules.append(Rule("PUT", "partNumber", 503, "ServiceUnavailable", "Service is unable to handle request."))
    tier = S3Tier(s3_bucket, endpoint_url=proxy.url, part_size=5 * MIB, max_concurrency=1)
    state = rank_state(load_config("llama3-8b", ["run.scale=0.0005", "parallelism.ranks=1"]), 0)
    state.snapshot()  # the staged payload: 7 MiB, two parts
    policy = RetryPolicy(retries=retries, backoff_s=0.01)
    with pytest.raises(Abandoned, match="ServiceUnavailable"):
        asyncio.run(retrying(policy, "direct write", lambda: asyncio.to_thread(
            save_rank_file, state, tier, "step_1/rank0.pt", 1)))
    attempts = retries + 1
    assert proxy.count("PUT", "partNumber", "1") == attempts
    assert proxy.count("PUT", "partNumber", "2") == 0  # the write stopped at the first failed part
    assert proxy.count("POST", "uploads") == attempts
    assert proxy.count("DELETE", "uploadId") == attempts
    assert raw_client(proxy.url).list_multipart_uploads(Bucket=s3_bucket).get("Uploads", []) == []
    asyncio.run(tier.close())
