"""Tiers as levels (issue 24) in real runs of the CLI: the memory tier is a folder on /dev/shm, as NVRx's
RAM disk and DLRover's shared memory are; two torchrun agents on 127.0.0.1 are two nodes. Each failure
class recovers from the nearest tier that survived it.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from crashcheck import verify_dir_tier
from emu import ckpt_emu, free_port, results, run_two_agents
from level_runs import _levels, shm  # noqa: F401 - helpers and fixtures shared with tests/unit/

from emulator.config import load_config
from emulator.job.outdir import OutDir
from emulator.rank.training import TrainedMark


def test_each_tier_takes_its_checkpoints_and_restores_alone(tmp_path, shm):
    """Memory every checkpoint, NVMe every 2nd, global every 4th: the tiers hold those steps,
    the report counts them, and a restore from each tier alone loads the same state."""
    cfg_path = _levels(tmp_path, shm, local={"interval_steps": 4}, global_={"interval_steps": 8},
                       checkpoint={"saves": 4, "loads": 1, "modes": ["sync"], "keep": 2})
    ckpt_emu("run", cfg_path, "--quiet", check=True, timeout=400)
    res = results(tmp_path / "out")
    cfg = load_config(str(cfg_path))
    # checkpoints at steps 2, 4, 6, 8; keep 2 on every tier
    assert verify_dir_tier(shm / "node0", cfg) == [6, 8]
    assert verify_dir_tier(tmp_path / "local" / "node0", cfg) == [4, 8]
    assert verify_dir_tier(tmp_path / "global", cfg, ranks=2) == [8]
    lv = res["levels"]
    assert {k: (v["every"], v["due"], v["complete"], v["at_risk"]) for k, v in lv.items()} == {
        "memory": (1, 4, 4, 0), "local": (2, 2, 2, 0), "global": (4, 1, 1, 0)}
    assert all(v["lag_max_s"] > 0 for v in lv.values())
    # a checkpoint's global lag includes its memory write and NVMe copy before it (the tiers' means
    # are over different checkpoints: a loaded host once made memory's four mean more than global's one)
    for rec in (r for pr in res["per_rank"] for r in pr["records"] if "global" in r["due"]):
        lags = rec["tiers"]
        assert lags["global"]["lag_s"] > lags["local"]["lag_s"] > lags["memory"]["lag_s"], lags
    m = res["modes"]["sync"]
    assert m["checkpoints"] == 4 and m["incomplete"] == 0 and m["at_risk"] == 0
    by_tier = res["restore_by_tier"]
    assert list(by_tier) == ["memory", "local", "global"]
    assert all(v["ok"] for v in by_tier.values())
    assert [v["step"] for v in by_tier.values()] == [8, 8, 8]
    report = (tmp_path / "out" / "report.txt").read_text()
    assert "memory  every   1" in report and "restore of the same state from each tier alone: memory" in report
    # the memory tier's recycled files are rewritten through mappings: those pages are the tier's
    # (tier_peak_bytes), so host memory takes them out of the ranks' peak RSS rather than count them twice
    ranks = res["per_rank"]
    assert all(r["mapped_tier_peak_bytes"] > 0 for r in ranks)
    assert res["host_memory"]["peak_rss_bytes"] == sum(r["peak_rss_bytes"] - r["mapped_tier_peak_bytes"] for r in ranks)


def test_process_crash_recovers_from_host_memory(tmp_path, shm):
    """A rank killed mid-write; torchrun restarts the ranks; host memory survived the crash, so the
    restore comes from it, not from NVMe or global (which hold older checkpoints)."""
    kill = {"rank": 1, "checkpoint": 3, "phase": "local_write", "attempt": 0}
    cfg_path = _levels(tmp_path, shm, local={"interval_steps": 4}, global_={"interval_steps": 8},
                       checkpoint={"saves": 4, "loads": 1, "modes": ["sync"]}, failures={"kill": [kill]})
    proc = subprocess.run([sys.executable, "-m", "emulator.cli", "run", str(cfg_path), "--quiet"],
                          capture_output=True, text=True, env=dict(os.environ, PET_MAX_RESTARTS="1"), timeout=400)
    assert proc.returncode == 0, proc.stderr
    res = results(tmp_path / "out")
    (rec,) = res["recoveries"]
    # killed writing checkpoint 3 (step 6): checkpoint 2 (step 4) is complete in memory and on NVMe
    assert rec["class"] == "process" and rec["ok"] and rec["step"] == 4
    assert rec["served_by"] == {"memory": 2}
    assert rec["lost_steps"] == 2
    report = (tmp_path / "out" / "report.txt").read_text()
    assert "recovery from a process failure: step 4" in report


def test_lost_node_without_peers_restores_from_global_and_every_rank_agrees(tmp_path, shm):
    """2 agents x 2 ranks; node 1 is lost after checkpoint 4 with its memory and NVMe: its ranks
    can only load from global storage, so every rank restores the step global holds (node 0 from
    its own memory), and the work since it is reported lost."""
    cfg_path = _levels(tmp_path, shm, ranks=4, local={"interval_steps": 4}, global_={"interval_steps": 8},
                       checkpoint={"saves": 5, "loads": 1, "modes": ["sync"]})
    outs = [tmp_path / "out", tmp_path / "out1"]
    run_two_agents(cfg_path, outs, "lose", nproc=2, args=("--lose-nodes", "5:1"), timeout=500)
    res = results(_rank0_out(outs))
    assert res["failure"]["kind"] == "lose_nodes" and res["failure"]["class"] == "node"
    (rec,) = res["recoveries"]
    # checkpoints at steps 2..10; global took the 4th (step 8); node 1's memory and NVMe are gone
    assert rec["ok"] and rec["step"] == 8 and rec["served_by"] == {"memory": 2, "global": 2}
    assert rec["lost_steps"] == 2 and rec["lost_nodes"] == [1]
    assert not any((shm / "node1").glob("step-*")) and not any((tmp_path / "local" / "node1").glob("step-*"))
    assert verify_dir_tier(shm / "node0")[-1] == 10


def _peer_run(tmp: Path, shm: Path, lose: str, *, saves=5, local_every=4, memory=None) -> dict:
    """2 agents x 2 ranks, replication factor 1: memory every checkpoint, a peer copy and NVMe
    every 2nd, global every 4th; nodes lost after checkpoint 5 (step 10; the peers hold step 8)."""
    cfg_path = _levels(tmp, shm, ranks=4, local={"interval_steps": local_every}, global_={"interval_steps": 8},
                       memory=memory, checkpoint={"saves": saves, "loads": 1, "modes": ["sync"]})
    data = yaml.safe_load(cfg_path.read_text())
    data["tiers"]["peer"] = {"replicas": 1, "placement": "jump", "interval_steps": 4}
    cfg_path.write_text(yaml.safe_dump(data))
    outs = [tmp / "out", tmp / "out1"]
    run_two_agents(cfg_path, outs, "peer", nproc=2, args=("--lose-nodes", lose), timeout=500)
    return results(_rank0_out(outs)), load_config(str(cfg_path))


def _rank0_out(outs: list) -> Path:
    """The results folder of the agent whose node got rank 0 (the rendezvous decides which)."""
    (out,) = [o for o in outs if (o / "results.json").exists()]
    return out


def test_lost_node_restores_from_its_peers_memory(tmp_path, shm):
    """Node 1 lost with its memory and NVMe: its replacement fetches its copy back from node 0's
    memory over the transport; every rank restores step 8, node 1's ranks from the fetched copy."""
    res, cfg = _peer_run(tmp_path, shm, "5:1")
    assert res["failure"]["class"] == "node" and res["failure"]["fetch_errors"] == []
    (rec,) = res["recoveries"]
    assert rec["ok"] and rec["step"] == 8 and rec["served_by"] == {"memory": 4}
    assert rec["fetch_s"] > 0 and rec["seconds"] > rec["fetch_s"]
    # the fetched copy is node 1's own state at step 8, bit for bit
    assert 8 in verify_dir_tier(shm / "node1", cfg)
    assert res["levels"]["peer"]["complete"] == res["levels"]["peer"]["due"] == 2
    # the held copies recycle their pages as the memory tier does, and the pool goes at the end
    assert not list(shm.glob("node*/.recycle/*")) and not list(shm.glob("node*-peers/.recycle/*"))
    report = (_rank0_out([tmp_path / "out", tmp_path / "out1"]) / "report.txt").read_text()
    assert "fetching from a peer" in report.split("recovery from a node failure")[1]


