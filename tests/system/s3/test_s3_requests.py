"""S3 request accounting (tiers/s3_requests.py) and its cost (emulator/simulation/s3cost.py), on both servers (whole runs on RGW).

A real run with a known layout (2 ranks, files of ~7 MiB in 5 MiB parts) must count, per
checkpoint and per restore, exactly the requests a hand count gives; the tier's hook must
count what went over the wire (a counting proxy sees the same), retries included; the
documented cost example (docs/s3-requests.md) must equal a hand calculation; a malformed price table
is one line, exit 2, nothing written.
"""
import asyncio
import math
import os
import re
from pathlib import Path

import pytest
from emu import ckpt_emu, results, small_config
from httpfaults import Rule, S3FaultProxy
from paths import ROOT
from s3server import ON_RGW, make_bucket, s3_endpoint, s3_server  # noqa: F401 - pytest fixtures

from emulator.config.schema import CostConfig
from emulator.simulation import s3cost
from tiers.s3 import S3Tier
from tiers.s3_requests import Bill, charged_to

MIB = 1 << 20
RANKS = 2
PART_MIB = 5
DOCS = ROOT / "docs" / "s3-requests.md"


def run_s3(tmp: Path, endpoint: str, *, local: bool, **sections) -> dict:
    bucket = make_bucket(endpoint)
    cfg = small_config(tmp, ranks=RANKS, local=local, **sections,
                       tiers={"global": {"backend": "s3", "bucket": bucket, "prefix": "acct",
                                         "endpoint_url": endpoint, "part_size_mib": PART_MIB}})
    ckpt_emu("run", cfg, "--quiet", check=True)
    return results(tmp / "out")


def parts_of(res: dict) -> int:
    sizes = {x["file_bytes"] for r in res["per_rank"] for x in r["records"]}
    parts = {math.ceil(s / (PART_MIB * MIB)) for s in sizes}
    assert len(parts) == 1, sizes
    return parts.pop()


# ------------------------------------------------------------------ a drained run

@pytest.fixture(scope="module")
def drained(s3_endpoint, tmp_path_factory):
    return run_s3(tmp_path_factory.mktemp("drained"), s3_endpoint, local=True,
                  checkpoint={"saves": 3, "loads": 1, "keep": 2, "modes": ["sync", "async"]},
                  drain={"verify": "size"})


@ON_RGW
def test_checkpoint_requests_equal_a_hand_count(drained):
    parts = parts_of(drained)
    assert parts == 2  # ~7 MiB files in 5 MiB parts: multipart uploads
    upload = {"CreateMultipartUpload": RANKS, "UploadPart": RANKS * parts, "CompleteMultipartUpload": RANKS,
              "HEAD": RANKS}  # per file: create, its parts, complete; drain.verify=size: one HEAD
    manifest = {"PUT": 1, "HEAD": 1}  # the lease re-read (still ours?) before the manifest
    # retention after checkpoint k (keep 2): LIST the steps, GET each complete manifest (k, at most 3);
    # the third also deletes the oldest: its manifest, a LIST of its folder, its 2 files
    retention = [{"LIST": 1, "GET": 1}, {"LIST": 1, "GET": 2}] + [{"LIST": 2, "GET": 3, "DELETE": 1 + RANKS}] * 4
    measured = drained["s3"]["measured"]["checkpoints"]  # sync, then async (its retention runs in the background)
    assert [(c["mode"], c["step"]) for c in measured] == [("sync", 2), ("sync", 4), ("sync", 6),
                                                          ("async", 8), ("async", 10), ("async", 12)]
    for ckpt, ret in zip(measured, retention):
        want = dict(upload)
        for part in (manifest, ret):
            for k, v in part.items():
                want[k] = want.get(k, 0) + v
        assert ckpt["requests"] == dict(sorted(want.items())), ckpt["step"]
    # the layout model is the steady state (the third checkpoint) of the same hand count
    model = s3cost.checkpoint_requests(RANKS, drained["per_rank"][0]["records"][-1]["file_bytes"],
                                       PART_MIB * MIB, verify="size", keep=2)
    assert model == measured[-1]["requests"]


@ON_RGW
def test_restore_from_the_local_tier_lists_s3_once(drained):
    """Rank 0 alone lists the global tier (no LIST storm), even when every rank reads its local copy."""
    assert drained["load"]["served_by"] == {"local": RANKS}
    assert drained["s3"]["measured"]["restores"] == [{"LIST": 1}]


@ON_RGW
def test_report_and_results_carry_requests_and_cost(drained):
    report = (Path(drained["config"]["run"]["out"]) / "report.txt").read_text()
    assert "S3 requests per checkpoint (all ranks, retention included): " in report
    assert "S3 cost at full size, at the global tier's interval: $" in report
    assert "AWS S3 Standard, us-east-1, public price list as of 2025" in report
    cost = drained["s3"]["full_size"]["cost"]
    assert cost["per_day_usd"] == pytest.approx(cost["requests_per_day_usd"] + cost["storage_per_day_usd"])
    total = drained["s3"]["measured"]["total"]  # everything, the lease and start-up included
    for kind, n in drained["s3"]["measured"]["checkpoint_mean"].items():
        assert total[kind] >= n * 6


