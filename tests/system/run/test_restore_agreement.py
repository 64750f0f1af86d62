"""Restore is all or nothing across ranks: two real ranks (gloo), tiers from a real run, and one
rank whose files are damaged. No rank takes a step that another rank cannot load."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from crashcheck import verify_dir_tier
from emu import ckpt_emu, small_config

from emulator.checkpoint.injection import damage
from emulator.config import load_config
from tiers.directory import DirTier

RANKS = 2


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A real 2-rank run's tiers: complete steps on local and global, nothing loaded."""
    tmp = tmp_path_factory.mktemp("agree")
    cfg_path = small_config(tmp, checkpoint={"saves": 3, "loads": 0, "keep": 2, "modes": ["sync"]})
    ckpt_emu("run", cfg_path, "--quiet", check=True)
    steps = verify_dir_tier(tmp / "global", ranks=RANKS)
    assert len(steps) == 2
    return tmp, cfg_path, steps


def _digest(state) -> str:
    h = hashlib.sha1()
    for t in state.tensors("live"):
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _rank(rank: int, tmp: str, cfg_path: str, out: str) -> None:
    import os

    import torch.distributed as dist
    os.environ.update(LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(RANKS), GROUP_RANK="0")
    dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=rank, world_size=RANKS)
    from emulator.checkpoint.restore import Restorer
    from emulator.rank.comm import DistComm
    from rundesign import rank_state
    cfg = load_config(cfg_path)
    state = rank_state(cfg, rank)
    state.mutate(999)  # a live state no checkpoint holds
    before = _digest(state)
    p = cfg.parallelism
    meta = {"preset": cfg.model.name, "scale": cfg.run.scale, "tp": p.tp, "pp": p.pp, "dp": p.dp,
            "zero_stage": p.zero_stage}
    tiers = [("local", DirTier(Path(tmp) / "local" / "node0")), ("global", DirTier(Path(tmp) / "global"))]
    rec = Restorer(state, tiers, DistComm(), meta=meta).load()
    Path(out, f"rank{rank}.json").write_text(json.dumps(
        {"ok": rec.ok, "step": rec.step, "error": rec.error, "changed": _digest(state) != before,
         "live": _digest(state)}))
    dist.destroy_process_group()


def _restore(tmp: Path, cfg_path: Path, out: Path) -> list[dict]:
    out.mkdir()
    (tmp / "store").unlink(missing_ok=True)
    mp.start_processes(_rank, args=(str(tmp), str(cfg_path), str(out)), nprocs=RANKS, start_method="spawn")
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(RANKS)]


def _damage_rank1(tmp: Path, steps: list[int]) -> None:
    for tier in ("local/node0", "global"):
        for step in steps:
            (path,) = (tmp / tier / f"step_{step:08d}").glob("*rank00001_states.pt")
            damage(DirTier(tmp / tier), str(path.relative_to(tmp / tier)), "flip")


def test_no_rank_takes_a_step_another_rank_cannot_load(saved, tmp_path):
    import shutil
    src, cfg_path, steps = saved
    shutil.copytree(src, tmp_path / "t")
    tmp = tmp_path / "t"
    _damage_rank1(tmp, steps)  # rank 1 can load nothing, rank 0 everything
    got = _restore(tmp, cfg_path, tmp_path / "res")
    assert [g["ok"] for g in got] == [False, False]
    assert [g["changed"] for g in got] == [False, False], "a rank took a step its peer could not load"
    assert all("no checkpoint is loadable on every rank" in g["error"] for g in got)


def test_every_rank_falls_back_to_the_newest_step_all_can_load(saved, tmp_path):
    import shutil
    src, cfg_path, steps = saved
    shutil.copytree(src, tmp_path / "t")
    tmp = tmp_path / "t"
    _damage_rank1(tmp, steps[-1:])  # only the newest step is broken, and only for rank 1
    got = _restore(tmp, cfg_path, tmp_path / "res")
    assert [(g["ok"], g["step"]) for g in got] == [(True, steps[0])] * RANKS
    want = torch.load(next((tmp / "global" / f"step_{steps[0]:08d}").glob("*rank00000_states.pt")),
                      weights_only=True)
    h = hashlib.sha1()
    for group in ("model", "optimizer"):
        for t in want[group].values():
            h.update(t.contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    assert got[0]["live"] == h.hexdigest()  # rank 0 holds exactly the older step
