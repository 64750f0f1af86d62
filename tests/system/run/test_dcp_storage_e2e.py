"""PyTorch DCP through a tier in a torchrun world of 4 gloo ranks that hold replicated state (TP2 DP2
ZeRO-1: each weight on 2 ranks): DCP's planner spreads the replicated writes exactly as ``sizes`` says
for ``writers: balanced``, every file is recorded with its size and CRC32C, and DCP's own converter
reads the tier's checkpoint in a fresh process, every tensor equal to what the ranks held."""
from __future__ import annotations

import json
import pickle
import subprocess
import sys
import zlib

import crc32c
import torch
from emu import free_port
from paths import ROOT

from emulator import sizing
from emulator.config import load_config

FOLDER = "step_00000003"
SETS = ["model.num_layers=2", "model.hidden_size=64", "model.num_attention_heads=4", "model.vocab_size=256",
        "model.max_positions=32", "parallelism.tp=2", "parallelism.dp=2", "parallelism.zero_stage=1",
        "parallelism.writers=balanced", "checkpoint.engine=dcp"]


def test_dcp_spreads_replicated_writes_as_sizes_says_and_converts(tmp_path):
    tier, out = tmp_path / "tier", tmp_path / "files.json"
    args = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4", "--master-addr", "127.0.0.1",
            "--master-port", str(free_port()), str(ROOT / "tests" / "support" / "dcp_ranks.py"),
            str(tier), FOLDER, str(out), "validation/gpt2-1.5b", *[a for s in SETS for a in ("--set", s)]]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = json.loads(out.read_text())
    for f in files:  # each file recorded as its bytes are
        data = (tier / f["key"]).read_bytes()
        assert (len(data), f"{crc32c.crc32c(data):08x}") == (f["size"], f["crc32c"])
    assert sorted(f["key"].split("/")[1] for f in files) == [".metadata"] + [f"__{r}_0.distcp" for r in range(4)]

    cfg = load_config("validation/gpt2-1.5b", SETS)
    model, par = cfg.model, cfg.parallelism
    with open(tier / FOLDER / ".metadata", "rb") as fh:
        metadata = pickle.load(fh)
    written = {r: set() for r in range(4)}
    for index, info in metadata.storage_data.items():
        written[int(info.relative_path.split("_")[2])].add(index.fqn)
    for rank in range(4):  # DCP's dedup, run by the library on 4 ranks, is sizes' balanced layout
        c = sizing.rank_coords(rank, par.tp, par.pp, par.dp)
        ours = {sizing.replica_key(par, c, part, t.name)
                for part, tensors in (("model", sizing.model_tensors(model, par, c)),
                                      ("optimizer", sizing.optimizer_tensors(model, par, c))) for t in tensors}
        assert written[rank] == ours, rank
    assert written[0] != written[2] and written[2]  # DP rank 1 writes some of the weights it holds

    expected = {}
    for key, md in metadata.state_dict_metadata.items():
        g = torch.Generator().manual_seed(zlib.crc32(key.encode()))
        expected[key] = torch.randn(tuple(md.size), generator=g).to(md.properties.dtype)
    torch.save(expected, tmp_path / "expected.pt")
    script = ("import sys, torch\n"
              "from torch.distributed.checkpoint.format_utils import dcp_to_torch_save\n"
              "dcp_to_torch_save(sys.argv[1], sys.argv[2])\n"
              "got, want = torch.load(sys.argv[2]), torch.load(sys.argv[3])\n"
              "assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)\n"
              "print(sum(t.nbytes for t in got.values()))\n")
    conv = subprocess.run([sys.executable, "-c", script, str(tier / FOLDER), str(tmp_path / "c.pt"),
                           str(tmp_path / "expected.pt")], capture_output=True, text=True, timeout=120)
    assert conv.returncode == 0, conv.stderr[-2000:]
    assert int(conv.stdout) == sizing.checkpoint_size(model, par).total_bytes
