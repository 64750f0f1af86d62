"""Checkpoint bytes from the job's numerics, models beyond Llama 3, HSDP and who writes (emulator/sizing.py)."""
import json
import math

import pytest

from emulator import sizing
from emulator.cli import main
from emulator.config import load_config
from emulator.errors import ConfigError

GIB = 1 << 30

#: every preset's bytes as they were before the job's numerics could be said: (params, model bytes,
#: optimizer bytes) of the whole job. MLPerf Storage's and DLIO's sizes must not move.
PRESET_BYTES = {
    "llama3-8b": (8030261248, 16060522496, 96365101056),
    "llama3-70b": (69882617856, 139783700480, 838622871552),
    "llama3-405b": (405853388800, 811764809728, 4870743982080),
    "llama3-1t": (1183035102480, 2366163292416, 14198010802176),
    "design-memory-peer-pfs": (405853388800, 811764809728, 4886346792960),  # 405B on DP64
}


@pytest.mark.parametrize("preset", sorted(PRESET_BYTES))
def test_presets_keep_their_bytes_exactly(preset):
    cfg = load_config(preset)
    size = sizing.checkpoint_size(cfg.model, cfg.parallelism)
    assert (size.params, size.model_bytes, size.optimizer_bytes) == PRESET_BYTES[preset]
    parts = sizing.bytes_per_parameter(cfg.model, cfg.parallelism)
    assert sizing.describe_bytes_per_parameter(parts) == "2 weights bf16 + 4 master fp32 + 8 adam moments fp32 = 14"


def test_the_presets_tensors_keep_their_names_shapes_and_dtypes():
    from emulator.workload.state import model_specs, optimizer_specs
    cfg = load_config("llama3-405b")
    c = sizing.rank_coords(8 * 31, 8, 32, 2)  # the last stage's TP rank 0
    names = [(s.name, s.shape, str(s.dtype)) for s in model_specs(cfg.model, cfg.parallelism, c)]
    assert names[0] == ("layers.123.input_norm.weight", (16384,), "torch.bfloat16")
    assert names[1] == ("layers.123.attention.qkv.weight", (2304, 16384), "torch.bfloat16")
    assert names[-2:] == [("lm_head.weight", (16032, 16384), "torch.bfloat16"),
                          ("final_norm.weight", (16384,), "torch.bfloat16")]
    optim = [(s.name, s.shape, str(s.dtype)) for s in optimizer_specs(cfg.model, cfg.parallelism, c)]
    n = sizing.total_params(cfg.model) // 512
    assert optim == [(f"{state}.{part}", (n,) if part == "partition" else (5 * 16384,), "torch.float32")
                     for state in ("fp32_master", "exp_avg", "exp_avg_sq") for part in ("partition", "tail")]


def _cfg(*sets, base="validation/dlrover-gpt-1.5b"):
    return load_config(base, list(sets))


def test_dlrover_gpt_1_5b_is_18_gb_and_24_with_the_distributed_optimizer():
    """DLRover's Flash Checkpoint post: Megatron GPT-1.5B, TP8 on 2 x 8 A100, fp32: 18 GB and 24 GB."""
    plain, dist = _cfg(), load_config("validation/dlrover-gpt-1.5b-distopt")
    for cfg, published, per_param in ((plain, 18, 12), (dist, 24, 16)):
        size = sizing.checkpoint_size(cfg.model, cfg.parallelism)
        assert size.total_bytes / GIB == pytest.approx(published, rel=0.03)
        assert sum(p.bytes for p in sizing.bytes_per_parameter(cfg.model, cfg.parallelism)) == per_param
        assert size.params / 1e9 == pytest.approx(1.56, rel=0.01)
    parts = sizing.bytes_per_parameter(dist.model, dist.parallelism)
    assert sizing.describe_bytes_per_parameter(parts) == \
        "4 weights fp32 + 4 main copy (distributed optimizer) fp32 + 8 adam moments fp32 = 16"


def test_gpt2_1_5b_given_by_its_dimensions():
    cfg = load_config("validation/gpt2-1.5b")
    h, v, layers = 1600, 50257, 48
    per_layer = 2 * 2 * h + (h * 3 * h + 3 * h) + (h * h + h) + (h * 4 * h + 4 * h) + (4 * h * h + h)
    assert sizing.layer_params(cfg.model) == per_layer
    assert sizing.total_params(cfg.model) == v * h + 1024 * h + layers * per_layer + 2 * h == 1_557_611_200
    assert sizing.total_params(cfg.model) / 1e9 == pytest.approx(1.56, rel=0.01)


