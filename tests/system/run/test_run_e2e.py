"""End-to-end runs through the real CLI and torchrun: sync and async, then loads."""
import json
import subprocess
import sys

import crc32c
import pytest
from emu import assert_file_holds_state, ckpt_emu, free_port, results, small_config

from emulator.config import load_config


def _crc(path):
    return f"{crc32c.crc32c(path.read_bytes()):08x}"


def _complete_steps(root):
    return sorted(int(p.parent.name[5:]) for p in root.glob("step_*/manifest.json"))


@pytest.fixture(scope="module")
def single_node_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run")
    cfg_path = small_config(tmp)
    proc = ckpt_emu("run", cfg_path, "--quiet", check=True)
    return tmp, cfg_path, proc


def test_run_reports_both_modes(single_node_run):
    tmp, _, proc = single_node_run
    res = results(tmp / "out")
    assert set(res["modes"]) == {"sync", "async"}
    for mode, m in res["modes"].items():
        assert m["checkpoints"] == 3 and m["incomplete"] == 0, (mode, m)
        assert m["stall_mean_s"] > 0 and m["save_gib_s"] > 0 and 0 <= m["drain_overlap_ratio"] <= 1
        assert m["overhead_ratio"] == pytest.approx(m["stall_total_s"] / m["training_wall_s"])
        # the state's update (1/interval of it re-keyed per step) is measured, inside the step
        assert 0 < m["update_cpu_per_step_s"] < m["step_wall_s"], (mode, m)
    assert "state update: " in proc.stdout
    # sync waits for the drain; async only for the snapshot (and a late previous drain)
    sync = res["modes"]["sync"]
    assert sync["stall_mean_s"] >= sync["local_write_mean_s"]
    assert res["load"]["loads"] == 2 and res["load"]["ok"]
    assert res["load"]["served_by"] == {"local": 4}
    assert (tmp / "out" / "report.txt").read_text() in proc.stdout
    # state.device auto: a GPU where torch has CUDA, and the report says which
    import torch
    assert res["device"]["kind"] == ("cuda" if torch.cuda.is_available() else "cpu")
    assert "  device: state on " in proc.stdout and "of which device-to-host" in proc.stdout


def test_local_and_global_hold_identical_verified_bytes(single_node_run):
    tmp, cfg_path, _ = single_node_run
    local, glob = tmp / "local" / "node0", tmp / "global"
    steps = _complete_steps(glob)
    assert steps == _complete_steps(local) == [10, 12]  # 2 x 3 checkpoints every 2 steps, keep 2
    cfg = load_config(str(cfg_path))
    for step in steps:
        manifest = json.loads((glob / f"step_{step:08d}" / "manifest.json").read_text())
        assert sorted(f["rank"] for f in manifest["files"]) == [0, 1]
        for f in manifest["files"]:
            g, lo = glob / f["key"], local / f["key"]
            assert g.read_bytes() == lo.read_bytes()
            assert g.stat().st_size == f["size"] and _crc(g) == f["crc32c"]
            assert_file_holds_state(g, cfg, f["rank"], step)


def test_retention_bounds_disk(single_node_run):
    tmp, _, _ = single_node_run
    for root in (tmp / "local" / "node0", tmp / "global"):
        assert len(list(root.glob("step_*"))) == 2
        assert not list(root.rglob("*.partial"))


def test_direct_to_global_without_local_tier(tmp_path):
    cfg_path = small_config(tmp_path, ranks=1, local=False,
                            checkpoint={"saves": 2, "loads": 1, "modes": ["sync"]})
    stale = tmp_path / "out" / ".spool" / "node0" / "ckpt-emu-s3-left-by-a-crash.spool"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"x" * 1024)
    ckpt_emu("run", cfg_path, "--quiet", check=True)
    assert not stale.exists()  # temporary files of a killed run are swept by the next one
    res = results(tmp_path / "out")
    assert res["tiers"]["local"] is None
    assert res["modes"]["sync"]["checkpoints"] == 2 and res["modes"]["sync"]["incomplete"] == 0
    assert res["load"]["served_by"] == {"global": 1}
    assert _complete_steps(tmp_path / "global") == [2, 4]




