"""A run at run.scale makes a fraction of its job's S3 requests (smaller files, fewer parts, a few of
the job's nodes), while the whole job's requests meet the step's prefix: each of the run's requests is
charged for the job's requests it stands for (tiers/s3_limits.py ``RequestWeights``, from the design's
request model, emulator/design/requests.py), so a scaled drain takes the full-size job's request floor,
requests / ceiling, on a fake clock here."""
from __future__ import annotations

import math
from collections import Counter

import pytest

from emulator.checkpoint.drainer import Drainer
from emulator.config import load_config
from emulator.design import resolve
from emulator.design.job import as_run_job
from emulator.design.requests import METHOD, file_requests, limit_classes, transfer_floor_seconds
from emulator.job.clock import Clock
from tiers.base import TierScope
from tiers.directory import DirTier
from tiers.emulated import EmulatedTier, EmulateOptions
from tiers.s3_limits import GET_CLASS, PrefixLimiter, RequestLimits, RequestWeights

MIB = 1 << 20
NAME = "design-memory-nvme-s3"  # 16,384 files of a 2,048-node job, a run of one node at 0.01
DILATION = 125


def _drain_requests(groups, part: int, verify: str) -> Counter:
    """Every request of a drain of ``groups``' files, by kind, as the S3 tier makes them."""
    counts = Counter()
    for g in groups:
        if g.node_bytes > 0:
            counts += file_requests(g.nodes * g.files, g.file_bytes, part, verify, 4 * part)
    return counts


def _paced_drain(limiter: PrefixLimiter, counts: Counter, now: list) -> float:
    """Send ``counts`` requests of one class through ``limiter`` one after another on the fake clock
    ``now``; the time the last one went."""
    for kind, n in sorted(counts.items()):
        for i in range(n):
            limiter.before_send(_Request(METHOD[kind], f"http://s3/b/ckpt/step_00000002/rank{i:05d}.pt"))
    return now[0]


class _Request:
    def __init__(self, method: str, url: str):
        self.method, self.url = method, url


def test_a_scaled_drain_is_paced_to_the_full_size_jobs_request_count():
    """The run's drain (8 files of ~38 MiB: a few parts each) charged at the design's weights, at the
    run's time factor: each class takes the full-size job's requests over its ceiling (16,384 files of
    the job in 16 MiB parts: 376,072 PUT-class at 3,500/s, 107.4 s; its HEADs and read-backs at
    5,500/s), and the drain's floor is the slower class's, the design's closed form."""
    cfg = load_config(NAME)
    design = resolve(cfg, run=True)
    part, verify = cfg.tiers.global_.options.part_size_mib * MIB, cfg.drain.verify
    run_counts = _drain_requests(as_run_job(design.job, cfg.run.scale).groups, part, verify)
    job_counts = _drain_requests(design.job.groups, part, verify)
    # the closed form, by hand: a file of B bytes is ceil(B / part) parts + its Create and Complete
    by_hand = sum(g.nodes * g.files * (math.ceil(g.file_bytes / part) + 2) for g in design.job.groups if g.node_bytes)
    assert limit_classes(job_counts)["put"] == by_hand == 376_072
    assert limit_classes(run_counts)["put"] < by_hand / 5000  # what the scaled run makes itself
    k = cfg.run.scale * DILATION
    paced = Clock(cfg.run.scale, DILATION).paced(EmulateOptions())  # AWS's ceilings, per second of this run
    seconds = {}
    for klass, ceiling in (("put", 3500), ("get", 5500)):
        now = [0.0]

        def sleep(s, now=now):
            now[0] += s
        limiter = PrefixLimiter("b", RequestLimits(paced.put_per_s_per_prefix, paced.get_per_s_per_prefix),
                                weights=design.emulation.node(0).requests, phase=lambda: "drain",
                                clock=lambda now=now: now[0], sleep=sleep)
        mine = Counter({kind: n for kind, n in run_counts.items() if (METHOD[kind] in GET_CLASS) == (klass == "get")})
        n = sum(mine.values())
        last_sent = _paced_drain(limiter, mine, now)
        full = limit_classes(job_counts)[klass] / ceiling  # requests / ceiling, at full size
        # the last request goes once every request before it (and the job's they stand for) is done,
        # and the drain once the job's it stands for besides itself are
        assert last_sent / k == pytest.approx(full * (n - 1) / n, rel=1e-9), klass
        limiter.settle("drain")
        assert now[0] / k == pytest.approx(full, rel=1e-9), klass
        seconds[klass] = full
    assert seconds["put"] == pytest.approx(107.45, abs=0.01)
    # the design's floor of the drain: its slower class, and the manifest's PUT
    assert transfer_floor_seconds(resolve(cfg), verify=verify) == pytest.approx(
        max(seconds["put"] + 1 / 3500, seconds["get"] + 1 / 5500), rel=1e-9)