def test_a_model_given_by_its_parameter_count_alone():
    cfg = load_config("llama3-8b", ["model.params=1000", "model.num_layers=3", "model.name=flat",
                                    "parallelism.tp=2", "parallelism.dp=1", "parallelism.zero_stage=0"])
    assert sizing.architecture(cfg.model) == "uniform"
    assert sizing.total_params(cfg.model) == 1000
    # split evenly over the layers, the first params % layers one more, each layer evenly over TP
    assert sizing.stage_tensors(cfg.model, 2, 1, 0) == (("layers.0.weight", (167,)), ("layers.1.weight", (166,)),
                                                         ("layers.2.weight", (166,)))
    size = sizing.checkpoint_size(cfg.model, cfg.parallelism)
    assert size.total_bytes == 2 * (167 + 166 + 166) * 14


@pytest.mark.parametrize("sets,per_param", [
    (["model.params_dtype=fp32", "model.master_dtype=none", "model.optimizer=sgd"], "4 weights fp32 + 4 sgd momentum fp32 = 8"),
    (["model.optimizer=none", "model.master_dtype=none", "model.params_dtype=fp8"], "1 weights fp8 = 1"),
    (["model.optimizer_dtype=bf16"], "2 weights bf16 + 4 master fp32 + 4 adam moments bf16 = 10"),
])
def test_the_numerics_set_the_bytes(sets, per_param):
    cfg = load_config("validation/gpt2-1.5b", sets)
    parts = sizing.bytes_per_parameter(cfg.model, cfg.parallelism)
    assert sizing.describe_bytes_per_parameter(parts) == per_param
    size = sizing.checkpoint_size(cfg.model, cfg.parallelism)  # ZeRO-3, TP1: nothing is replicated
    assert size.total_bytes == pytest.approx(size.params * sum(p.bytes for p in parts), rel=1e-6)


def test_adafactor_keeps_rows_and_columns():
    cfg = load_config("validation/gpt2-1.5b", ["model.optimizer=adafactor", "parallelism.dp=1"])
    size = sizing.checkpoint_size(cfg.model, cfg.parallelism)
    factored = size.optimizer_bytes - 4 * size.params  # less the fp32 master
    h = 1600
    per_layer = 2 * (h + h) + (3 * h + h + 3 * h) + (h + h + h) + (4 * h + h + 4 * h) + (h + 4 * h + h)
    assert factored == 4 * (per_layer * 48 + (50257 + h) + (1024 + h) + 2 * h)
    assert factored < size.params / 100


