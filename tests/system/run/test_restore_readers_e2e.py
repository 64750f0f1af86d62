"""One reader per data-parallel group in real runs: the leader reads, members adopt its file over gloo, a
corrupted chunk or a step it cannot load is caught.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from emu import ckpt_emu, results, small_config

from emulator.config import load_config

ONE = "one_per_dp_group"


ZERO0 = {"tp": 2, "dp": 2, "zero_stage": 0}


@pytest.mark.parametrize("readers", ["all", ONE])
def test_a_real_run_reads_once_per_dp_group_and_every_rank_restores_the_same_step(readers, tmp_path):
    """With all, every member reads its leader's file itself (the storm); with one per group, only the leaders."""
    cfg = small_config(tmp_path, ranks=4, local=False, parallelism=ZERO0,
                       checkpoint={"saves": 2, "loads": 2, "modes": ["sync"], "restore_readers": readers})
    ckpt_emu("run", cfg, "--quiet", check=True)
    ranks = results(tmp_path / "out")["per_rank"]
    for i in range(2):
        loads = {r["rank"]: r["loads"][i] for r in ranks}
        assert all(x["ok"] and x["readers"] == readers for x in loads.values())
        assert len({x["step"] for x in loads.values()}) == 1
        readers_seen = [r for r, x in loads.items() if x["read_bytes"] > 0]
        assert readers_seen == ([0, 1] if readers == ONE else [0, 1, 2, 3])  # DP groups [0, 2] and [1, 3]
        for member, leader in ((2, 0), (3, 1)):
            got, sent = loads[member], loads[leader]
            assert got["source_rank"] == leader and got["bytes"] == sent["read_bytes"] > 0
            assert got["broadcast_bytes"] == (got["bytes"] if readers == ONE else 0)
            assert got["read_bytes"] == (0 if readers == ONE else got["bytes"])


RANKS = 2


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A real 2-rank ZeRO-0 run's global tier (one DP group: rank 0 reads, rank 1 receives)."""
    tmp = tmp_path_factory.mktemp("readers")
    cfg_path = small_config(tmp, local=False, parallelism={"dp": 2, "zero_stage": 0},
                            checkpoint={"saves": 2, "loads": 0, "modes": ["sync"], "restore_readers": ONE})
    ckpt_emu("run", cfg_path, "--quiet", check=True)
    return tmp, cfg_path


def _digest(tensors) -> str:
    h = hashlib.sha1()
    for t in tensors:
        h.update(t.contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _rank(rank: int, tmp: str, cfg_path: str, out: str, corrupt: bool) -> None:
    import os

    import torch.distributed as dist
    os.environ.update(LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(RANKS), GROUP_RANK="0")
    dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=rank, world_size=RANKS)
    from emulator.checkpoint import broadcast_restore as br
    from emulator.rank.comm import DistComm
    from rundesign import rank_state, run_design
    from tiers.directory import DirTier
    if corrupt and rank == 0:  # the reader sends a flipped byte in its first chunk; its own copy is intact
        def flipped(chunk, first=[True]):
            if not first:
                return chunk
            first.clear()
            bad = chunk.clone()
            bad[0] ^= 0xFF
            return bad
        br._outgoing = flipped
    cfg = load_config(cfg_path)
    group = br.new_dp_group(cfg, rank)
    state = br.restore_state(cfg, run_design(cfg), rank_state(cfg, rank), rank, "cpu")
    before = _digest(state.tensors("live"))
    rec = br.make_restorer(cfg, state, [("global", DirTier(Path(tmp) / "global"))], DistComm(),
                           group=group).load()
    Path(out, f"rank{rank}.json").write_text(json.dumps(
        {**rec.to_dict(), "changed": _digest(state.tensors("live")) != before, "live": _digest(state.tensors("live"))}))
    dist.destroy_process_group()


def _restore(tmp: Path, cfg_path: Path, out: Path, corrupt: bool = False) -> list[dict]:
    out.mkdir()
    (tmp / "store").unlink(missing_ok=True)
    mp.start_processes(_rank, args=(str(tmp), str(cfg_path), str(out), corrupt), nprocs=RANKS, start_method="spawn")
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(RANKS)]


def _copy(saved, tmp_path) -> tuple[Path, Path, list[int]]:
    src, cfg_path = saved
    shutil.copytree(src, tmp_path / "t")
    tmp = tmp_path / "t"
    steps = sorted(int(p.name[5:]) for p in (tmp / "global").glob("step_*"))
    assert len(steps) == 2
    return tmp, cfg_path, steps


def _file_digest(tmp: Path, step: int) -> str:
    """The model and optimizer bytes of the leader's file of ``step``: what every rank must hold."""
    loaded = torch.load(next((tmp / "global" / f"step_{step:08d}").glob("*rank00000_states.pt")), weights_only=True)
    return _digest([t for g in ("model", "optimizer") for t in loaded[g].values()])


def test_members_adopt_exactly_the_leaders_file_sent_over_gloo(saved, tmp_path):
    tmp, cfg_path, steps = _copy(saved, tmp_path)
    leader, member = _restore(tmp, cfg_path, tmp_path / "res")
    assert [(g["ok"], g["step"]) for g in (leader, member)] == [(True, steps[-1])] * 2
    assert leader["read_bytes"] == member["broadcast_bytes"] > 0 and member["read_bytes"] == 0
    assert member["source_rank"] == 0 and member["fallbacks"] == []
    assert leader["live"] == member["live"] == _file_digest(tmp, steps[-1])
    assert member["changed"]


def test_a_corrupted_broadcast_chunk_makes_the_member_read_the_file_itself(saved, tmp_path):
    tmp, cfg_path, steps = _copy(saved, tmp_path)
    leader, member = _restore(tmp, cfg_path, tmp_path / "res", corrupt=True)
    assert [(g["ok"], g["step"]) for g in (leader, member)] == [(True, steps[-1])] * 2
    assert any(f.startswith(f"broadcast@{steps[-1]}: checksum mismatch") for f in member["fallbacks"])
    assert member["broadcast_bytes"] == 0 and member["read_bytes"] == leader["read_bytes"] > 0
    assert leader["live"] == member["live"] == _file_digest(tmp, steps[-1])


def test_a_step_the_reader_cannot_load_is_taken_by_no_rank(saved, tmp_path):
    from emulator.checkpoint.injection import damage
    from tiers.directory import DirTier
    tmp, cfg_path, steps = _copy(saved, tmp_path)
    (path,) = (tmp / "global" / f"step_{steps[-1]:08d}").glob("*rank00000_states.pt")
    damage(DirTier(tmp / "global"), str(path.relative_to(tmp / "global")), "flip")
    leader, member = _restore(tmp, cfg_path, tmp_path / "res")
    assert [(g["ok"], g["step"]) for g in (leader, member)] == [(True, steps[0])] * 2
    assert any(f.startswith(f"broadcast@{steps[-1]}: the DP group's reader") for f in member["fallbacks"])
    assert leader["live"] == member["live"] == _file_digest(tmp, steps[0])
