"""``parallelism.writers: balanced``: with the torch_save engine each replicated tensor is cut into one
even slice per replica; with ``checkpoint.engine: dcp`` it is PyTorch DCP's deduplication, the bytes
each rank writes the ones DCP's own planner gives it when every rank offers the state it holds
(emulator/sizing.py)."""
import json

import pytest
import torch
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner

from emulator import sizing
from emulator.cli import main
from emulator.config import load_config
from emulator.design.job import job_of
from emulator.workload.state import TORCH_DTYPES, RankState

GIB = 1 << 30


def held_state(cfg, rank: int) -> dict:
    """Every tensor rank ``rank`` holds, on the meta device (no memory), under its replica key."""
    par = cfg.parallelism
    c = sizing.rank_coords(rank, par.tp, par.pp, par.dp)
    return {sizing.replica_key(par, c, part, t.name): torch.empty(t.shape, dtype=TORCH_DTYPES[t.dtype], device="meta")
            for part, held in sizing.HELD.items() for t in held(cfg.model, par, c.pp)}


def dcp_plans(cfg) -> list:
    """DCP's global save plan of the whole job: each rank's local plan, deduplicated by the coordinator."""
    planners = [DefaultSavePlanner() for _ in range(cfg.parallelism.world_size)]
    local = []
    for rank, planner in enumerate(planners):
        planner.set_up_planner(held_state(cfg, rank), None, rank == 0)
        local.append(planner.create_local_plan())
    final, _ = planners[0].create_global_plan(local)
    return final


LAYOUTS = {
    "zero1": ["parallelism.tp=2", "parallelism.pp=2", "parallelism.dp=8", "parallelism.zero_stage=1"],
    "zero0": ["parallelism.tp=2", "parallelism.pp=2", "parallelism.dp=4", "parallelism.zero_stage=0"],
    "hsdp-zero3": ["parallelism.dp=8", "parallelism.zero_stage=3", "parallelism.shard_group=2"],
    "hsdp-zero1": ["parallelism.tp=2", "parallelism.dp=8", "parallelism.zero_stage=1", "parallelism.shard_group=4"],
    # 16 replicas M = 8 ranks apart: DCP's set of holders no longer iterates in rank order, and its
    # ties go where the set's order puts them
    "zero0-wide": ["parallelism.tp=4", "parallelism.pp=2", "parallelism.dp=16", "parallelism.zero_stage=0"],
}


@pytest.mark.parametrize("sets", LAYOUTS.values(), ids=LAYOUTS)
def test_balanced_with_dcp_is_what_dcps_planner_writes(sets):
    cfg = load_config("llama3-8b", sets + ["parallelism.writers=balanced", "checkpoint.engine=dcp"])
    model, par = cfg.model, cfg.parallelism
    plans = dcp_plans(cfg)
    for rank, plan in enumerate(plans):
        c = sizing.rank_coords(rank, par.tp, par.pp, par.dp)
        ours = {sizing.replica_key(par, c, part, t.name) for part in ("model", "optimizer")
                for t in (sizing.model_tensors if part == "model" else sizing.optimizer_tensors)(model, par, c)}
        assert {item.index.fqn for item in plan.items} == ours, rank
        assert sum(item.tensor_storage_size() for item in plan.items) == sizing.rank_size(model, par, rank).total_bytes
    one = load_config("llama3-8b", sets)
    assert sizing.checkpoint_size(model, par).total_bytes == sizing.checkpoint_size(one.model, one.parallelism).total_bytes