# ------------------------------------------------------------------ straight to S3, restored from S3

@ON_RGW
def test_restore_from_s3_equals_a_hand_count(s3_endpoint, tmp_path):
    res = run_s3(tmp_path, s3_endpoint, local=False,
                 checkpoint={"saves": 1, "loads": 1, "keep": 2, "modes": ["sync"]})
    parts = parts_of(res)
    written = res["s3"]["measured"]["checkpoints"][0]["requests"]
    assert written == {"CompleteMultipartUpload": RANKS, "CreateMultipartUpload": RANKS, "GET": 1, "LIST": 1,
                       "PUT": 1, "HEAD": 1, "UploadPart": RANKS * parts}  # no drain or verification; the lease's HEAD
    assert res["load"]["served_by"] == {"global": RANKS}
    # rank 0 LISTs the steps once; per rank: GET the manifest, HEAD the file and one GET of the data,
    # read as the run lays it out (a file under 4 parts is read in one; no GETs of torch.load's structure)
    per_rank = {"HEAD": 1, "GET": 1 + 1}
    hand = {"LIST": 1, **{k: v * RANKS for k, v in per_rank.items()}}
    assert res["s3"]["measured"]["restores"] == [dict(sorted(hand.items()))]
    assert s3cost.restore_requests(RANKS, 7 * MIB, PART_MIB * MIB) == hand


# ------------------------------------------------------------------ the hook counts what the server saw

def test_hook_counts_every_attempt_as_the_wire_saw_it(s3_endpoint, s3_server):
    if not s3_endpoint.startswith("http://"):
        pytest.skip("the counting proxy speaks plain HTTP")
    proxy = S3FaultProxy(s3_endpoint)
    proxy.rules.append(Rule("PUT", "partNumber", 503, "SlowDown", remaining=1))  # one part answered 503
    bucket = make_bucket(s3_endpoint)
    tier = S3Tier(bucket, endpoint_url=proxy.url, part_size=5 * MIB, max_attempts=3)
    bill = Bill("checkpoint")

    async def work():
        with charged_to(bill):
            await tier.put("a", os.urandom(12 * MIB))  # 3 parts, one of them sent twice
            await tier.size("a")
        await tier.list("")  # not charged to the bill, still counted by the tier
    try:
        asyncio.run(work())
        asyncio.run(tier.close())
    finally:
        proxy.close()
    assert bill.counts() == {"CreateMultipartUpload": 1, "UploadPart": 4, "CompleteMultipartUpload": 1, "HEAD": 1}
    assert tier.requests.counts() == {**bill.counts(), "LIST": 1}
    assert len(proxy.requests) == sum(tier.requests.counts().values())


def test_metrics_count_requests_by_kind_and_phase():
    from prometheus_client import CollectorRegistry

    from emulator.metrics import Metrics
    reg = CollectorRegistry()
    m = Metrics(reg, tick_s=0)
    assert reg.get_sample_value("ckpt_emu_s3_requests_total", {"kind": "UploadPart", "phase": "restore"}) == 0
    bill = Bill("checkpoint", m.count_s3_request)
    bill.add("UploadPart")
    bill.add("UploadPart")
    assert reg.get_sample_value("ckpt_emu_s3_requests_total", {"kind": "UploadPart", "phase": "checkpoint"}) == 2
    with pytest.raises(ValueError):
        m.count_s3_request("UploadPart", "lunch")


# ------------------------------------------------------------------ cost

def test_documented_cost_example_equals_a_hand_calculation():
    """docs/s3-requests.md: 512 files of 10 GiB in 64 MiB parts, drain.verify=size, keep 2, every 30 min."""
    ckpt = s3cost.checkpoint_requests(512, 10 << 30, 64 * MIB, verify="size", keep=2)
    put_class = 512 * (1 + 160 + 1) + 1 + 2  # create + 160 parts + complete per file; manifest; 2 LISTs
    get_class = 512 + 1 + 3                  # a HEAD per file; the lease's; 3 manifests read by retention
    assert s3cost.by_price_class(ckpt) == {"put": put_class, "get": get_class, "free": 513}
    per_ckpt = put_class / 1000 * 0.005 + get_class / 1000 * 0.0004
    storage_day = 2 * 5120 * 0.023 / (730 / 24)
    restore = s3cost.restore_requests(512, 10 << 30, 64 * MIB)
    per_restore = 1 / 1000 * 0.005 + 512 * (1 + 1 + 160) / 1000 * 0.0004 + 5120 * 0.09
    fig = s3cost.cost_figures(CostConfig(), checkpoint=ckpt, checkpoint_bytes=5120 << 30, keep=2, interval_s=1800,
                              restore=restore, restore_bytes=5120 << 30)
    assert fig["per_checkpoint_usd"] == pytest.approx(per_ckpt)
    assert fig["per_day_usd"] == pytest.approx(48 * per_ckpt + storage_day)
    assert fig["per_run_usd"] == pytest.approx(54 * (48 * per_ckpt + storage_day))
    assert fig["per_restore_usd"] == pytest.approx(per_restore)
    assert s3cost.format_cost(fig) in DOCS.read_text()  # the page shows exactly this line


