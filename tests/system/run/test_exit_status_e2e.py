"""A real design that misses its deadlines exits 1 under --fail-on-miss (the CI gate), and says what
it missed; emulator/errors.py lists the statuses, tests/unit/cli/test_exit_status.py checks them in-process."""
from __future__ import annotations

from emu import ckpt_emu, results, small_config


def test_a_design_that_misses_its_deadlines_fails_the_gate(tmp_path):
    cfg = small_config(tmp_path, training={"step_seconds": 0.05},
                       checkpoint={"modes": ["async"], "saves": 3, "loads": 1, "interval_steps": 2, "keep": 2},
                       tiers={"global": {"emulate": {"write_gib_s": 0.05, "shared_by": "job"}}})
    proc = ckpt_emu("run", cfg, "--quiet", "--fail-on-miss", timeout=300)
    missed = results(tmp_path / "out")["modes"]["async"]["deadline_misses"]
    assert missed >= 1  # the drains are slower than the interval
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == \
        f"ckpt-emu: the design missed its goals: async: {missed} deadline miss(es)"
