"""After one checkpoint, a restore and a recovery, every ``ckpt_emu_`` name a dashboard panel or a
Prometheus rule reads is exported, the families "absent until measured" included.

The baseline test (test_metrics.py) must exempt those four: before the first checkpoint they are
absent by design. So a rename of one of them (the emulator exporting a name no panel reads any
more) was caught only by the system tier's live Prometheus. Here a rank's calls, in this process:
what it sets at start, one real sync checkpoint through the Checkpointer to a local and a global
tier, a restore through the Restorer, the loop's slowdown and a recovery, then the registry's text.
"""
from __future__ import annotations

import pytest
from dashboards import ABSENT_UNTIL_MEASURED, queried_names
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from rundesign import rank_state

from emulator.checkpoint.checkpointer import Checkpointer
from emulator.checkpoint.restore import Restorer
from emulator.config import load_config
from emulator.fullsize import DesignClock
from emulator.metrics import Metrics
from emulator.rank.comm import SoloComm
from tiers.directory import DirTier


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Every sample name the registry exports after the rank's calls (as emulator/rank/ makes them)."""
    tmp = tmp_path_factory.mktemp("metrics")
    cfg = load_config("llama3-8b", ["run.scale=0.0002", "parallelism.ranks=1"])
    registry = CollectorRegistry()
    m = Metrics(registry, tick_s=0.02)
    try:
        m.set_info(preset="llama3-8b", scale=0.0002, ranks=1, nodes=1, modes=["sync"], version="t")
        m.set_tiers(local="dir", global_="dir")
        m.set_clock(DesignClock(k=0.0002))
        for tier in ("local", "global"):
            m.set_tier_interval(tier, 500.0)
        m.set_interval("sync", 500.0)
        state = rank_state(cfg, 0)
        local, glob = DirTier(tmp / "local"), DirTier(tmp / "global")
        ckpt = Checkpointer(state, local, glob, SoloComm(), keep=2, metrics=m)
        try:
            rec = ckpt.checkpoint(8, "sync")
            ckpt.finish()
        finally:
            ckpt.close()
        assert rec.global_complete, rec.error
        load = Restorer(state, [("local", local), ("global", glob)], SoloComm(), metrics=m, mode="sync").load()
        assert load.ok, load
        m.set_baseline_step(1.0)
        m.set_slowdown("sync", 0.05)        # the training loop, after a checkpoint (rank/training.py)
        m.set_at_risk("sync", 0)            # ... when the mode's training stops
        m.observe_recovery("process", 12.0, 30.0)  # rank 0, after a recovery (rank/run.py)
        m.set_soak_sample("sync", 2 ** 28, {"local": 4, "global": 4})  # a soak, after a checkpoint (rank/soak.py)
        text = generate_latest(registry).decode()
    finally:
        m.close()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def test_every_queried_name_is_exported_after_a_checkpoint(exported):
    wanted = queried_names()
    assert set(ABSENT_UNTIL_MEASURED) <= wanted, "a name absent until measured is no longer queried"
    missing = sorted(wanted - exported)
    assert not missing, f"queried by a panel or a rule, not exported after a checkpoint: {missing}"


def test_the_checkpoint_itself_set_what_is_absent_until_measured(exported):
    """The newest complete checkpoint's time and the save and load throughput come from the
    Checkpointer and the Restorer, not from a call of this test's."""
    assert {"ckpt_emu_last_complete_checkpoint_timestamp_seconds", "ckpt_emu_throughput_bytes_per_second"} <= exported
