"""Emulated tiers in a real run, and the shipped design configs.

One short run of the ``design-nvme-pfs`` design (shrunk to 2 ranks with ``--set``) with
the PFS share slowed so that a drain of the node's ~14 MiB takes about a third of a
second: the drain must take bytes / rate (the drainer copies all of the node's files
through the node's one share of the PFS, so the node's bytes queue behind each other),
and async checkpointing must hide it from training while sync pays it at every checkpoint.
The run's 2 ranks are a quarter of the design's node of 8, so they are paced at a quarter of its
PFS share (emulator/design/links.py ``node_fraction``): the design's 0.16 GiB/s, 0.04 here.
"""
import time

import pytest
from durations import assert_paced
from emu import ckpt_emu, results
from rundesign import rank_state

from emulator.checkpoint.checkpointer import Checkpointer
from emulator.config import load_config
from emulator.design.job import job_of
from emulator.design.links import tier_emulation
from emulator.rank.comm import SoloComm
from tiers.directory import DirTier
from tiers.base import TierWrapper
from tiers.emulated import EmulatedTier

GIB = 1 << 30
RATE_GIB_S = 0.04  # the run node's part of the PFS's aggregate, all of it the one node's (design.job.nodes: 1)
NODE_PART = 2 / 8  # the run's 2 ranks of the design's node of 8


@pytest.fixture(scope="module")
def pfs_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("emu")
    sets = [
        f"tiers.local.path={tmp}/nvme/node{{node}}", f"tiers.global.path={tmp}/pfs",
        f"design.global.write={RATE_GIB_S / NODE_PART:g}GiB/s",
        "parallelism.ranks=2", "run.scale=0.0005",
        # a 0.8 s interval here (0.2 s steps at scale 0.0005): the ~0.35 s drain plus the local write fit in it
        "training.step_seconds=400", "checkpoint.interval_steps=4", "checkpoint.saves=3", "checkpoint.loads=1",
        "checkpoint.baseline=false",
        "run.dilation=1",  # the PFS share is slower than this host: paced as it is, undilated
    ]
    args = ["run", "design-nvme-pfs", "--quiet", "--out", tmp / "out"]
    for s in sets:
        args += ["--set", s]
    proc = ckpt_emu(*args, check=True)
    return tmp, results(tmp / "out"), proc


def node_bytes_per_checkpoint(res, mode) -> dict:
    """step -> bytes node 0's drain copied (every rank file of the node)."""
    out = {}
    for r in res["per_rank"]:
        if r["node"] != 0:
            continue
        for rec in r["records"]:
            if rec["mode"] == mode:
                out[rec["step"]] = out.get(rec["step"], 0) + rec["file_bytes"]
    return out


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_drain_takes_bytes_over_rate(pfs_run, mode):
    _, res, _ = pfs_run
    assert "emulated: write 0.04 GiB/s" in res["tiers"]["global"] and "shared by node" in res["tiers"]["global"]
    m = res["modes"][mode]
    assert m["checkpoints"] == 3 and m["incomplete"] == 0
    per_step = node_bytes_per_checkpoint(res, mode)
    assert len(per_step) == 3 and min(per_step.values()) > 10 << 20  # 2 rank files of ~7 MiB each
    expected = sum(per_step.values()) / len(per_step) / (RATE_GIB_S * GIB)
    assert 0.25 < expected < 0.5
    # never faster than the rate (how much slower is the host's: its load, the verify, scheduling)
    assert_paced(m["drain_mean_s"], expected, "drain mean")
    for r in res["per_rank"]:  # every checkpoint, not just the mean
        for rec in r["records"]:
            if rec["mode"] == mode:
                want = per_step[rec["step"]] / (RATE_GIB_S * GIB)
                assert_paced(rec["drain_s"], want, f"drain of step {rec['step']}")


def test_async_hides_the_slow_drain_sync_pays_it(pfs_run):
    _, res, _ = pfs_run
    sync, asyn = res["modes"]["sync"], res["modes"]["async"]
    # sync: every checkpoint waits for the local write and the whole drain
    assert sync["stall_mean_s"] >= sync["drain_mean_s"] + sync["local_write_mean_s"] * 0.9
    # async: the snapshot only (the drain fits the interval)
    assert asyn["stall_mean_s"] < 0.2 * sync["stall_mean_s"], (asyn["stall_mean_s"], sync["stall_mean_s"])
    assert asyn["overhead_ratio"] < 0.3 * sync["overhead_ratio"]
    assert res["load"]["ok"] and res["load"]["served_by"] == {"local": 2}