def test_a_request_of_another_phase_stands_for_itself():
    now = [10.0]
    limiter = PrefixLimiter("b", RequestLimits(100, 100), weights=RequestWeights((("drain", 50.0, 50.0),)),
                            phase=lambda: "other", clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    for _ in range(3):
        assert limiter.before_send(_Request("PUT", "http://s3/b/ckpt/step_1/m.json")) is None  # paced, not refused
    assert now[0] == pytest.approx(10.02)


def test_a_class_that_binds_less_is_packed_from_its_transfers_start():
    """The drain's read-backs come in bunches in a scaled run (as its few files' uploads end), where the
    job's flow through the whole drain: a class's requests are booked back to back from the transfer's
    first request, so a late one goes at once if the class is not yet due; the next transfer (after
    ``settle``) starts afresh."""
    now = [0.0]
    limiter = PrefixLimiter("b", RequestLimits(1, 1), weights=RequestWeights((("drain", 10.0, 10.0),)),
                            phase=lambda: "drain", clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    url = "http://s3/b/ckpt/step_1/r0.pt"
    assert limiter.pace("PUT", url) == 0 and limiter.pace("PUT", url) == pytest.approx(10)  # the binding class
    assert limiter.pace("HEAD", url) == 0 and limiter.pace("GET", url) == 0  # due at 0 and 10: now is 10
    assert limiter.pace("GET", url) == pytest.approx(10)  # due at 20
    assert limiter.settle("drain") == pytest.approx(10)  # until 30: both classes' bookings done
    assert limiter.pace("GET", url) == 0 and limiter.settle("drain") == pytest.approx(10)  # afresh at 30


def test_a_request_outside_a_transfer_is_booked_from_now():
    now = [0.0]
    limiter = PrefixLimiter("b", RequestLimits(1, 1), weights=RequestWeights(), phase=lambda: "other",
                            clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    limiter.pace("PUT", "http://s3/b/ckpt/m.json")
    now[0] = 50.0
    assert limiter.pace("PUT", "http://s3/b/ckpt/m.json") == 0 and limiter.pace("PUT", "http://s3/b/ckpt/m.json") == 1


def test_the_as_run_design_holds_the_run_to_the_full_size_floor_at_its_time_factor():
    """``simulate --as-run`` models what the run paces: its own requests at their weights, per second
    of the run, a floor k times the full-size job's."""
    cfg = load_config(NAME)
    k = cfg.run.scale * DILATION
    full, as_run = resolve(cfg), resolve(cfg, as_run=True, dilation=DILATION)
    for verify in ("checksum", "size", "none"):
        assert transfer_floor_seconds(as_run, verify=verify) == pytest.approx(
            transfer_floor_seconds(full, verify=verify) * k, rel=1e-3), verify


class _Bucket(DirTier):
    """A folder that takes an S3 tier's place where only its request hook and parts are asked for."""

    part_size, single_get_threshold, endpoint_url, bucket = 5 * MIB, 20 * MIB, "http://s3", "b"

    def on_request(self, handler) -> None:
        pass


def test_a_drains_paced_part_is_not_cut_below_its_requests_floor(tmp_path):
    """A drain's paced part is capped at what its devices need (host delays otherwise cover more): an
    object store's request ceilings are part of that need, at the requests' weights."""
    local = DirTier(tmp_path / "local")
    weights = RequestWeights((("drain", 1000.0, 1000.0),))
    dest = EmulatedTier.from_config(_Bucket(tmp_path / "global"),
                                    EmulateOptions(write_gib_s=1.0, read_gib_s=1.0, put_per_s_per_prefix=100,
                                                   get_per_s_per_prefix=1000),
                                    scope=TierScope(shared_dir=str(tmp_path / "shared"), request_weights=weights))
    sizes = [6 * MIB] * 4  # 4 files of 2 parts: 4 x (Create + 2 parts + Complete) = 16 PUT-class requests
    assert Drainer(local, dest, verify="checksum").floor_seconds(sizes) == pytest.approx(16 * 1000 / 100)
    unweighted = EmulatedTier.from_config(_Bucket(tmp_path / "g2"), EmulateOptions(write_gib_s=1.0, read_gib_s=1.0))
    assert Drainer(local, unweighted, verify="checksum").floor_seconds(sizes) < 1
