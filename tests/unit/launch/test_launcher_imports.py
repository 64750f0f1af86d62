"""The CLI process that launches a run does not import torch (only the ranks and torchrun's agent
need it, and its import costs every run about a second and a half of CPU), yet refuses cuda without one."""
from __future__ import annotations

import subprocess
import sys

import pytest
from emu import small_config

pytestmark = pytest.mark.quick

CHECK = """
import sys
from emulator.config import load_config
from emulator.launch.runner import preflight
preflight(load_config(sys.argv[1]), 1)
print("torch" in sys.modules)
"""


@pytest.mark.parametrize("device", ["auto", "cpu"])
def test_preflight_of_a_run_on_the_cpu_does_not_import_torch(tmp_path, device):
    cfg = small_config(tmp_path, state={"device": device})
    proc = subprocess.run([sys.executable, "-c", CHECK, str(cfg)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_cuda_on_a_machine_without_one_is_still_refused_before_the_launch(tmp_path):
    import torch

    from emulator.config import load_config
    from emulator.errors import UserError
    from emulator.launch.runner import preflight
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(UserError, match="state.device: cuda requested"):
        preflight(load_config(str(small_config(tmp_path, state={"device": "cuda"}))), 1)
    assert not (tmp_path / "out").exists()
