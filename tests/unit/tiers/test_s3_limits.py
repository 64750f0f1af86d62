"""An object store's request limits, emulated (tiers/s3_limits.py), on both test servers: a per-prefix
rate answered with 503 SlowDown beyond it, the S3 tier's per-request backoff, and a drain that takes as
long as the limit says and still completes."""
from __future__ import annotations


import pytest
from s3server import s3_bucket, s3_endpoint, s3_server  # noqa: F401 - pytest fixtures

from emulator.checkpoint import layout
from emulator.cli import main
from tiers import s3_limits
from tiers.base import OptionError
from tiers.directory import DirTier
from tiers.emulated import EmulatedTier, EmulateOptions
from tiers.s3 import S3Tier
from tiers.s3_limits import PrefixLimiter, RequestLimits, _Rates, prefix_of

MIB = 1 << 20


def test_a_prefix_is_the_key_up_to_its_last_slash_or_its_first_folders():
    key = "runs/a/step_00000001/rank00001.pt"
    assert prefix_of(key) == "runs/a/step_00000001/"
    assert prefix_of(key, depth=1) == "runs/"
    assert prefix_of(key, depth=9) == "runs/a/step_00000001/"
    assert prefix_of("top") == ""


def test_a_request_counts_against_its_key_and_a_list_against_its_prefix():
    lim = PrefixLimiter("b", RequestLimits())
    assert lim.key_of("http://127.0.0.1:9/b/runs/step_1/x%20y.pt?partNumber=3&uploadId=u") == "runs/step_1/x y.pt"
    assert lim.key_of("https://b.s3.amazonaws.com/runs/step_1/x.pt") == "runs/step_1/x.pt"
    assert lim.key_of("http://127.0.0.1:9/b?list-type=2&prefix=runs%2Fstep_") == "runs/"
    assert lim.key_of("http://127.0.0.1:9/b?list-type=2&prefix=runs%2Fstep_1%2F") == "runs/step_1/"
    assert lim.key_of("http://127.0.0.1:9/bb/k") == "bb/k"  # another bucket's name is not stripped


@pytest.mark.parametrize("rate", [100, 3500])
def test_the_rate_admits_at_most_rate_x_seconds_plus_a_burst(rate, tmp_path):
    """A tight loop of requests for 2 s of a fake clock: what gets through is the rate's, whether the
    state is this process's or shared through a file; the other class and prefixes are not touched."""
    for folder in (None, tmp_path / "shared"):
        now = [1000.0]
        rates = _Rates(folder, clock=lambda: now[0])
        admitted = 0
        for _ in range(int(2 * rate * 4)):  # 4 attempts per slot
            admitted += rates.admit("put", "p/", rate)
            now[0] += 1 / (4 * rate)
        burst = max(1, rate * s3_limits.BURST_S)
        assert 2 * rate <= admitted <= 2 * rate + burst
        assert rates.admit("get", "p/", rate) and rates.admit("put", "q/", rate)


@pytest.mark.parametrize("key,value", [("put_per_s_per_prefix", 0), ("get_per_s_per_prefix", -5),
                                       ("prefix_depth", 0)])
def test_a_bad_limit_is_one_line_naming_the_key(key, value, tmp_path, capsys):
    with pytest.raises(OptionError, match=key):
        EmulateOptions(**{key: value})
    out = tmp_path / "out"
    rc = main(["run", "--out", str(out), "--quiet", "--set", f"tiers.global.emulate.{key}={value}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and f"tiers.global.emulate.{key}" in err[0]
    assert not out.exists()


def test_a_checkpoints_key_layout_counts_its_prefixes_and_requests_by_hand():
    """Three files (one part exactly, one part and a byte, empty) and the manifest: 1 + (2 parts + create
    + complete) + 1 + 1 = 7 PUT-class requests, all under the step's folder: one prefix, so AWS's
    3,500 PUT/s is the whole checkpoint's ceiling; a prefix depth of 1 puts them under the tier's."""
    part = 5 * MIB
    files = [(0, 0, 0, part), (1, 0, 1, part + 1), (2, 1, 0, 0)]
    k = layout.key_layout(files, part_size=part, tier_prefix="a/b")
    assert (k.files, k.prefixes, k.put_requests) == (3, ["a/b/step_<8 digits>/"], 7)
    assert (k.put_ceiling, k.get_ceiling, k.min_put_s) == (3500, 5500, 7 / 3500)
    assert layout.key_layout(files, part_size=part, tier_prefix="a/b", prefix_depth=1).prefixes == ["a/"]


def test_sizes_shows_the_global_tiers_prefixes_and_request_ceiling(capsys):
    import json
    import math

    args = ["sizes", "llama3-8b", "--set", "tiers.global={backend: s3, bucket: b, prefix: runs}"]
    assert main([*args, "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    hand = sum(math.ceil(b / (64 * MIB)) + 2 for b in obj["per_rank_bytes"]) + 1
    k = obj["key_layout"]
    assert (k["prefixes"], k["put_requests"], k["put_ceiling_per_s"]) == (1, hand, 3500)
    assert main([*args, "--set", "tiers.global.emulate={put_per_s_per_prefix: 100}"]) == 0
    assert f"{hand:,} PUT-class requests per checkpoint (64 MiB parts); ceiling 100/s PUT" in capsys.readouterr().out


def test_the_tier_says_which_limits_it_emulates(tmp_path):
    s3 = S3Tier("b", endpoint_url="http://127.0.0.1:9", region="us-east-1")
    opts = EmulateOptions(put_per_s_per_prefix=100, get_per_s_per_prefix=None, prefix_depth=2)
    assert "100/s PUT, no limit GET per 2-folder prefix" in EmulatedTier.from_config(s3, opts).describe()
    assert "per prefix" not in EmulatedTier.from_config(DirTier(tmp_path), EmulateOptions()).describe()


def _limiters(s3: S3Tier) -> list:
    """The request limiters hooked on ``s3``'s client (one botocore before-send run, no request sent)."""
    from types import SimpleNamespace
    request = SimpleNamespace(method="PUT", url="http://127.0.0.1:9/b/p/k", headers={})
    return [h.__self__ for h, _ in s3._client.meta.events.emit("before-send.s3", request=request)
            if isinstance(getattr(h, "__self__", None), PrefixLimiter)]


def test_one_limiter_a_client_however_many_tiers_pace_it():
    """A run paces one S3 tier twice (its drains, its restores in a storm): each request is booked once.
    A limit of another clock (the loads' own dilation) replaces the one before."""
    s3 = S3Tier("b", endpoint_url="http://127.0.0.1:9", region="us-east-1")
    opts = EmulateOptions(put_per_s_per_prefix=100)
    drains, restores = EmulatedTier.from_config(s3, opts), EmulatedTier.from_config(s3, opts)
    assert restores.limiter is drains.limiter and _limiters(s3) == [drains.limiter]
    loads = EmulatedTier.from_config(s3, EmulateOptions(put_per_s_per_prefix=50))
    assert _limiters(s3) == [loads.limiter]