def test_retention_is_not_part_of_the_sync_stall(tmp_path):
    """In process: a global tier with 50 ms per request makes retention's requests visible."""
    cfg = load_config("llama3-8b", ["run.scale=0.0002", "parallelism.ranks=1"])
    state = rank_state(cfg, 0)
    glob = _TimedDeletes(EmulatedTier(DirTier(tmp_path / "global"), latency_s=0.05))
    ckpt = Checkpointer(state, DirTier(tmp_path / "local"), glob, SoloComm(), keep=1)
    try:
        recs = [ckpt.checkpoint(step, "sync") for step in (1, 2, 3)]
    finally:
        ckpt.close()
    assert all(r.global_complete for r in recs)
    # the stall ends when the checkpoint is complete on the global tier (DOMAIN: staging, local
    # write, drain); deleting older checkpoints is housekeeping: inside the stall, its time past
    # the checkpoint's completion would hold at least one delete, each as long as this run's deletes took
    assert glob.deletes, "retention deleted nothing: the check would say nothing"
    one_delete = min(glob.deletes)
    assert all(r.stall_s - r.complete_s < one_delete for r in recs), ([r.stall_s - r.complete_s for r in recs], one_delete)


class _TimedDeletes(TierWrapper):
    """A tier that keeps how long each of its deletes took (its 50 ms request latency and the rest)."""

    def __init__(self, inner):
        super().__init__(inner)
        self.deletes = []

    async def delete(self, key):
        start = time.perf_counter()
        await super().delete(key)
        self.deletes.append(time.perf_counter() - start)


# ------------------------------------------------------------------ the shipped design configs

def _paced(cfg, name: str):
    """What a run of ``cfg`` paces tier ``name`` at (the design's node, before any dilation)."""
    return tier_emulation(cfg, name, job_of(cfg))


def test_design_nvme_pfs_config():
    cfg = load_config("design-nvme-pfs")
    local, glob, d = cfg.tiers.local, cfg.tiers.global_, cfg.design
    assert local.backend == "dir" and "{node}" in local.options.path
    assert d.job_nodes(cfg.parallelism.world_size) == 1 and d.nic_stated
    assert (d.local.write_bps, d.local.read_bps, d.local.duplex) == (6 * GIB, 7 * GIB, True)
    assert (d.global_.write_bps, d.global_.read_bps, d.global_.latency_s) == (GIB, 2 * GIB, 0.001)
    # the tiers are paced as the design's one node: its NVMe, and all of the PFS
    e_local, e_glob = (_paced(cfg, name) for name in ("local", "global"))
    assert (e_local.write_gib_s, e_local.read_gib_s, e_local.shared_by) == (6, 7, "node")
    assert glob.backend == "dir" and (e_glob.write_gib_s, e_glob.read_gib_s) == (1, 2)
    assert e_glob.shared_by == "node" and e_glob.latency_ms == 1
    assert cfg.checkpoint.modes == ("sync", "async") and cfg.parallelism.active_ranks == 8


def test_design_nvme_s3_config_takes_endpoint_and_bucket_overrides():
    cfg = load_config("design-nvme-s3")
    glob = cfg.tiers.global_
    assert glob.backend == "s3" and glob.options.bucket and glob.options.prefix and glob.options.endpoint_url is None
    assert cfg.design.global_.latency_s == 0.02 and cfg.design.local is not None
    e_glob = _paced(cfg, "global")
    assert e_glob.latency_ms == 20 and e_glob.shared_by == "node" and e_glob.write_gib_s == 1
    assert _paced(cfg, "local").write_gib_s == 6
    cfg = load_config("design-nvme-s3", ["tiers.global.bucket=my-bucket",
                                         "tiers.global.endpoint_url=http://127.0.0.1:9000"])
    assert (cfg.tiers.global_.options.bucket, cfg.tiers.global_.options.endpoint_url) == ("my-bucket", "http://127.0.0.1:9000")


def test_design_direct_pfs_config():
    cfg = load_config("design-direct-pfs")
    assert cfg.tiers.local is None and cfg.design.local is None
    assert cfg.checkpoint.modes == ("sync",)
    assert cfg.tiers.global_.backend == "dir" and cfg.design.global_.write_bps == GIB
    e_glob = _paced(cfg, "global")
    assert (e_glob.write_gib_s, e_glob.shared_by) == (1, "node")


@pytest.mark.parametrize("name", ["design-nvme-pfs", "design-nvme-s3", "design-direct-pfs", "design-memory-peer-pfs",
                                  "design-memory-nvme-s3"])
def test_design_configs_explain_themselves(name):
    from importlib import resources
    text = resources.files("emulator.presets").joinpath(f"{name}.yaml").read_text()
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert len(header) >= 10 and any("matter" in line for line in header)
