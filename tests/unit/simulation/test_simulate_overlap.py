"""The simulator's ``checkpoint.async_waits_for: local_write``: the next async checkpoint waits only
for the previous one's local write (and the one before it to be complete), drains stay in order,
and a drain reads the local device, sharing it with the next write unless the device is duplex.

Hand-computed answers on a one-node design whose rates read as seconds (10 B per node, local
writes at 10 B/s: 1 s; drains at 1 B/s: 10 s; a 0.5 s snapshot), then one agreement test
against a real emulated run.
"""
import pytest
from simdesign import NodeGroup, design

from emulator.config import load_config
from emulator.design import resolve
from emulator.simulation.model import JobModel, RunSpec
from emulator.units import GIB

ONE = [NodeGroup(1, 10, 10, 1)]


def _run(d, interval_s: float):
    """Three async checkpoints every ``interval_s``: the outcome and the per-checkpoint totals."""
    model = JobModel(d, RunSpec("async", interval_s, saves=3))
    return model.run(), model.t


def test_complete_waits_for_the_previous_drain():
    """Checkpoint 1 at 8 s completes at 8.5 + 1 + 10 = 19.5; checkpoint 2 is due at 16.5: a miss,
    3 s of waiting plus the snapshot. Checkpoint 2 completes at 20 + 11 = 31, checkpoint 3 is due
    at 28: the same again."""
    out, t = _run(design(ONE, local_bps=10, snapshot_s=0.5), 8)
    assert list(t.stalls) == pytest.approx([0.5, 3.5, 3.5])
    assert out.deadline_misses == 2


def test_local_write_waits_only_for_the_write():
    """The same design with ``local_write``: checkpoint 2 (due at 16.5) waits for checkpoint 1's
    write (done at 9.5), not its drain; it still counts a deadline miss, as the emulator does
    (the previous checkpoint is not complete). Drain 2 starts when drain 1 ends (19.5)."""
    out, t = _run(design(ONE, local_bps=10, snapshot_s=0.5, async_waits_for="local_write"), 8)
    assert list(t.stalls) == pytest.approx([0.5, 0.5, 0.5])
    assert out.deadline_misses == 2
    assert list(t.writes) == pytest.approx([1.0, 1.0, 1.0])
    assert list(t.drains) == pytest.approx([10.0, 10.0, 10.0])  # in order: never two at once
    assert out.wall_s == pytest.approx(25.5 + 1 + 3 + 10)  # drain 3 waits for drain 2 (ends 29.5)


def test_local_write_waits_for_the_checkpoint_before_the_previous():
    """Interval 4 s, drains 10 s: checkpoint 3 (due at 13) has checkpoint 2 written but
    checkpoint 1 draining until 15.5: at most one drain behind the write, so it waits 2.5 s
    before its snapshot."""
    out, t = _run(design(ONE, local_bps=10, snapshot_s=0.5, async_waits_for="local_write"), 4)
    assert list(t.stalls) == pytest.approx([0.5, 0.5, 2.5 + 0.5])
    assert out.deadline_misses == 2


def _shared(duplex: bool):
    """Local device: writes 10 B/s, reads 1 B/s (a read of 10 B books 100 B of write time)."""
    return design(ONE, local_bps=10, local_read_bps=1.0, duplex=duplex, snapshot_s=0.5, async_waits_for="local_write")


def test_a_write_overlapping_a_drain_shares_a_non_duplex_device():
    """Drain 1 reads 100 B of device time from 9.5 on (alone: 10 s). Write 2 starts at 17 with 25 B
    of the read left: both at 5 B/s, the write's 10 B take 2 s (1 s alone); the read's last 15 B
    then take 1.5 s, so drain 1 ends at 20.5 (its upload at 19.5). Drain 2 reads from 20.5;
    write 3 at 25.5 meets 50 B of it left: 2 s again."""
    out, t = _run(_shared(duplex=False), 8)
    assert list(t.writes) == pytest.approx([1.0, 2.0, 2.0])
    assert t.drains[0] == pytest.approx(11.0)


def test_a_duplex_device_reads_without_slowing_the_write():
    out, t = _run(_shared(duplex=True), 8)
    assert list(t.writes) == pytest.approx([1.0, 1.0, 1.0])
    assert list(t.drains) == pytest.approx([10.0, 10.0, 10.0])  # the 10 s read runs beside the upload


def test_complete_is_unchanged_by_the_local_read():
    """``complete`` keeps its model: the drain's local read is not simulated there."""
    base, bt = _run(design(ONE, local_bps=10, snapshot_s=0.5), 8)
    shared, st = _run(design(ONE, local_bps=10, snapshot_s=0.5, local_read_bps=1.0, duplex=False), 8)
    assert list(st.stalls) == list(bt.stalls) and shared.wall_s == base.wall_s


@pytest.mark.parametrize("duplex", [False, True])
def test_the_design_carries_the_wait_and_the_device(duplex):
    cfg = load_config("llama3-8b", [
        "checkpoint.async_waits_for=local_write", "parallelism.ranks=2",
        "design.job.nodes=1", "design.job.accelerators_per_node=2",
        "design.node.local.write=2GiB/s", "design.node.local.read=0.5GiB/s",
        f"design.node.local.duplex={str(duplex).lower()}", "design.global.write=1GiB/s"])
    d = resolve(cfg, as_run=True, dilation=1.0)
    assert d.async_waits_for == "local_write"
    local = d.link("local")
    if duplex:
        assert local.shared_device() is None and local.read.node_bps == pytest.approx(0.5 * GIB)
    else:
        assert local.shared_device().aggregate_bps == pytest.approx(2 * GIB)
        assert local.read_cost == pytest.approx(4.0)
