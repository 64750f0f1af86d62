"""Runs with ``checkpoint.engine: dcp`` through the real CLI and torchrun: the ranks save with PyTorch
DCP through our tiers (manifests, CRC32C, drains, restores as for torch_save), DCP's own converter
reads the global tier's checkpoint in a fresh process, the library's phases are measured, and a node
lost mid-run restores from S3 while the other restores from its host memory."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import crc32c
import pytest
from emu import ckpt_emu, results, run_two_agents, small_config
from level_runs import shm  # noqa: F401 - fixture
from s3server import ON_RGW, make_bucket, raw_client, s3_endpoint, s3_server  # noqa: F401 - pytest fixtures

from emulator.checkpoint.layout import Manifest

CONVERT = ("import sys, torch\n"
           "from torch.distributed.checkpoint.format_utils import dcp_to_torch_save\n"
           "dcp_to_torch_save(sys.argv[1], sys.argv[2])\n"
           "print(sum(t.nbytes for t in torch.load(sys.argv[2]).values()))\n")


def converted_bytes(folder: Path, tmp: Path) -> int:
    """The bytes DCP's own converter reads from a checkpoint folder, in a fresh process."""
    proc = subprocess.run([sys.executable, "-c", CONVERT, str(folder), str(tmp / "converted.pt")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return int(proc.stdout)


# a checkpoint every 2 s of wall time: longer than a pipeline here, so the async stall is DCP's staging;
# under the parallel part's load a pipeline took longer and the next checkpoint waited for it (a
# stall of 0.87 s where the calibrated model, which knows no such load, gave 0.11 s)
@pytest.mark.calm
def test_a_dcp_run_writes_dcp_checkpoints_that_dcp_converts(tmp_path):
    cfg = small_config(tmp_path, checkpoint={"engine": "dcp", "saves": 3, "loads": 1, "interval_steps": 4},
                       training={"step_seconds": 0.5})
    proc = ckpt_emu("run", cfg, "--quiet", timeout=600)
    assert proc.returncode == 0, proc.stderr
    res = results(tmp_path / "out")
    assert all(m["incomplete"] == 0 and m["checkpoints"] == 3 for m in res["modes"].values())
    assert res["load"]["ok"]
    newest = sorted((tmp_path / "global").glob("step_*/manifest.json"))[-1].parent
    manifest = Manifest.from_json((newest / "manifest.json").read_bytes())
    assert sorted(f.key.rsplit("/", 1)[1] for f in manifest.files) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    for f in manifest.files:
        data = (tmp_path / "global" / f.key).read_bytes()
        assert (len(data), f"{crc32c.crc32c(data):08x}") == (f.size, f.crc32c)
    assert converted_bytes(newest, tmp_path) == res["bytes"]["run_actual_state"]
    measured = res["engine"]["measured_s"]
    assert res["engine"]["name"] == "dcp" and set(measured) == {"sync", "async"}
    assert measured["async"]["staging_s"] > 0 and measured["sync"]["planning_s"] > 0
    assert measured["sync"]["write_s"] > 0 and measured["sync"]["finish_s"] > 0
    # the model of the run, calibrated by it, stalls as the run did (DCP's staging its async stall)
    sim = ckpt_emu("simulate", tmp_path / "out" / "config.json", "--as-run", "--calibrate",
                   tmp_path / "out" / "results.json", "--json", "--out", tmp_path / "sim", check=True)
    simulated = json.loads(sim.stdout)["modes"]
    for mode in ("sync", "async"):
        assert simulated[mode]["stall_mean_s"] == pytest.approx(res["modes"][mode]["stall_mean_s"], rel=0.15), mode


@ON_RGW
def test_async_dcp_with_host_memory_and_s3_restores_a_lost_node_from_s3(tmp_path, shm, s3_endpoint):  # noqa: F811
    """2 agents x 2 ranks, async: host memory every checkpoint, S3 every other; node 1 is lost after
    checkpoint 5, so it restores the step S3 holds (its .metadata the coordinator's), node 0 from its
    own memory (its node's copy of .metadata), every rank the same step."""
    bucket = make_bucket(s3_endpoint)
    cfg = small_config(tmp_path, ranks=4, checkpoint={"engine": "dcp", "saves": 5, "loads": 1, "modes": ["async"]},
                       tiers={"memory": {"backend": "dir", "path": str(shm / "node{node}")}, "local": None,
                              "global": {"backend": "s3", "bucket": bucket, "endpoint_url": s3_endpoint,
                                         "part_size_mib": 5, "interval_steps": 4}})
    outs = [tmp_path / "out", tmp_path / "out1"]
    run_two_agents(cfg, outs, "dcp-lose", nproc=2, args=("--lose-nodes", "5:1"), timeout=600)
    res = next(results(o) for o in outs if (o / "results.json").exists())
    (rec,) = res["recoveries"]
    assert rec["ok"] and rec["served_by"] == {"memory": 2, "global": 2} and rec["lost_nodes"] == [1]
    client = raw_client(s3_endpoint)
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]
    step = sorted(k for k in keys if k.endswith("/manifest.json"))[-1].rsplit("/", 1)[0]
    folder = tmp_path / "from-s3" / step.rsplit("/", 1)[-1]
    folder.mkdir(parents=True)
    for key in (k for k in keys if k.startswith(step + "/") and not k.endswith("manifest.json")):
        (folder / key.rsplit("/", 1)[1]).write_bytes(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    assert sorted(p.name for p in folder.iterdir()) == [".metadata"] + [f"__{r}_0.distcp" for r in range(4)]
    assert converted_bytes(folder, tmp_path) == res["bytes"]["run_actual_state"]
