"""``ckpt-emu simulate`` on the one design (issue 32): the reproductions in its area, one figure per
quantity, flags in the one unit grammar, per-class recovery, a sweep's edge, the planner's volume.

In process (emulator.cli.main), no emulation runs. Each reproduction's test names the issue's number;
each was run against the code before this change (see the report) and failed there.
"""
from __future__ import annotations

import json

import pytest
import yaml

from emulator.config import load_config
from emulator.design import resolve
from emulator.design.costs import class_restore_seconds, recovery_seconds, restore_seconds
from emulator.units import fmt_bytes


def _main(capsys, *args):
    from emulator.cli import main
    rc = main([str(a) for a in args])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _json(capsys, *args) -> dict:
    rc, out, err = _main(capsys, *args, "--json")
    assert rc == 0, err
    return json.loads(out)


def _write(tmp_path, data: dict, name="design.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def _trace(tmp_path, *rows):
    path = tmp_path / "trace.csv"
    path.write_text("time,kind\n" + "".join(f"{t},{k}\n" for t, k in rows))
    return path


def _global_only(tmp_path, **extra):
    """Reproduction 3's design: 16 nodes, only a global tier of 20 Gb/s for the job."""
    return _write(tmp_path, {"extends": "llama3-8b", "checkpoint": {"modes": ["sync"]},
                             "tiers": {"local": None, "global": {"backend": "dir", "path": str(tmp_path / "pfs")}},
                             "design": {"job": {"nodes": 16}, "node": {"nic": "400Gb/s"},
                                        "global": {"write": "20Gb/s", "read": "20Gb/s"}}, **extra})


def _restore_after(capsys, tmp_path, cfg, kind: str, *extra) -> float:
    """The simulated restore (after detection and restart) of one failure of ``kind`` at 3 h."""
    out = _json(capsys, "simulate", cfg, "--days", "0.5", "--interval", "1h", "--failures",
                _trace(tmp_path, ("3h", kind)), "--out", tmp_path / "sim", *extra)
    return out["modes"]["sync"]["recovery_s"]


def test_repro_3_a_lost_node_reads_with_everyone_when_no_one_holds_a_nearer_copy(tmp_path, capsys):
    """Issue 32, reproduction 3: with only global storage every node restores from it after a node
    loss too; the node loss's restore is the crash's (a storm), never a lone reader's shorter one
    (before, on this design with levels: the costs line's restore 45 s, the Levels table's 12.1 s,
    and a node loss recovering faster than a crash, 10.0 against 10.7 min)."""
    cfg = _global_only(tmp_path, checkpoint={"modes": ["sync"], "interval_steps": 5})
    data = yaml.safe_load(cfg.read_text())
    data["tiers"]["global"]["interval_steps"] = 5  # levels
    cfg.write_text(yaml.safe_dump(data))
    node, crash = (_restore_after(capsys, tmp_path, cfg, k) for k in ("node", "process"))
    d = resolve(load_config(str(cfg)))
    assert node == pytest.approx(crash) == pytest.approx(restore_seconds(d, "global"))
    assert restore_seconds(d, "global", alone=True) < node


def test_one_restore_figure_per_class_and_the_simulation_takes_it(tmp_path, capsys):
    cfg = _global_only(tmp_path)
    d = resolve(load_config(str(cfg)))
    info = _json(capsys, "simulate", cfg, "--days", "1", "--out", tmp_path / "sim")
    classes = info["design"]["classes"]["all"]
    for cls in ("process", "node", "group"):
        assert classes[cls]["restore_s"] == pytest.approx(class_restore_seconds(d, cls))
        assert classes[cls]["recovery_s"] == pytest.approx(recovery_seconds(d, cls))
        assert classes[cls]["from"] == "global"
    rc, text, _ = _main(capsys, "simulate", cfg, "--days", "1", "--out", tmp_path / "sim")
    # the class table (its title and header), the share of time restoring, the count by tier: nothing else
    lines = [line for line in text.splitlines() if "restore" in line and not line.startswith("plot:")]
    assert rc == 0 and len(lines) == 4, text
    assert "restore global" not in text and "Levels" not in text


def test_repro_7_one_reader_per_data_parallel_group_changes_the_restore(tmp_path, capsys):
    """Issue 32, reproduction 7: ``checkpoint.restore_readers: one_per_dp_group`` reads one replica and
    broadcasts it; under ZeRO-0 every replica reading its leader's files is a storm of DP x the bytes."""
    base = {"extends": "llama3-8b", "parallelism": {"tp": 8, "pp": 1, "dp": 4, "zero_stage": 0},
            "checkpoint": {"modes": ["sync"]},
            "tiers": {"local": None, "global": {"backend": "dir", "path": str(tmp_path / "pfs")}},
            "design": {"job": {"nodes": 4}, "global": {"write": "4GB/s"}}}
    every = _write(tmp_path, base, "all.yaml")
    one = _write(tmp_path, {**base, "checkpoint": {"modes": ["sync"], "restore_readers": "one_per_dp_group"}},
                 "one.yaml")
    got = {p: _restore_after(capsys, tmp_path, p, "process") for p in (every, one)}
    assert got[one] < got[every] / 2
    for p in (every, one):
        assert got[p] == pytest.approx(restore_seconds(resolve(load_config(str(p))), "global"))


def _zero0(tmp_path, **tiers):
    """Reproduction 2's job: TP8 DP2 ZeRO-0 on 2 nodes of 8: only data-parallel rank 0's node writes;
    a 100 MB/s NAS for the job."""
    return _write(tmp_path, {"extends": "llama3-8b", "parallelism": {"tp": 8, "pp": 1, "dp": 2, "zero_stage": 0},
                             "checkpoint": {"modes": ["sync"], "interval_steps": 5}, "drain": {"verify": "size"},
                             "tiers": {"local": None, "global": {"backend": "dir", "path": str(tmp_path / "pfs")},
                                       **tiers},
                             "design": {"job": {"nodes": 2}, "node": {"nic": "400Gb/s"},
                                        "global": {"write": "100MB/s"}}})


def test_repro_2_a_node_alone_with_bytes_gets_the_whole_store_in_every_figure(tmp_path, capsys):
    """Issue 32, reproduction 2: node 0 of the ZeRO-0 case writes at min(NIC, aggregate) = 100 MB/s,
    not half of it: the ranks' write to the NAS, and with a memory tier in front (levels: the NAS
    every 2nd checkpoint) its drain, in the design's figures and in the simulated run (before: the
    level model paced it at aggregate / all nodes, twice as long)."""
    direct = _json(capsys, "simulate", _zero0(tmp_path), "--days", "1", "--out", tmp_path / "sim")
    b = max(g["node_bytes"] for g in direct["design"]["groups"])
    assert sorted(g["node_bytes"] > 0 for g in direct["design"]["groups"]) == [False, True]
    assert direct["design"]["tiers"]["all"]["global"]["copy_s"] == pytest.approx(b / 100e6, rel=1e-3)
    assert direct["modes"]["sync"]["local_write_mean_s"] == pytest.approx(b / 100e6, rel=1e-3)
    memory = {"memory": {"backend": "dir", "path": "/dev/shm/ckpt-emu-test-none"}}
    cfg = yaml.safe_load(_zero0(tmp_path, **memory).read_text())
    cfg["tiers"]["global"]["interval_steps"] = 10
    cfg["design"]["node"]["memory"] = {"capacity": "1TiB", "write": "20GB/s"}
    levels = _json(capsys, "simulate", _write(tmp_path, cfg, "levels.yaml"), "--days", "1", "--out", tmp_path / "s2")
    assert levels["design"]["tiers"]["all"]["global"]["copy_s"] == pytest.approx(b / 100e6, rel=1e-3)
    assert levels["modes"]["sync"]["drain_mean_s"] == pytest.approx(b / 100e6, rel=1e-3)


def _l70(tmp_path):
    """Reproduction 4's design: Llama-3 70B on 128 nodes of 8 (TP8 DP128), a 200 Gb/s NIC, a 6 GB/s
    NVMe and a 100 GB/s object store; its snapshot the bytes over the copy rate alone, as when it was
    filed (no fixed or per-tensor part)."""
    return _write(tmp_path, {
        "extends": "llama3-70b-subset", "training": {"step_seconds": 62.5}, "checkpoint": {"interval_steps": 8},
        "tiers": {"local": {"backend": "dir", "path": str(tmp_path / "nvme" / "node{node}")},
                  "global": {"backend": "s3", "bucket": "change-me", "prefix": "x", "part_size_mib": 16}},
        "design": {"job": {"nodes": 128, "accelerators_per_node": 8},
                   "node": {"local": {"write": "6GB/s", "read": "6GB/s"}, "nic": "200Gb/s",
                            "snapshot": {"fixed_ms": 0, "per_tensor_us": 0}},
                   "global": {"write": "100GB/s", "read": "100GB/s", "latency_ms": 20}}})


def test_repro_4_the_planners_interval_says_what_it_writes_a_day_and_meets_the_volume_bound(tmp_path, capsys):
    """Issue 32, reproduction 4 (simulate): ``--interval planner`` every 80.6 s async wrote 1.05 PB a
    day to S3. The planner now recommends the best cell within its bounds and says why its optimum (one
    62.5 s step) is not recommended."""
    cfg = _l70(tmp_path)
    info = _json(capsys, "simulate", cfg, "--interval", "planner", "--days", "1", "--out", tmp_path / "sim")
    p = info["planner"]["async"]
    assert p["interval_s"] > 62.5 and p["s3_per_day_usd"] > 0
    assert p["global_bytes_per_day"] == pytest.approx(978.9e9 * p["global_checkpoints_per_day"], rel=0.02)
    assert p["notes"] and "unconstrained optimum, every 62.5 s, is not recommended: global volume" in p["notes"][0]
    assert "over 80" in p["notes"][0]  # 4 x the rule of thumb
    assert info["planner"]["sync"]["notes"] == []
    rc, text, _ = _main(capsys, "simulate", cfg, "--interval", "planner", "--days", "1", "--out", tmp_path / "sim")
    said = fmt_bytes(p["global_bytes_per_day"], info["family"])
    assert f"{said} a day to global storage" in text and "is not recommended: global volume" in text


def test_flags_take_rates_with_their_units(tmp_path, capsys):
    """One unit grammar: ``--global-bandwidth 400GB/s``, ``--nic 200Gb/s`` (25 GB/s),
    ``--snapshot-rate 48GiB/s``; a bare number is refused, and so are the old GiB/s-number flags."""
    cfg = _global_only(tmp_path)
    info = _json(capsys, "simulate", cfg, "--days", "1", "--out", tmp_path / "sim", "--global-bandwidth", "400GB/s",
                 "--nic", "200Gb/s", "--snapshot-rate", "48GiB/s")
    # in the units the design was written in (bits): 400 GB/s is 3.2 Tb/s, 25 GB/s 200 Gb/s
    assert info["design"]["tiers"]["all"]["global"]["link"] == "3.2 Tb/s for the job, 200.0 Gb/s per node"
    assert info["design"]["checkpoint"]["all"]["snapshot_source"] == "flag"
    for args, message in ((["--global-bandwidth", "400"], "--global-bandwidth: '400' is not a rate with a unit"),
                          (["--nic", "200Gbps"], None),
                          (["--nic", "25GX/s"], "--nic: '25GX/s': unknown rate unit"),
                          (["--global-gib-s", "400"], "--global-gib-s: now --global-bandwidth"),
                          (["--nic-gib-s", "25"], "--nic-gib-s: now --nic"),
                          (["--snapshot-gib-s", "48"], "--snapshot-gib-s: now --snapshot-rate"),
                          (["--restart-seconds", "600"], "--restart-seconds: each failure class has its own"),
                          (["--restart", "meteor=5m"], "--restart: 'meteor=5m' is not CLASS=TIME"),
                          (["--restart", "node=-5m"], "--restart node")):
        out = tmp_path / ("bad" if message else "ok")
        rc, text, err = _main(capsys, "simulate", cfg, "--days", "1", "--out", out, *args)
        if message is None:
            assert rc == 0, err
            continue
        lines = err.strip().splitlines()
        assert rc == 2 and len(lines) == 1 and lines[0].startswith("ckpt-emu: error: ") and message in lines[0], err
        assert not out.exists() and not text


def test_each_class_has_its_own_recovery_and_a_flag_overrides_one(tmp_path, capsys):
    """Issue 32, reproduction 8 in simulate: the design's detection and restart per class (not 600 s for
    every failure); ``--restart node=2m`` changes the node loss's restart only."""
    cfg = _global_only(tmp_path, design={"job": {"nodes": 16}, "node": {"nic": "400Gb/s"},
                                         "global": {"write": "20Gb/s", "read": "20Gb/s"},
                                         "failures": {"process": {"detect": "10s", "restart": "20s"}}})
    d = resolve(load_config(str(cfg)))
    base = _json(capsys, "simulate", cfg, "--days", "1", "--out", tmp_path / "sim")["design"]["classes"]["all"]
    assert (base["process"]["detect_s"], base["process"]["restart_s"]) == (10.0, 20.0)
    assert (base["node"]["detect_s"], base["node"]["restart_s"]) == (60.0, 540.0)
    got = _json(capsys, "simulate", cfg, "--days", "1", "--out", tmp_path / "sim", "--restart", "node=2m")
    classes = got["design"]["classes"]["all"]
    assert classes["node"]["restart_s"] == 120.0 and classes["node"]["detect_s"] == 60.0
    assert classes["process"]["restart_s"] == 20.0
    assert classes["node"]["recovery_s"] == pytest.approx(180.0 + class_restore_seconds(d, "node"))
    simulated = _json(capsys, "simulate", cfg, "--days", "0.5", "--interval", "1h", "--out", tmp_path / "sim",
                      "--restart", "node=2m", "--failures", _trace(tmp_path, ("3h", "node")))["modes"]["sync"]
    assert simulated["restart_s"] == pytest.approx(180.0)
    assert simulated["classes"]["node"]["recovery_s"] == pytest.approx(classes["node"]["recovery_s"])


def test_a_sweeps_best_cell_on_the_grids_edge_is_flagged(tmp_path, capsys):
    cfg = _global_only(tmp_path)
    info = _json(capsys, "simulate", cfg, "--days", "10", "--out", tmp_path / "sim", "--mttf-hours", "2000",
                 "--sweep", "interval=10s,20s,40s", "--sweep", "global_bandwidth=10Gb/s,20Gb/s")
    best = info["sweep"]["modes"]["sync"]["best"]
    assert best["interval_s"] == 40.0 and best["global_bandwidth_bps"] == pytest.approx(2.5e9)
    assert best["on_edge"] == ["interval", "global_bandwidth"]
    rc, text, _ = _main(capsys, "simulate", cfg, "--days", "10", "--out", tmp_path / "sim", "--mttf-hours", "2000",
                        "--sweep", "interval=10s,20s,40s")
    assert rc == 0 and "ON THE GRID'S EDGE (interval)" in text
    inside = _json(capsys, "simulate", cfg, "--days", "10", "--out", tmp_path / "sim", "--mttf-hours", "2000",
                   "--sweep", "interval=30s,30m,10h")["sweep"]["modes"]["sync"]["best"]
    assert inside["interval_s"] == 1800.0 and inside["on_edge"] == []


def test_a_tier_taking_every_checkpoint_is_no_edge(tmp_path, capsys):
    """Every 1st checkpoint is the least a tier can take: a best cell there lies on no edge of the grid."""
    from emulator.simulation.sweep import _on_edge
    spec = {"peer_every": [1, 2, 4], "global_every": [4, 16, 64]}
    every = {"peer": (1, 2, 4), "global": (4, 16, 64)}
    row = {"global_bandwidth_bps": None, "every": {"peer": 1, "global": 16}}
    assert _on_edge(spec, every, row, 300.0) == []
    assert _on_edge(spec, every, {**row, "every": {"peer": 4, "global": 4}}, 300.0) == ["peer_every", "global_every"]


def test_a_tier_with_no_rate_is_refused_not_copied_in_no_time(tmp_path, capsys):
    cfg = _write(tmp_path, {"extends": "llama3-8b", "tiers": {
        "local": {"backend": "dir", "path": str(tmp_path / "nvme")},
        "global": {"backend": "dir", "path": str(tmp_path / "pfs"), "emulate": {"write_gib_s": 1}}}})
    for cmd, says in ((["simulate", cfg, "--out", tmp_path / "sim"], "the local tier has no rate to model it with"),
                      (["plan", cfg, "--set", "tiers.local.interval_steps=5"], "the local tier has no rate to model it with")):
        rc, out, err = _main(capsys, *cmd)
        lines = err.strip().splitlines()
        assert rc == 2 and len(lines) == 1 and says in lines[0], err
        assert "tiers.local.emulate.write_gib_s" in lines[0] and not out
    assert not (tmp_path / "sim").exists()
