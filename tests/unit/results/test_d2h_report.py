"""The d2h phase and the device in the figures: summary, report and timeline, from synthetic rank
results shaped like a GPU run's (CPU machines cannot make real ones)."""
from __future__ import annotations

from timeline_picture import colour_pixels, read_png, synthetic

from rundesign import run_of
from emulator.checkpoint.records import CkptRecord, LoadRecord, RankResult
from emulator.config import load_config
from emulator.results.report import format_table
from emulator.results.summary import build_results
from emulator.results.timeline import COLOURS, write_timeline
from emulator.units import GIB


def _rank(rank, *, d2h=(0.05, 0.08), gpu=True, sharing=2, bucketed=False, h2d=0.1, paced_snapshot=False):
    recs = []
    for i, d in enumerate(d2h):
        r = CkptRecord(step=5 * (i + 1), mode="async", rank=rank, node=0, start=100.0 + i, stall_s=d + 0.01,
                       snapshot_s=d + 0.005, local_write_s=0.5, file_bytes=GIB, global_complete=True,
                       paced={"snapshot": d} if paced_snapshot else {})
        if gpu:
            r.d2h_s, r.d2h_bytes = d, GIB
        recs.append(r.to_dict())
    load = LoadRecord(rank, 0, ok=True, step=10, tier="local", seconds=1.0, bytes=GIB, h2d_s=h2d if gpu else 0.0)
    device = {"kind": "cuda", "index": rank % 2, "count": 2, "sharing": sharing, "name": "NVIDIA H100"} if gpu \
        else {"kind": "cpu"}
    staging = {"host_bytes": GIB, "pinned_bytes": (GIB // 4) if bucketed else GIB, "budget_bytes": GIB // 4 if bucketed else GIB,
               "bucketed": bucketed, "buckets": 8 if bucketed else 1, "bucket_bytes": GIB // 8 if bucketed else GIB,
               "device_copies": gpu}
    return RankResult(rank=rank, node=0, state_bytes=GIB, emulated_bytes=GIB, records=recs,
                      loads=[load.to_dict()], page_cache_dropped=True,
                      modes={"async": {"start": 99.0, "train_end": 110.0, "end": 111.0, "steps": 10, "flush_s": 0.0,
                                       "compute": [(99.0, 100.0)], "at_risk": 0}},
                      events=[("stall", 100.0, 100.06), ("d2h", 100.0, 100.05)], local="dir", global_="dir",
                      stopped_early=False, failure=None, attempt=0, resume=[], recovery=None, fault_counts={},
                      content={}, content_audit=None, peak_rss_bytes=0, device=device, staging=staging).to_dict()


def _results(**kw):
    cfg = load_config(None, ["checkpoint.modes=[async]", "checkpoint.baseline=false", "parallelism.ranks=4"])
    return build_results(cfg, *run_of(cfg), [_rank(r, **kw) for r in range(4)])


def test_d2h_figures_and_device_sharing_are_reported():
    res = _results()
    m = res["modes"]["async"]
    assert abs(m["d2h_mean_s"] - 0.065) < 1e-9  # worst rank per checkpoint, mean over checkpoints
    assert abs(m["d2h_gib_s"] - (1 / 0.05 + 1 / 0.08) / 2) < 1e-6
    assert abs(m["full_size"]["d2h_mean_s"] - m["d2h_mean_s"] / res["scale"]) < 1e-9
    d = res["device"]
    assert d["kind"] == "cuda" and d["gpus"] == 2 and d["ranks_per_gpu"] == 2 and d["bucketed_ranks"] == 0
    assert abs(res["load"]["h2d_gib_s"] - 10.0) < 1e-6
    text = format_table(res)
    assert "of which device-to-host" in text and "device-to-host rate" in text and "16.2 GiB/s" in text
    assert "2 ranks share each GPU and its PCIe link" in text and "NVIDIA H100" in text
    assert "one pinned staging copy per rank" in text
    assert "host-to-device into the live tensors (after verification): 10.0 GiB/s" in text


def test_one_rank_per_gpu_and_bucketed_staging_are_said():
    text = format_table(_results(sharing=1, bucketed=True))
    assert "one rank per GPU" in text and "share each GPU" not in text
    assert "over the pinned budget (0.25 GiB < the state): staged in 8 buckets" in text


def test_uneven_sharing_is_said_as_a_range():
    cfg = load_config(None, ["checkpoint.modes=[async]", "checkpoint.baseline=false", "parallelism.ranks=3"])
    text = format_table(build_results(cfg, *run_of(cfg), [_rank(0, sharing=2), _rank(1, sharing=1), _rank(2, sharing=2)]))
    assert "1-2 ranks share each GPU" in text


def test_a_cpu_run_says_there_is_no_device_copy():
    res = _results(gpu=False)
    assert res["modes"]["async"]["d2h_mean_s"] == 0 and res["modes"]["async"]["d2h_gib_s"] == 0
    assert res["device"]["kind"] == "cpu" and res["load"]["h2d_gib_s"] == 0
    text = format_table(res)
    assert "device: state on the CPU: the snapshot is a host memmove" in text and "- (state on CPU)" in text
    assert "host-to-device" not in text


def test_a_cpu_run_whose_snapshot_was_paced_says_its_buffers_swap():
    text = format_table(_results(gpu=False, paced_snapshot=True))
    assert "device: state on the CPU: a snapshot swaps its host buffers, paced as the design's" in text


def test_timeline_draws_d2h_inside_the_stall(tmp_path):
    plain = synthetic()
    with_d2h = plain + [{"rank": e["rank"], "kind": "d2h", "start": e["start"], "end": e["start"] + 0.08}
                        for e in plain if e["kind"] == "stall"]
    counts = []
    for name, events in (("plain", plain), ("d2h", with_d2h)):
        write_timeline({"timeline": {"async": events}}, tmp_path / f"{name}.png")
        counts.append(colour_pixels(read_png(tmp_path / f"{name}.png"), COLOURS["d2h"]))
    assert counts[1] > counts[0] + 100, counts  # bars, not only the legend's patch