def test_the_others_keep_the_step_of_the_newest_peer_copy_so_a_lost_node_recovers_to_it(tmp_path, shm):
    """Memory keeps 1, peer copies every 2nd checkpoint: node 1 lost after checkpoint 7 (step 14)
    gets its step-12 copy back, and node 0 still has step 12 in memory (its own held copies' step
    is kept past the tier's count), so every rank restores step 12, not global's step 8."""
    res, cfg = _peer_run(tmp_path, shm, "7:1", saves=7, local_every=8, memory={"keep": 1})
    (rec,) = res["recoveries"]
    assert rec["ok"] and rec["step"] == 12 and rec["served_by"] == {"memory": 4}, rec
    assert rec["lost_steps"] == 2
    held = sorted(int(m.parent.name.split("_")[1]) for m in (shm / "node0-peers").glob("step_*/manifest.json"))
    assert held == [8, 12]  # node 1's copies, the peer tier's keep (2)
    assert verify_dir_tier(shm / "node0") == [8, 12, 14]  # memory's keep (1), and the steps held for the peer


def test_lost_replica_group_restores_from_global(tmp_path, shm):
    """Both nodes lost: no peer copy survives (a whole replica group), so every rank restores the
    step global holds."""
    res, _ = _peer_run(tmp_path, shm, "5:0,1")
    assert res["failure"]["class"] == "group"
    (rec,) = res["recoveries"]
    assert rec["ok"] and rec["step"] == 8 and rec["served_by"] == {"global": 4} and rec["lost_nodes"] == [0, 1]


