"""Multi-level checkpointing metrics (memory, peer, local, global tiers; recovery by failure class):
the new methods' values, label validation and which series exist when; then the new panels and
rules against a real Prometheus scraping a live ``Metrics`` fed by hand, healthy and broken."""
from __future__ import annotations


import pytest
from prom import Prometheus, finite, prometheus, shipped_config  # noqa: F401 - fixture
from prometheus_client import CollectorRegistry

from emulator import metrics as M
from emulator.design import ladder
from emulator.metrics import Metrics


@pytest.fixture
def reg():
    return CollectorRegistry()


@pytest.fixture
def m(reg):
    metrics = Metrics(reg)
    yield metrics
    metrics.close()


def val(reg, name, **labels):
    return reg.get_sample_value(name, labels)


# --------------------------------------------------------------------------- values and series

def test_the_closed_sets():
    assert M.TIERS == ("memory", "peer", "local", "global") == ladder.names()  # every rung kind, in its order
    assert M.FAILURE_CLASSES == ("process", "node", "group")
    assert {"replicate", "persist", "fetch"} <= set(M.PHASES)
    assert {"snapshot", "d2h", "local_write", "drain", "load"} <= set(M.PHASES)  # the old ones stay


def test_a_tier_has_series_only_once_the_run_announces_it(m, reg):
    """A run announces each tier it configures, with its interval, at start: until then the tier
    has no series at all (a run without a peer tier shows no peer lines, not zeros)."""
    for tier in M.TIERS:
        assert val(reg, "ckpt_emu_tier_interval_seconds", tier=tier) is None
        assert val(reg, "ckpt_emu_tier_durability_lag_seconds_count", tier=tier) is None
        assert val(reg, "ckpt_emu_last_tier_durability_lag_seconds", tier=tier) is None
        assert val(reg, "ckpt_emu_checkpoints_completed_total", tier=tier) is None
    m.set_tier_interval("memory", 2.0)
    m.set_tier_interval("peer", 8.0)
    assert val(reg, "ckpt_emu_tier_interval_seconds", tier="memory") == 2.0
    assert val(reg, "ckpt_emu_tier_interval_seconds", tier="peer") == 8.0
    for tier in ("memory", "peer"):  # true zeros from the announcement on
        assert val(reg, "ckpt_emu_tier_durability_lag_seconds_count", tier=tier) == 0
        assert val(reg, "ckpt_emu_last_tier_durability_lag_seconds", tier=tier) == 0
        assert val(reg, "ckpt_emu_checkpoints_completed_total", tier=tier) == 0
    for tier in ("local", "global"):
        assert val(reg, "ckpt_emu_tier_interval_seconds", tier=tier) is None
        assert val(reg, "ckpt_emu_checkpoints_completed_total", tier=tier) is None


def test_set_tiers_announces_the_completion_counters_of_its_tiers(reg):
    Metrics(reg).set_tiers(local="dir", global_="s3")
    assert val(reg, "ckpt_emu_checkpoints_completed_total", tier="local") == 0
    assert val(reg, "ckpt_emu_checkpoints_completed_total", tier="global") == 0
    direct = CollectorRegistry()  # no local tier: no local count to speak of
    Metrics(direct).set_tiers(local=None, global_="s3")
    assert val(direct, "ckpt_emu_checkpoints_completed_total", tier="local") is None
    assert val(direct, "ckpt_emu_checkpoints_completed_total", tier="global") == 0


def test_tier_lag_histogram_and_newest_lag(m, reg):
    m.set_tier_interval("peer", 4.0)
    m.observe_tier_lag("peer", 0.3)
    m.observe_tier_lag("peer", 7.0)
    assert val(reg, "ckpt_emu_tier_durability_lag_seconds_count", tier="peer") == 2
    assert val(reg, "ckpt_emu_tier_durability_lag_seconds_sum", tier="peer") == pytest.approx(7.3)
    assert val(reg, "ckpt_emu_tier_durability_lag_seconds_bucket", tier="peer", le="0.5") == 1
    assert val(reg, "ckpt_emu_tier_durability_lag_seconds_bucket", tier="peer", le="10.0") == 2
    assert val(reg, "ckpt_emu_last_tier_durability_lag_seconds", tier="peer") == 7.0  # the newest, not the max
    m.observe_tier_lag("peer", 1.5)
    assert val(reg, "ckpt_emu_last_tier_durability_lag_seconds", tier="peer") == 1.5
    # the global tier's lag by mode is another family, fed by its own call
    assert val(reg, "ckpt_emu_durability_lag_seconds_count", mode="async") == 0


