"""The last async checkpoint is measured like every other one: training goes on while it is written
and drained (a real job keeps training after a checkpoint), so its write and drain overlap steps,
and "at risk when training stopped" counts only what a failure then would really lose."""
from __future__ import annotations

import pytest
from emu import ckpt_emu, results, small_config


@pytest.fixture(scope="module")
def slow_drain_run(tmp_path_factory):
    """Async only; each drain (a few MiB at 0.02 GiB/s) takes longer than the steps left after the last checkpoint."""
    tmp = tmp_path_factory.mktemp("last")
    cfg = small_config(tmp, checkpoint={"modes": ["async"], "saves": 3, "loads": 0, "interval_steps": 4},
                       training={"step_seconds": 0.1},
                       tiers={"global": {"emulate": {"write_gib_s": 0.02, "shared_by": "node"}}})
    ckpt_emu("run", cfg, "--quiet", check=True, timeout=300)
    return results(tmp / "out")


def test_the_last_checkpoint_is_drained_while_training_goes_on(slow_drain_run):
    r = slow_drain_run
    mode = r["modes"]["async"]
    for rank in r["per_rank"]:
        recs = [x for x in rank["records"] if x["mode"] == "async"]
        assert len(recs) == 3  # no checkpoint is added by the steps that wait for the drain
        last = recs[-1]
        assert last["global_complete"] and last["durable_at"] > 0
    assert mode["at_risk"] == 0, mode
    assert mode["steps"] > 12, mode  # 3 x 4 steps, then steps while the last drain ran