@pytest.mark.parametrize("sets", LAYOUTS.values(), ids=LAYOUTS)
def test_balanced_with_torch_save_slices_every_replicated_tensor_evenly(sets):
    """Each tensor R replicas hold is cut into R contiguous slices, one per replica, of sizes at most one
    element apart, that tile it exactly; a tensor one rank holds (a ZeRO shard) stays whole with it."""
    cfg = load_config("llama3-8b", sets + ["parallelism.writers=balanced"])
    model, par = cfg.model, cfg.parallelism
    for tp in range(par.tp):
        for stage in range(par.pp):
            for part, written in (("model", sizing.model_tensors), ("optimizer", sizing.optimizer_tensors)):
                holders: dict = {}
                for d in range(par.dp):
                    holders.setdefault(sizing.replica_class(par, part, d), []).append(d)
                held = sizing.HELD[part](model, par, stage)
                for group in holders.values():
                    pieces = [written(model, par, sizing.rank_coords(tp + stage * par.tp + d * par.tp * par.pp,
                                                                     par.tp, par.pp, par.dp)) for d in group]
                    if len(group) == 1:
                        assert pieces[0] == held
                        continue
                    for t in held:
                        numel = sizing.tensor_bytes(t) // sizing.DTYPE_BYTES[t.dtype]
                        spans = [s for s in (_span(p, t.name) for p in pieces) if s is not None]
                        assert [lo for lo, _ in spans] == [0] + [hi for _, hi in spans[:-1]], t.name
                        assert spans[-1][1] == numel and len(spans) == min(len(group), numel)
                        lengths = [hi - lo for lo, hi in spans] + [0] * (len(group) - len(spans))
                        assert max(lengths) - min(lengths) <= 1
    one = load_config("llama3-8b", sets)
    assert sizing.checkpoint_size(model, par).total_bytes == sizing.checkpoint_size(one.model, one.parallelism).total_bytes


def _span(written, name: str) -> tuple[int, int]:
    """The elements [lo, hi) of held tensor ``name`` a rank writes (an empty slice is not written)."""
    for t in written:
        if t.name.startswith(name + "["):
            lo, hi = map(int, t.name[len(name) + 1:-1].split(":"))
            assert t.shape == (hi - lo,)
            return lo, hi
    return None


SEVENTY_B = ["parallelism.tp=8", "parallelism.pp=4", "parallelism.zero_stage=1", "design.job.nodes=512",
             "design.job.accelerators_per_node=8"]


