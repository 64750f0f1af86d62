"""``parallelism.writers: balanced`` with the torch_save engine, run for real: 2 torchrun ranks (DP2
ZeRO-1, every weight on both) each write one half of every weight and their own optimizer shard, the
tensors ``sizes`` counts, and a restore reads each rank's file back, verified."""
from __future__ import annotations

import json

import torch
from emu import ckpt_emu, results, small_config

from emulator import sizing
from emulator.config import load_config
from emulator.workload.state import model_specs, optimizer_specs

LAYOUT = {"tp": 1, "pp": 1, "dp": 2, "zero_stage": 1, "writers": "balanced", "ranks": 2}


def test_a_balanced_run_writes_the_slices_sizes_counts_and_restores(tmp_path):
    cfg_path = small_config(tmp_path, ranks=2, parallelism=LAYOUT, checkpoint={"saves": 2, "loads": 1, "modes": ["sync"]})
    proc = ckpt_emu("run", cfg_path, "--quiet", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = results(tmp_path / "out")
    assert all(m["incomplete"] == 0 and m["checkpoints"] == 2 for m in res["modes"].values())
    assert res["load"]["ok"] and res["load"]["loads"]

    sizes = json.loads(ckpt_emu("sizes", cfg_path, "--json", check=True).stdout)
    assert sizes["writers_layout"]["layout"] == "even_slices"
    cfg = load_config(str(cfg_path))
    model, par, scale = cfg.model, cfg.parallelism, cfg.run.scale
    newest = sorted((tmp_path / "global").glob("step_*/manifest.json"))[-1].parent
    spans: dict = {}
    for rank in range(2):
        c = sizing.rank_coords(rank, par.tp, par.pp, par.dp)
        [path] = newest.glob(f"*rank{rank:05d}*")
        saved = torch.load(path, map_location="cpu", weights_only=True)
        specs = {"model": model_specs(model, par, c, scale), "optimizer": optimizer_specs(model, par, c, scale)}
        for part, want in specs.items():  # the slices by name and shape; the optimizer shard whole
            assert [(k, tuple(t.shape)) for k, t in saved[part].items()] == [(s.name, s.shape) for s in want]
        assert all("[" not in n for n in saved["optimizer"])
        for name in saved["model"]:
            whole, lo_hi = name[:-1].split("[")
            spans.setdefault(whole, []).append(tuple(map(int, lo_hi.split(":"))))
        tensor_bytes = sum(t.nbytes for part in ("model", "optimizer") for t in saved[part].values())
        assert abs(tensor_bytes - sizes["per_rank_bytes"][rank] * scale) < 0.002 * tensor_bytes
        assert tensor_bytes < path.stat().st_size < tensor_bytes + (256 << 10)  # the file is its tensors
    held = sizing.held_model_tensors(model, par, 0)
    assert sorted(spans) == sorted(t.name for t in held)
    for t in held:  # rank 0 writes the first half of each weight, rank 1 the rest, to the element
        n = sizing.tensor_bytes(t) // sizing.DTYPE_BYTES[t.dtype]
        assert spans[t.name] == [(0, n // 2), (n // 2, n)], t.name
    mine = [sizes["per_rank"][d]["model_bytes"] for d in range(2)]
    assert sum(mine) == sum(sizing.tensor_bytes(t) for t in held) and abs(mine[0] - mine[1]) <= 2 * len(held)
