"""A second run into the same --out keeps the first run's results (refused, exit 2, before it
launches anything); tests/unit/job/test_results_folder.py checks the rule in-process."""
from __future__ import annotations

from emu import ckpt_emu, small_config


def test_a_second_run_into_the_same_out_keeps_the_first_runs_results(tmp_path):
    cfg = small_config(tmp_path, run={"timeline": True}, checkpoint={"saves": 1, "loads": 0, "modes": ["sync"]})
    ckpt_emu("run", cfg, "--quiet", check=True)
    out = tmp_path / "out"
    first = {name: (out / name).read_bytes() for name in ("results.json", "report.txt", "timeline.png", "torchrun.log")}
    again = ckpt_emu("run", cfg, "--quiet")
    assert again.returncode == 2, again.stderr
    assert again.stderr.strip() == (f"ckpt-emu: error: results folder {out} holds a finished run's results "
                                    "(results.json, report.txt, timeline.png): give another --out, or --force to "
                                    "replace them")
    assert {name: (out / name).read_bytes() for name in first} == first