def _sizes_json(capsys, sets: list) -> dict:
    assert main(["sizes", "llama3-70b", *[a for s in sets for a in ("--set", s)], "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_70b_job_is_even_with_torch_save(capsys):
    """The issue's check: Llama 3 70B, TP8 PP4 ZeRO-1 on 512 nodes of 8; one_replica puts the weights on
    4 nodes; balanced (torch_save) cuts each weight over its 128 replicas: no node above 1.05 x the mean."""
    one = _sizes_json(capsys, SEVENTY_B)
    spread = _sizes_json(capsys, SEVENTY_B + ["parallelism.writers=balanced"])
    nodes = spread["per_node_bytes"]
    assert len(nodes) == 512 and sum(nodes) == spread["total_bytes"] == one["total_bytes"]
    assert max(one["per_node_bytes"]) / GIB == pytest.approx(35.05, abs=0.01)
    assert max(nodes) / (sum(nodes) / len(nodes)) <= 1.05
    assert max(g["node_bytes"] for g in spread["job"]["node_groups"]) == max(nodes)
    assert spread["writers_layout"]["layout"] == "even_slices"
    assert "torch_save" in spread["writers_layout"]["why"]


def test_the_70b_job_with_dcp_keeps_its_embedding_whole(capsys):
    """The same job with engine dcp: DCP's dedup spreads the weights but never splits a tensor, so the
    node of stage 0 with the embedding shards stays heavier, as DCP's own planner has it."""
    one = _sizes_json(capsys, SEVENTY_B)
    dcp = _sizes_json(capsys, SEVENTY_B + ["parallelism.writers=balanced", "checkpoint.engine=dcp"])
    nodes = dcp["per_node_bytes"]
    assert sum(nodes) == dcp["total_bytes"] == one["total_bytes"]
    mean = sum(nodes) / len(nodes)
    assert max(nodes) / GIB == pytest.approx(3.24, abs=0.01)
    assert max(nodes) / mean == pytest.approx(1.82, abs=0.01)
    embedding = 128256 // 8 * 8192 * 2  # one TP shard, bf16: larger than a rank's even share of the job
    assert embedding > dcp["total_bytes"] / 4096
    assert dcp["writers_layout"]["layout"] == "whole_tensors"
    assert "dcp" in dcp["writers_layout"]["why"] and "never splits" in dcp["writers_layout"]["why"]
    spread = job_of(load_config("llama3-70b", SEVENTY_B + ["parallelism.writers=balanced", "checkpoint.engine=dcp"]))
    assert spread.heaviest.node_bytes == max(nodes)


@pytest.mark.parametrize("engine,whole", [("torch_save", False), ("dcp", True)])
def test_a_balanced_rank_state_holds_what_it_writes(engine, whole):
    cfg = load_config("llama3-8b", LAYOUTS["zero1"] + ["parallelism.writers=balanced", f"checkpoint.engine={engine}"])
    par = cfg.parallelism
    rank = 2 * par.tp * par.pp + 1  # DP rank 2: a share of its column's weights
    state = RankState(cfg.model, par, rank, scale=0.0001)
    c = sizing.rank_coords(rank, par.tp, par.pp, par.dp)
    assert list(state.live["model"]) == [t.name for t in sizing.model_tensors(cfg.model, par, c)]
    held = len(sizing.held_model_tensors(cfg.model, par, c.pp))
    # DCP's dedup: some of the column's whole weights; torch_save: a slice of each
    assert 0 < len(state.live["model"]) < held if whole else len(state.live["model"]) == held
    assert state.emulated_bytes == sizing.rank_size(cfg.model, par, rank).total_bytes


@pytest.mark.parametrize("sets", [["parallelism.zero_stage=3"], ["parallelism.dp=1", "parallelism.tp=8"]])
def test_balanced_without_replicas_is_one_line_and_exit_2(sets, capsys, tmp_path):
    out = tmp_path / "out"
    args = [a for s in sets + ["parallelism.writers=balanced"] for a in ("--set", s)]
    assert main(["sizes", "llama3-8b", *args]) == 2
    assert main(["run", "llama3-8b", "--out", str(out), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("ckpt-emu: error: parallelism.writers: balanced") for line in err)
    assert not out.exists()


def test_a_job_stretched_to_other_nodes_keeps_its_layouts_choices():
    """--nodes and sweeps stretch the layout's DP: who writes, HSDP's groups and Megatron's
    distributed optimizer (its fp32 main copy) stay what the config says."""
    cfg = load_config("validation/dlrover-gpt-1.5b-distopt", ["parallelism.writers=balanced"])
    job = job_of(cfg, nodes=4)
    assert job.layout.dp == 4 and job.layout.writers == "balanced" and job.layout.distributed_optimizer
    per_param = sizing.checkpoint_size(cfg.model, job.layout).total_bytes / sizing.total_params(cfg.model)
    assert per_param > 16
    hsdp = load_config("llama3-8b", ["parallelism.zero_stage=1", "parallelism.shard_group=4"])
    assert job_of(hsdp, nodes=2).layout.shard_group == 4
    dcp = load_config("llama3-8b", LAYOUTS["zero1"] + ["parallelism.writers=balanced", "checkpoint.engine=dcp"])
    assert job_of(dcp, nodes=4).layout.whole_tensors and not job_of(cfg, nodes=4).layout.whole_tensors


def test_the_engine_not_the_user_decides_whole_tensors(capsys):
    """DCP keeps tensors whole because it is DCP: the layout follows checkpoint.engine, through a saved
    config and back, and is no key a user sets."""
    cfg = load_config("llama3-8b", LAYOUTS["zero1"] + ["parallelism.writers=balanced", "checkpoint.engine=dcp"])
    assert cfg.parallelism.whole_tensors and "whole_tensors" not in cfg.to_dict()["parallelism"]
    assert not cfg.with_overrides("checkpoint.engine=torch_save").parallelism.whole_tensors
    assert main(["sizes", "llama3-8b", "--set", "parallelism.whole_tensors=true"]) == 2
    assert "parallelism.whole_tensors: unknown key" in capsys.readouterr().err