@pytest.mark.parametrize("override, key", [("cost.put_per_1000=abc", "cost.put_per_1000"),
                                           ("cost.gb_month=-0.02", "cost.gb_month"),
                                           ("cost.per_request=1", "cost.per_request"),
                                           ("cost=[1,2]", "cost")])
def test_malformed_price_table_is_one_line_and_exit_2(tmp_path, override, key):
    cfg = small_config(tmp_path, ranks=1)
    proc = ckpt_emu("run", cfg, "--quiet", "--set", override, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and re.match(rf"ckpt-emu: error: {re.escape(key)}: ", proc.stderr), proc.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "local").exists()


# ------------------------------------------------------------------ simulate: the job's requests and rates

def test_simulate_scales_requests_to_the_job_from_the_layout(tmp_path):
    """design-nvme-s3 on 4 nodes: 8 files of 3.27 GiB per node in 16 MiB parts, drain.verify=checksum."""
    import json
    proc = ckpt_emu("simulate", "design-nvme-s3", "--nodes", "4", "--days", "1", "--json", "--out", tmp_path,
                    check=True)
    info = json.loads(proc.stdout)
    (group,) = info["design"]["groups"]
    files, parts = group["nodes"] * group["files"], math.ceil(group["file_bytes"] / (16 * MIB))
    assert (files, parts) == (32, 210)
    s3 = info["s3"]
    assert s3["checkpoint"] == {"CreateMultipartUpload": files, "UploadPart": files * parts,
                                "CompleteMultipartUpload": files, "HEAD": files + 1,  # + the lease's
                                "GET": files * parts + 3,  # the read-back in ranged GETs; retention's 3
                                "PUT": 1, "LIST": 2, "DELETE": files + 1}
    assert s3["restore"] == {"LIST": 1, "HEAD": files, "GET": files * (1 + parts)}
    assert s3["drain_per_s"]["put"] > 0 and s3["restore_per_s"]["get"] > 0
    assert s3["cost"]["per_checkpoint_usd"] == pytest.approx(
        (files * (parts + 2) + 3) / 1000 * 0.005 + (files * (parts + 1) + 4) / 1000 * 0.0004)
    text = ckpt_emu("simulate", "design-nvme-s3", "--nodes", "4", "--days", "1", "--out", tmp_path, check=True)
    assert "GET-class/s" in text.stdout and "S3 cost at the simulated interval: $" in text.stdout


# ------------------------------------------------------------------ tune: the cost at the recommended interval

def test_tune_prices_the_jobs_checkpoint_at_the_recommended_interval(tmp_path, monkeypatch):
    """tune's emulation runs faked as in test_tune.py; the global tier is S3 in 64 MiB parts."""
    import copy

    import yaml
    from tune_fakes import L405_SUBSET, faked_paced_tune

    from emulator.config import load_config
    from emulator.design import resolve
    data = copy.deepcopy(L405_SUBSET)
    data["tiers"]["global"] = {"backend": "s3", "bucket": "priced", "part_size_mib": 64,
                               "emulate": {"write_gib_s": 400.0, "read_gib_s": 800.0, "shared_by": "job"}}
    path = tmp_path / "l405-s3.yaml"
    path.write_text(yaml.safe_dump(data))
    cfg = load_config(str(path), [f"run.out={tmp_path / 'out'}"])
    tune_mod, runs = faked_paced_tune(monkeypatch)
    r = tune_mod.tune(cfg, accelerators=16384)
    put_class = get_class = 0
    for g in resolve(runs[0]).job.groups:  # every file of a group at its largest size
        parts = math.ceil(g.file_bytes / (64 * MIB))
        read_back = 1 if parts <= 4 else parts  # drain.verify=checksum reads every copy back
        put_class += g.nodes * g.files * (parts + 2)
        get_class += g.nodes * g.files * (1 + read_back)
    put_class, get_class = put_class + 1 + 2, get_class + 3  # the manifest, retention's LISTs; its GETs
    per_ckpt = put_class / 1000 * 0.005 + get_class / 1000 * 0.0004
    storage_day = 2 * r["checkpoint_bytes"] / (1 << 30) * 0.023 / (730 / 24)
    cost = r["s3_cost"]
    # checkpoints a day as the global volume counts them, while the job runs (failures take their share of
    # the day): fewer than a day over the recommended global interval
    assert cost["interval_s"] == pytest.approx(86400 / r["global_volume"]["checkpoints_per_day"], rel=1e-6)
    assert cost["interval_s"] > r["recommended"]["tier_interval_s"]["global"]
    assert cost["per_checkpoint_usd"] == pytest.approx(per_ckpt)
    assert cost["per_day_usd"] == pytest.approx(86400 / cost["interval_s"] * per_ckpt + storage_day)
    assert f"S3 cost at the recommended interval: {s3cost.format_cost(cost)}" in tune_mod.format_tune(r)