def test_recovery_by_failure_class(m, reg):
    for cls in M.FAILURE_CLASSES:  # no recovery yet is true: histograms with no observation
        assert val(reg, "ckpt_emu_recovery_seconds_count", failure_class=cls) == 0
        assert val(reg, "ckpt_emu_last_lost_work_seconds", failure_class=cls) is None  # 0 would claim a failure
    m.observe_recovery("node", 42.0, 90.0)
    m.observe_recovery("node", 30.0, 12.5)
    m.observe_recovery("process", 3.0, 0.0)
    assert val(reg, "ckpt_emu_recovery_seconds_count", failure_class="node") == 2
    assert val(reg, "ckpt_emu_recovery_seconds_sum", failure_class="node") == 72.0
    assert val(reg, "ckpt_emu_recovery_seconds_bucket", failure_class="node", le="25.0") == 0
    assert val(reg, "ckpt_emu_recovery_seconds_bucket", failure_class="node", le="60.0") == 2
    assert val(reg, "ckpt_emu_last_lost_work_seconds", failure_class="node") == 12.5  # the newest
    assert val(reg, "ckpt_emu_last_lost_work_seconds", failure_class="process") == 0.0  # measured: nothing lost
    assert val(reg, "ckpt_emu_last_lost_work_seconds", failure_class="group") is None
    assert val(reg, "ckpt_emu_recovery_seconds_count", failure_class="group") == 0


def test_new_phases_are_accepted_on_the_new_tiers(m, reg):
    m.observe_phase("replicate", "peer", 0.2, backend="memory")
    m.observe_phase("persist", "local", 0.5, backend="dir")
    m.observe_phase("fetch", "peer", 1.0, backend="memory")
    m.observe_phase("snapshot", "memory", 0.1, backend="memory")
    assert val(reg, "ckpt_emu_phase_duration_seconds_count", phase="replicate", tier="peer", backend="memory") == 1
    assert val(reg, "ckpt_emu_phase_duration_seconds_count", phase="fetch", tier="peer", backend="memory") == 1
    m.add_bytes("write", "peer", 10, backend="memory")
    assert val(reg, "ckpt_emu_written_bytes_total", tier="peer", backend="memory") == 10


@pytest.mark.parametrize("call", [
    lambda m: m.set_tier_interval("nvme", 1.0),
    lambda m: m.set_tier_interval("local", 0),  # a tier that checkpoints has an interval
    lambda m: m.set_tier_interval("local", -5.0),
    lambda m: m.set_tier_interval("local", float("inf")),
    lambda m: m.observe_tier_lag("disk", 1.0),
    lambda m: m.observe_recovery("rack", 1.0, 1.0),
    lambda m: m.observe_recovery("Node", 1.0, 1.0),
    lambda m: m.observe_phase("copy", "peer", 1, backend="memory"),
    lambda m: m.checkpoint_complete("replica", 1, 0.0),
])
def test_unknown_tiers_classes_and_bad_intervals_fail_at_once(m, call):
    with pytest.raises(ValueError, match="metrics:"):
        call(m)


def test_null_metrics_answers_every_metrics_method_and_nothing_else():
    """Code records into NULL_METRICS when no metrics are wanted: every public Metrics method is there
    and does nothing (the tier and recovery ones included), and a misspelt one still raises."""
    public = {n for n, v in vars(Metrics).items() if callable(v) and not n.startswith("_")}
    assert {"set_tier_interval", "observe_tier_lag", "observe_recovery", "drain_started"} <= public
    missing = [n for n in public if not callable(getattr(M.NULL_METRICS, n, None))]
    assert missing == []
    assert M.NULL_METRICS.set_tier_interval("memory", 1.0) is None
    assert M.NULL_METRICS.observe_tier_lag("memory", 1.0) is None
    assert M.NULL_METRICS.observe_recovery("process", 1.0, 1.0) is None
    with pytest.raises(AttributeError):
        M.NULL_METRICS.set_tier_intervals("memory", 1.0)


# --------------------------------------------------------------------------- live: a Metrics fed by hand


# --------------------------------------------------------------------------- live: the shipped alerts
