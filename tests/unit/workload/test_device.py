"""state.device (emulator/workload/device.py): auto, cpu and cuda against a machine without CUDA; which GPU a
rank gets and how many ranks share it."""
from __future__ import annotations

import pytest
import torch

from emulator.cli import main
from emulator.errors import UserError
from emulator.workload import device

NO_CUDA = not torch.cuda.is_available()


def test_gpu_of_a_rank_and_ranks_sharing_it():
    assert [device.gpu_for(r, 3) for r in range(8)] == [0, 1, 2, 0, 1, 2, 0, 1]
    assert device.ranks_sharing(0, 8, 3) == 3 and device.ranks_sharing(2, 8, 3) == 2
    assert device.ranks_sharing(5, 8, 8) == 1
    assert device.ranks_sharing(0, 8, 1) == 8


@pytest.mark.skipif(not NO_CUDA, reason="checks a machine without CUDA")
def test_auto_and_cpu_fall_back_to_the_cpu_here():
    assert device.resolve_kind("auto") == "cpu" and device.resolve_kind("cpu") == "cpu"
    p = device.place("auto", 0, 2)
    assert p.kind == "cpu" and p.device == torch.device("cpu") and p.describe()["kind"] == "cpu"


@pytest.mark.skipif(not NO_CUDA, reason="checks a machine without CUDA")
def test_cuda_without_cuda_is_one_line_exit_2_before_anything_is_written(tmp_path, capsys):
    with pytest.raises(UserError, match="state.device: cuda requested but"):
        device.resolve_kind("cuda")
    out = tmp_path / "out"
    rc = main(["run", "--quiet", "--out", str(out), "--set", "state.device=cuda"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith("ckpt-emu: error: state.device: cuda requested but") and "state.device=auto" in err[0]
    assert not out.exists()
