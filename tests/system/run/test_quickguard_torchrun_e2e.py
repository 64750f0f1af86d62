"""The quick tier's guard (tests/support/quickguard.py) against the real torch.distributed.run started
from a ``python -c``, whose command line names no torchrun (tests/unit/project/test_quickguard.py
checks the same with stand-ins, without importing torch)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from quickguard import watched

_RUNPY = "import runpy; runpy.run_module('torch.distributed.run', run_name='__main__')"
_MAIN = textwrap.dedent("""
    from torch.distributed.run import main
    main(['--nproc-per-node', '1', '--rdzv-backend', 'c10d', '--rdzv-endpoint', '127.0.0.1:0',
          '--max-restarts', '0', '-m', 'json.tool', '--help'])
""")


@pytest.mark.parametrize("code, what", [(_RUNPY, "torchrun"), (_MAIN, "torchrun's ranks")], ids=["runpy", "main"])
def test_a_python_c_that_runs_torchrun_is_caught_in_the_child(code, what):
    with watched() as seen:
        proc = subprocess.run([sys.executable, "-c", code, "--nproc-per-node", "1", "-m", "json.tool"],
                              capture_output=True, text=True, timeout=120)
    assert what in seen, (seen, proc.stderr[-2000:])
    assert proc.returncode != 0
