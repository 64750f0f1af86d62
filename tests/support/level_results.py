"""A design with levels (memory, a peer, NVMe, global storage on a 2-node job) and the results.json a
one-node run of it would write, by hand (one node of 8 ranks at scale 0.01): a calibration whose every
figure is known, for the simulator's and the planner's tests; and the designs the planner's tests share
(the same levels described once, the issue's 70B design).
"""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from emulator.config import load_config


NODE, FILES, SCALE = 10 ** 9, 8, 0.01
#: seconds at the run's scale of each tier's stage for one node's 1 GB, and of a restore from it
STAGES = {"memory": 0.0625, "peer": 0.025, "local": 0.125, "global": 0.125}   # 16, 40, 8, 8 GB/s
RESTORES = {"memory": 0.0625, "local": 0.125, "global": 0.2}                   # 16, 8, 5 GB/s
SNAPSHOT, RESIDUAL = 0.0025, 0.01


def level_config(tmp: Path, *, peer=True, modes=("sync", "async"), **tiers) -> Path:
    """Llama 3 8B on a 2-node design: memory, peer (1 replica), NVMe and global storage."""
    data = {
        "extends": "llama3-8b",
        "run": {"out": str(tmp / "out")},
        "training": {"step_seconds": 60.0},
        "checkpoint": {"interval_steps": 5, "modes": list(modes)},
        "drain": {"verify": "size"},
        "tiers": {"memory": {"backend": "dir", "path": str(tmp / "shm"), **tiers.get("memory", {})},
                  "peer": {"replicas": 1, **tiers.get("peer", {})} if peer else None,
                  "local": {"backend": "dir", "path": str(tmp / "local"), **tiers.get("local", {})},
                  "global": {"backend": "dir", "path": str(tmp / "global"), **tiers.get("global_", {})}},
        "design": {"job": {"nodes": 2, "accelerators_per_node": 8},
                   "node": {"memory": {"capacity": "512GiB", "write": "20GB/s", "read": "20GB/s"},
                            "local": {"write": "10GB/s", "read": "10GB/s"}, "nic": "400Gb/s"},
                   "global": {"write": "20GB/s", "read": "20GB/s"}},
    }
    path = tmp / "levels.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def level_results(tmp: Path, cfg_path: Path, *, missed_wait: float = 0.0, dilation: float = 1.0,
                  node_fetch_s: float | None = None) -> Path:
    """The results.json of a one-node run of ``cfg_path`` at scale 0.01, by hand: every checkpoint to
    every tier (memory first), the stages of :data:`STAGES`, a restore from each tier alone, a crash and
    a group loss recovered (their full-size seconds), and in async mode one checkpoint that waited
    ``missed_wait`` for the previous retention. ``dilation``: the run's run.dilation (its times as written).
    ``node_fetch_s``: also a node lost and recovered from its peer's copy, fetched in that many seconds."""
    cfg = load_config(str(cfg_path), [f"run.scale={SCALE}"])
    due = ["memory", "peer", "local", "global"]
    work = sum(STAGES.values())

    def record(mode, step, rank, missed=False):
        complete = SNAPSHOT + work + RESIDUAL + (missed_wait if missed else 0.0)
        tiers = {t: {"complete": True, "lag_s": 0.0, "seconds": s} for t, s in STAGES.items()}
        return {"mode": mode, "step": step, "rank": rank, "node": 0, "wait_s": 0.0, "snapshot_s": SNAPSHOT,
                "stall_s": SNAPSHOT if mode == "async" else complete, "local_write_s": STAGES["memory"],
                "drain_s": STAGES["global"], "complete_s": complete, "file_bytes": NODE // FILES,
                "written_to": "memory", "missed": missed, "global_complete": True, "error": None, "due": due,
                "tiers": tiers}
    records = [record(m, 5 * (i + 1), r, missed=m == "async" and i == 2 and missed_wait > 0)
               for m in ("sync", "async") for i in range(3) for r in range(FILES)]
    raw = {"config": cfg.to_dict(), "nodes": 1, "ranks": FILES, "step_seconds": {"full_size": 60.0},
           "dilation": {"factor": dilation, "auto": True}, "time_factor": SCALE * dilation,
           "modes": {m: {"training_wall_s": 10.0, "stall_total_s": 0.1, "steps": 15} for m in ("sync", "async")},
           "load": {"recovery_mean_s_by_tier": {}},
           "per_rank": [{"rank": r, "node": 0, "records": [x for x in records if x["rank"] == r]}
                        for r in range(FILES)],
           "restore_by_tier": {t: {"ok": True, "seconds": s, "node_bytes": NODE} for t, s in RESTORES.items()},
           "recoveries": [{"class": "process", "seconds": 0.02, "seconds_full_size": 2.0, "served_by": {"memory": 8}},
                          {"class": "group", "seconds": 0.3, "seconds_full_size": 30.0, "served_by": {"global": 8}}]}
    if node_fetch_s is not None:
        raw["recoveries"].append({"class": "node", "seconds": node_fetch_s + RESTORES["memory"], "fetch_s": node_fetch_s,
                                  "seconds_full_size": 9.0, "served_by": {"memory": 8}, "fetch_errors": []})
    path = tmp / "results.json"
    path.write_text(json.dumps(raw))
    return path


def described_levels(tmp_path, **extra) -> str:
    """Llama 3 8B on 2 nodes: host memory, a peer copy, NVMe and global storage, each described once."""
    data = {"extends": "llama3-8b", "training": {"step_seconds": 60.0}, "checkpoint": {"interval_steps": 5},
            "tiers": {"memory": {"backend": "dir", "path": str(tmp_path / "shm")}, "peer": {"replicas": 1},
                      "local": {"backend": "dir", "path": str(tmp_path / "local")},
                      "global": {"backend": "dir", "path": str(tmp_path / "global")}},
            "design": {"job": {"nodes": 2, "accelerators_per_node": 8},
                       "node": {"memory": {"capacity": "512GiB", "write": "20GB/s", "read": "20GB/s"},
                                "local": {"write": "10GB/s", "read": "10GB/s"}, "nic": "400Gb/s"},
                       "global": {"write": "20GB/s", "read": "20GB/s"}}}
    data.update(extra)
    path = tmp_path / "design.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


LLAMA70B = {  # the 70B design: 128 nodes, a 200 Gb/s NIC, a 6 GB/s NVMe, a 100 GB/s object store
    "extends": "llama3-70b-subset", "training": {"step_seconds": 10.0}, "checkpoint": {"interval_steps": 25},
    "design": {"job": {"nodes": 128}, "node": {"local": {"write": "6GB/s", "read": "6GB/s"}, "nic": "200Gb/s"},
               "global": {"write": "100GB/s", "read": "100GB/s", "latency_ms": 1}}}