def _agent(cfg: Path, out: Path, port: int, node_rank: int) -> subprocess.Popen:
    """One node of 2 ranks: ``ckpt-emu run`` with a fixed node rank (static rendezvous at node 0),
    allowed one restart of its ranks."""
    return subprocess.Popen([sys.executable, "-m", "emulator.cli", "run", str(cfg), "--quiet", "--out", str(out),
                             "--nnodes", "2", "--nproc-per-node", "2", "--node-rank", str(node_rank),
                             "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"replace-{port}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PET_MAX_RESTARTS="1"))


def _peer_config(tmp: Path, shm: Path) -> Path:
    """2 nodes x 2 ranks, 1 s steps: memory every checkpoint, a peer copy (replication factor 1)
    and NVMe every 2nd, global every 4th; 8 checkpoints."""
    cfg_path = _levels(tmp, shm, ranks=4, local={"interval_steps": 4}, global_={"interval_steps": 8},
                       checkpoint={"saves": 8, "loads": 1, "modes": ["sync"]}, training={"step_seconds": 1.0})
    data = yaml.safe_load(cfg_path.read_text())
    data["tiers"]["peer"] = {"replicas": 1, "placement": "jump", "interval_steps": 4}
    cfg_path.write_text(yaml.safe_dump(data))
    return cfg_path


def _wait_for_checkpoint(out: Path, rank: int, step: int, agent: subprocess.Popen, timeout: float = 300) -> None:
    """Until ``rank`` has finished checkpoint ``step`` in its first attempt (its records file)."""
    records = OutDir(out).records(rank, 0)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and agent.poll() is None:
        lines = records.read_text().splitlines() if records.exists() else []
        if any(json.loads(x)["event"] == "finished" and json.loads(x)["step"] == step for x in lines if x.strip()):
            return
        time.sleep(0.05)
    raise AssertionError(f"rank {rank} never finished step {step}: {agent.poll()=}")


