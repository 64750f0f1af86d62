"""Resume across nodes: two torchrun agents with a c10d rendezvous on 127.0.0.1. The second
node's drainer is killed mid-drain, so a checkpoint is complete on both nodes' local tiers but
not on the global tier; the rerun drains it from both nodes before training."""
from __future__ import annotations

import json
import subprocess
import sys

from crashcheck import verify_dir_tier
from emu import free_port, small_config


def _run_two_nodes(tmp_path, cfg_path, tag: str) -> list[subprocess.CompletedProcess]:
    port, procs = free_port(), []
    for node in range(2):
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "emulator.cli", "run", str(cfg_path), "--quiet", "--out", str(tmp_path / f"out{node}"),
             "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-endpoint", f"127.0.0.1:{port}",
             "--rdzv-id", f"resume-{tag}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return [(p, *p.communicate(timeout=300)) for p in procs]


def test_a_pending_drain_of_two_nodes_is_resumed(tmp_path):
    kill = {"rank": 2, "checkpoint": 2, "phase": "drain"}  # the other node's leader, after one file
    cfg_path = small_config(tmp_path, ranks=4, checkpoint={"saves": 2, "loads": 0, "modes": ["sync"]},
                            failures={"kill": [kill]})
    first = _run_two_nodes(tmp_path, cfg_path, "a")
    assert all(p.returncode != 0 for p, _, _ in first)
    locals_ = [verify_dir_tier(tmp_path / "local" / f"node{n}") for n in range(2)]
    glob = verify_dir_tier(tmp_path / "global", ranks=4)
    pending = min(locals_[0][-1], locals_[1][-1])
    assert pending not in glob and pending > max(glob, default=0), (locals_, glob)

    cfg_path = small_config(tmp_path, ranks=4, checkpoint={"saves": 1, "loads": 1, "modes": ["sync"]})
    second = _run_two_nodes(tmp_path, cfg_path, "b")
    assert all(p.returncode == 0 for p, _, _ in second), [e for _, _, e in second]
    (res,) = [json.loads((tmp_path / f"out{n}" / "results.json").read_text())
              for n in range(2) if (tmp_path / f"out{n}" / "results.json").exists()]
    resumed = res["faults"]["resumed"]
    assert [(r["step"], r["ok"]) for r in resumed] == [(pending, True)], resumed
    glob = verify_dir_tier(tmp_path / "global", ranks=4)
    assert pending in glob  # complete on the global tier, every rank's file listed
    manifest = json.loads((tmp_path / "global" / f"step_{pending:08d}" / "manifest.json").read_text())
    assert sorted(f["rank"] for f in manifest["files"]) == [0, 1, 2, 3]