def test_two_nodes_with_c10d_rendezvous(tmp_path):
    """Two torchrun agents on 127.0.0.1, each node with its own local directory, one shared global."""
    cfg_path = small_config(tmp_path, ranks=4, checkpoint={"saves": 2, "loads": 1})
    port = free_port()
    procs = []
    for node in range(2):
        out = tmp_path / f"out{node}"
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "emulator.cli", "run", str(cfg_path), "--quiet", "--out", str(out),
             "--nnodes", "2", "--nproc-per-node", "2", "--rdzv-endpoint", f"127.0.0.1:{port}",
             "--rdzv-id", "two-node-test"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
    reports = [tmp_path / f"out{n}" / "results.json" for n in range(2)]
    written = [r for r in reports if r.exists()]
    assert len(written) == 1  # only rank 0's node writes the report
    res = json.loads(written[0].read_text())
    assert res["nodes"] == 2 and res["ranks"] == 4
    for m in res["modes"].values():
        assert m["incomplete"] == 0
    # each node's local tier holds only its own ranks' files; global holds everyone's
    node_ranks = {}
    for node in range(2):
        local = tmp_path / "local" / f"node{node}"
        step = _complete_steps(local)[-1]
        man = json.loads((local / f"step_{step:08d}" / "manifest.json").read_text())
        node_ranks[node] = sorted(f["rank"] for f in man["files"])
        for f in man["files"]:
            assert (local / f["key"]).read_bytes() == (tmp_path / "global" / f["key"]).read_bytes()
    assert sorted(node_ranks[0] + node_ranks[1]) == [0, 1, 2, 3] and len(node_ranks[0]) == 2
    glob_step = _complete_steps(tmp_path / "global")[-1]
    man = json.loads((tmp_path / "global" / f"step_{glob_step:08d}" / "manifest.json").read_text())
    assert sorted(f["rank"] for f in man["files"]) == [0, 1, 2, 3]


def _blocks(path):
    from emulator.checkpoint.audit import block_digests
    return block_digests(path.read_bytes())


def test_written_bytes_cannot_be_deduplicated_or_compressed(tmp_path):
    """Measured on the files a real run wrote: every 4 KiB block distinct within a file,
    across ranks and across two consecutive checkpoints of a rank; zlib keeps >= 99 %.

    At the default's per-rank size (scale 0.004, ~54 MiB per rank): torch.save's own
    zip directory and pickle (~20 KiB, the same layout on every rank) are real file
    structure, and a toy-size file would let them weigh more than they do for real."""
    from emulator.checkpoint.audit import compress_ratio
    cfg = small_config(tmp_path, ranks=2, run={"scale": 0.004},
                       checkpoint={"saves": 2, "loads": 0, "modes": ["sync"]})
    ckpt_emu("run", cfg, "--quiet", check=True)
    glob = tmp_path / "global"
    files = {(int(p.parent.name[5:]), int(p.name.rsplit("_rank", 1)[1][:5])): p for p in glob.glob("step_*/*.pt")}
    (old, new) = sorted({s for s, _ in files})
    for path in files.values():
        d = _blocks(path)
        assert len(set(d)) / len(d) >= 0.999, path
        assert compress_ratio(path.read_bytes()) >= 0.99, path
    ranks = _blocks(files[new, 0]) + _blocks(files[new, 1])
    assert len(set(ranks)) / len(ranks) >= 0.999
    steps = _blocks(files[old, 0]) + _blocks(files[new, 0])
    assert len(set(steps)) / len(steps) >= 0.999
    content = results(tmp_path / "out")["content"]
    assert content["kind"] == "unique" and content["sampled_blocks"] >= 256
    assert content["distinct_within_file"] >= 0.999 and content["distinct_across_ranks"] >= 0.999
    assert content["changed_across_checkpoints"] >= 0.999 and content["zlib_ratio"] >= 0.99


def test_reducible_content_reaches_its_targets(tmp_path):
    """state.dedup_ratio / compress_ratio: for users whose real checkpoints reduce."""
    from emulator.checkpoint.audit import compress_ratio
    from emulator.workload.content import BLOCK
    cfg = small_config(tmp_path, ranks=1, run={"scale": 0.005},
                       checkpoint={"saves": 1, "loads": 0, "modes": ["sync"]},
                       state={"dedup_ratio": 4, "compress_ratio": 2})
    ckpt_emu("run", cfg, "--quiet", check=True)
    (path,) = (tmp_path / "global").glob("step_*/*.pt")
    digests = _blocks(path)
    assert len(digests) / len(set(digests)) == pytest.approx(4, rel=0.1)
    data = path.read_bytes()
    first = {}
    for i, d in enumerate(digests):
        first.setdefault(d, i)
    distinct = b"".join(data[i * BLOCK:(i + 1) * BLOCK] for i in list(first.values())[:2000])
    assert 1 / compress_ratio(distinct) == pytest.approx(2, rel=0.1)
    assert results(tmp_path / "out")["content"]["kind"] == "reducible"