def _lose_node(tmp: Path, shm: Path, lost: subprocess.Popen, out: Path, survivor: Path, node: int = 1) -> None:
    """Once ``node`` finished checkpoint 4 (step 8; the peers' newest until checkpoint 6, 4
    training seconds later) and the surviving node (its results in ``survivor``) trained a step past
    it (work the failure loses: on a loaded host the checkpoint's end and the kill could both come
    before step 9), kill its launcher; its memory, NVMe, held copies and results go with it."""
    _wait_for_checkpoint(out, 2 * node, 8, lost)
    deadline = time.monotonic() + 120
    while TrainedMark.read(OutDir(survivor).trained(0)) <= 8 and time.monotonic() < deadline:
        time.sleep(0.02)
    lost.kill()
    lost.communicate(timeout=60)
    for gone in (shm / f"node{node}", shm / f"node{node}-peers", tmp / "local" / f"node{node}", out):
        shutil.rmtree(gone)


def test_node_lost_with_its_agent_is_replaced_and_restores_from_its_peers_memory(tmp_path, shm):
    """Node 1's launcher is SIGKILLed once the peers hold step 8: its agent and ranks die, and its
    memory, NVMe and the copies it held go with the machine. Node 0's agent restarts its ranks and
    waits; a replacement started with node 1's rank fetches node 1's copy back from node 0's memory
    over the transport, and every rank restores step 8 from memory, the bytes verified."""
    cfg_path = _peer_config(tmp_path, shm)
    port, out0, out1 = free_port(), tmp_path / "out0", tmp_path / "out1"
    survivor, lost = _agent(cfg_path, out0, port, 0), _agent(cfg_path, out1, port, 1)
    try:
        _lose_node(tmp_path, shm, lost, out1, out0)
        replacement = _agent(cfg_path, out1, port, 1)
        for agent in (survivor, replacement):
            _, err = agent.communicate(timeout=500)
            assert agent.returncode == 0, err
    finally:
        for agent in (survivor, lost):
            agent.kill()
    res, cfg = results(out0), load_config(str(cfg_path))
    (rec,) = res["recoveries"]
    assert rec["class"] == "node" and rec["lost_nodes"] == [1] and rec["fetch_errors"] == []
    assert rec["ok"] and rec["step"] == 8 and rec["served_by"] == {"memory": 4}
    assert rec["fetch_s"] > 0 and rec["seconds"] > rec["fetch_s"] and rec["lost_steps"] >= 1
    # node 1's checkpoints since go on from the fetched step 8: each verifies bit for bit against
    # a replay of its lineage, which runs through step 8
    steps = verify_dir_tier(shm / "node1", cfg)
    manifest = json.loads((shm / "node1" / f"step_{steps[-1]:08d}" / "manifest.json").read_text())
    assert manifest["meta"]["lineage"][0] == [1, 8] and res["faults"]["attempt"] == 1


def _slow_design(tmp: Path, shm: Path, peer: bool = True) -> Path:
    """2 nodes x 2 ranks at rates slow enough that bytes, not the pipeline's own steps, set every
    stage: memory 50 MiB/s, a 200 Mb/s NIC to the peer, NVMe 20 MiB/s, global 25 MiB/s for the
    job (12.5 MiB/s a node when both read, 23.8 MiB/s (the NIC) for one alone); memory every
    checkpoint, peer (unless ``peer`` is false) and NVMe every 2nd, global every 4th."""
    cfg_path = _levels(tmp, shm, ranks=4, local={"interval_steps": 4}, global_={"interval_steps": 8},
                       training={"step_seconds": 1.5},
                       checkpoint={"saves": 4, "loads": 1, "modes": ["async"], "keep": 1})
    data = yaml.safe_load(cfg_path.read_text())
    if peer:
        data["tiers"]["peer"] = {"replicas": 1, "interval_steps": 4}
    data["design"] = {"job": {"nodes": 2, "accelerators_per_node": 2},
                      "node": {"memory": {"capacity": "2TiB", "write": "50MiB/s"},
                               "local": {"write": "20MiB/s", "read": "20MiB/s", "duplex": True},
                               "nic": "200Mb/s"},
                      "global": {"write": "25MiB/s", "read": "25MiB/s"}}
    cfg_path.write_text(yaml.safe_dump(data))
    return cfg_path