def test_hsdp_one_replica_group_writes_the_checkpoint_over_its_shard_group():
    """1,024 GPUs, 32 ranks per shard group: per-rank bytes = the model's checkpoint / 32."""
    cfg = load_config("validation/gpt2-1.5b", ["parallelism.dp=1024", "parallelism.shard_group=32"])
    size = sizing.checkpoint_size(cfg.model, cfg.parallelism)
    fsdp32 = load_config("validation/gpt2-1.5b", ["parallelism.dp=32"])
    assert size.total_bytes == sizing.checkpoint_size(fsdp32.model, fsdp32.parallelism).total_bytes
    per_rank = [sizing.rank_size(cfg.model, cfg.parallelism, r).total_bytes for r in range(1024)]
    assert per_rank[:32] == [size.total_bytes // 32] * 32 and size.total_bytes % 32 == 0
    assert set(per_rank[32:]) == {0}
    assert size.held_bytes == 32 * size.total_bytes  # every replica holds a copy
    assert sizing.state_holders(cfg.parallelism, 33) == list(range(1, 1024, 32))
    every = load_config("validation/gpt2-1.5b", ["parallelism.dp=1024", "parallelism.shard_group=32",
                                                 "parallelism.writers=every_replica"])
    assert sizing.checkpoint_size(every.model, every.parallelism).total_bytes == 32 * size.total_bytes


def test_megatron_zero0_writes_only_dp_rank_0_and_nodes_carry_unequal_bytes():
    cfg = _cfg()
    par = cfg.parallelism
    nodes = sizing.node_bytes(cfg.model, par, 8)
    assert nodes[0] == sizing.checkpoint_size(cfg.model, par).total_bytes and nodes[1] == 0
    every = _cfg("parallelism.writers=every_replica")
    assert sizing.node_bytes(every.model, every.parallelism, 8) == [nodes[0], nodes[0]]


def test_sizes_shows_where_the_bytes_per_parameter_come_from(capsys):
    assert main(["sizes", "validation/dlrover-gpt-1.5b-distopt"]) == 0
    out = capsys.readouterr().out
    assert "bytes per parameter: 4 weights fp32 + 4 main copy (distributed optimizer) fp32 + 8 adam moments fp32 = 16" in out
    # 14.66 GiB and 8.79 GiB, said in the answer's family: decimal where the config gives no design
    assert "1 node(s) of 8 ranks hold    15.7 GB each" in out and "1 node(s) of 8 ranks hold    9.44 GB each" in out
    assert main(["sizes", "validation/dlrover-gpt-1.5b", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["bytes_per_param_total"] == 12 and obj["per_node_bytes"][1] == 0
    assert obj["held_bytes"] == 2 * obj["total_bytes"]


def test_the_rank_state_follows_the_numerics():
    """What a rank process builds (workload/state.py) is what sizing says, in the job's dtypes."""
    import torch

    from emulator.workload.state import RankState
    cfg = load_config("validation/dlrover-gpt-1.5b-distopt")
    st = RankState(cfg.model, cfg.parallelism, rank=9, scale=0.001)  # DP rank 1: its optimizer shard only
    assert {t.dtype for t in st.tensors()} == {torch.float32}
    assert not st.live["model"] and set(st.live["optimizer"]) == {"fp32_master.partition", "exp_avg.partition",
                                                                  "exp_avg_sq.partition"}
    assert st.emulated_bytes == sizing.rank_size(cfg.model, cfg.parallelism, 9).total_bytes
    assert st.nbytes == pytest.approx(st.emulated_bytes * 0.001, rel=0.01)
    first = RankState(cfg.model, cfg.parallelism, rank=0, scale=0.01)
    assert "layers.0.attention.dense.bias" in first.live["model"]
    assert first.nbytes == pytest.approx(first.emulated_bytes * 0.01, rel=0.01)
    fp8 = RankState(*_fp8(), rank=0, scale=0.0001)
    assert {t.dtype for t in fp8.live["model"].values()} == {torch.float8_e4m3fn}


def _fp8():
    cfg = load_config("validation/gpt2-1.5b", ["model.params_dtype=fp8"])
    return cfg.model, cfg.parallelism


@pytest.mark.parametrize("sets,key", [
    (["model.params_dtype=fp12"], "model.params_dtype: unknown dtype 'fp12'"),
    (["model.master_dtype=fp64"], "model.master_dtype: unknown dtype 'fp64'"),
    (["model.optimizer=lamb"], "model.optimizer: unknown optimizer 'lamb'"),
    (["parallelism.shard_group=3"], "parallelism.shard_group: 3 does not divide the data-parallel size 8"),
    (["parallelism.zero_stage=0", "parallelism.shard_group=2"], "parallelism.shard_group: ZeRO-0 shards nothing"),
    (["parallelism.distributed_optimizer=true"], "parallelism.distributed_optimizer: shards the optimizer"),
    (["model.architecture=uniform"], "model.params: architecture uniform needs params"),
    (["model.architecture=llama", "model.params=1.0e+9"], "model.params: a model given by its parameter count alone is architecture uniform"),
    (["parallelism.writers=some"], "parallelism.writers: must be one_replica, every_replica or balanced"),
])
def test_bad_numerics_and_layouts_are_one_line_and_exit_2(sets, key, capsys, tmp_path):
    with pytest.raises(ConfigError, match=key):
        load_config("llama3-8b", sets)
    out = tmp_path / "out"
    args = [a for s in sets for a in ("--set", s)]
    assert main(["sizes", "llama3-8b", *args]) == 2
    assert main(["run", "llama3-8b", "--out", str(out), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("ckpt-emu: error: ") and key in line for line in err)
    assert not out.exists()


def test_mlperf_files_keep_learned_positions_with_the_embedding():
    from emulator.mlperf.protocol import rank_files
    cfg = load_config("validation/gpt2-1.5b", ["checkpoint.protocol=mlperf", "parallelism.zero_stage=1",
                                               "parallelism.pp=2", "parallelism.dp=4", "run.scale=0.001"])
    first = rank_files(cfg, 0)[0]
    assert first.name == "layer_0-model_0_model_states.pt"
    assert [s.name for s in first.specs] == ["embedding.weight", "position_embedding.weight"]


@pytest.mark.parametrize("preset, scale", [("llama3-405b-subset", 0.001), ("llama3-70b-subset", 0.0001)])
def test_a_scaled_rank_holds_its_share_of_the_bytes_to_the_element(preset, scale):
    """Every tensor shrinks by ``scale`` to the element (at least one), whatever its shape: a TP-sharded
    weight of 1,024 rows at 0.001 is not one row (2.4 % short, and so every time the run converts to
    full size with it)."""
    from emulator.workload.state import model_specs, optimizer_specs
    cfg = load_config(preset)
    coords = sizing.rank_coords(0, cfg.parallelism.tp, cfg.parallelism.pp, cfg.parallelism.dp)
    for specs in (model_specs, optimizer_specs):
        full = specs(cfg.model, cfg.parallelism, coords)
        scaled = specs(cfg.model, cfg.parallelism, coords, scale)
        one_element_each = sum(s.nbytes // max(1, math.prod(s.shape)) for s in scaled)
        assert abs(sum(s.nbytes for s in scaled) - scale * sum(s.nbytes for s in full)) <= one_element_each
