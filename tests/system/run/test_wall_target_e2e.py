"""run.wall_target in a real run: the shipped design-memory-peer-pfs as two agents of 4 ranks on this
machine, which its run.scale's dilation (x250 and more for the peer sends over loopback gloo) made
a run of an hour and more, goes at the scale that fits its target: its state made again at it, its
peer copies and drain taken, the scale and why in its header and results.json, its figures at full
size. Its schedule is shortened (a peer copy every 2nd checkpoint, the PFS every 5th, no baseline):
the whole design, its full schedule, is scripts/run-shipped-designs.py's (docs/time-dilation.md)."""
from __future__ import annotations

from emu import results, run_two_agents
from level_runs import shm  # noqa: F401 - the fixture

from emulator.config import load_config
from emulator.sizing import checkpoint_size


def test_the_peer_design_runs_as_two_agents_at_the_scale_its_wall_target_fits(tmp_path, shm):  # noqa: F811
    sets = ["parallelism.ranks=8", f"tiers.memory.path={shm}/node{{node}}", f"tiers.global.path={tmp_path}/pfs",
            "checkpoint.saves=5", "checkpoint.baseline=false", "tiers.peer.interval_steps=20",
            "tiers.global.interval_steps=50", "run.wall_target=20s"]
    outs = [tmp_path / "node0", tmp_path / "node1"]
    run_two_agents("design-memory-peer-pfs", outs, "wall-target", timeout=900, nproc=4,
                   args=tuple(a for s in sets for a in ("--set", s)))
    out = next(o for o in outs if (o / "results.json").exists())  # the agent that got the job's rank 0
    res = results(out)
    fit = res["scale_fit"]
    assert fit["run_scale"] == 0.01 and fit["run_scale_wall_s"] > fit["target_s"] == 20
    assert res["scale"] == fit["scale"] < 0.01 and res["config"]["run"]["scale"] == fit["scale"]
    assert res["dilation"]["factor"] == fit["factor"]
    header = (out / "report.txt").read_text().split("\n\n")[0]
    assert f"x{fit['scale']:g}, 8 ranks on 2 node(s)" in header and "not run.scale's 0.01" in header
    # the state was made again at the fitted scale; the job's bytes, and so every full-size figure, are not
    cfg = load_config("design-memory-peer-pfs", sets)
    assert res["bytes"]["job_checkpoint_emulated"] == checkpoint_size(cfg.model, cfg.parallelism).total_bytes
    assert res["bytes"]["run_actual_state"] < 0.01 * res["bytes"]["run_emulated"]
    levels = res["levels"]
    assert levels["memory"]["complete"] == 5 and levels["peer"]["complete"] >= 2 and levels["global"]["complete"] == 1