# the calibration's rates are the run's: under the parallel part's load they are not those of its recovery
@pytest.mark.calm
@pytest.mark.parametrize("lose, failure_class, peer", [("4:1", "node", True), ("4:0,1", "group", True),
                                                      ("4:1", "node", False)])
def test_simulate_as_run_reproduces_the_recovery_and_the_tiers_lags_and_overlaps(tmp_path, shm, lose,
                                                                                failure_class, peer):
    """The issue's check: calibrated by a real run (its rates: each tier's stage and each tier's
    restore alone, a lost node's fetch from its peer, and the memory tier's lag), `simulate --nodes 2
    --as-run` predicts the other tiers' lags and overlaps and the failure class's recovery within
    15 %. Without peers a lost node restores from global alone, at the NIC, while a group loss reads
    it in a storm. The fetch itself ran at the design's NIC (a lower bound pacing guarantees)."""
    cfg_path = _slow_design(tmp_path, shm, peer)
    outs = [tmp_path / "out", tmp_path / "out1"]
    run_two_agents(cfg_path, outs, "asrun", nproc=2, args=("--lose-nodes", lose), timeout=500)
    out = _rank0_out(outs)
    res = results(out)
    proc = ckpt_emu("simulate", cfg_path, "--nodes", "2", "--as-run", "--calibrate", out / "results.json",
                    "--out", tmp_path / "sim", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)  # as run: the run's bytes and its (scaled) times
    sim = out["modes"]["async"]["tiers"]
    for tier in ("peer", "local", "global") if peer else ("local", "global"):
        measured, simulated = res["levels"][tier], sim[tier]
        assert simulated["lag_mean_s"] == pytest.approx(measured["lag_mean_s"], rel=0.15), tier
        assert simulated["overlap"] == pytest.approx(measured["overlap"], rel=0.15), tier
    if peer:  # the probe timed the peer sends too, against the design's NIC, with the node's files
        probe = next(p for p in res["dilation"]["phases"] if p["phase"] == "replicate")
        assert (probe["tier"], probe["design_bytes_per_s"]) == ("peer", pytest.approx(200e6 / 8))
        assert probe["node_bytes"] == pytest.approx(res["restore_by_tier"]["memory"]["node_bytes"], rel=0.05)
    (rec,) = res["recoveries"]
    assert rec["class"] == failure_class and rec["ok"]
    if failure_class == "node" and peer:  # the fetch from the peer ran at the design's NIC (200 Mb/s) / D,
        # its files' bytes booked as the design's (less torch.save's structure)
        design_bytes = res["restore_by_tier"]["memory"]["node_bytes"] * res["bytes"]["design_per_file_byte"]
        nic_fetch_s = design_bytes / (200e6 / 8 / res["dilation"]["factor"])
        assert rec["fetch_s"] >= nic_fetch_s, (rec["fetch_s"], nic_fetch_s)  # never faster than its NIC
        assert rec["fetch_paced_s"] == pytest.approx(nic_fetch_s, rel=0.15), (rec, nic_fetch_s)  # booked at it
    (classes,) = out["design"]["classes"].values()  # the restore the design predicts for the run
    print(f"{failure_class}: restore predicted {classes[failure_class]['restore_s']:.3f} s, "
          f"measured {rec['seconds']:.3f} s (fetch {rec.get('fetch_s', 0):.3f} s)")
    assert classes[failure_class]["restore_s"] == pytest.approx(rec["seconds"], rel=0.15), (classes, rec)
