"""Time dilation without a run: the factor's config and bounds, what pacing a tier at it means, the
paced spans a phase logs, and how a phase's seconds become the full-size design's."""
from __future__ import annotations

import contextlib
import math
import time
from types import SimpleNamespace

import pytest

from emulator.cli import main
from rundesign import run_design

from emulator.checkpoint.layout import FileEntry
from emulator.config import load_config
from emulator.design import run_emulation
from emulator.job.clock import Clock
from emulator.errors import ConfigError
from emulator.rank.dilation import PhaseProbe, Probe, choose, describe, nice
from emulator.fullsize import full, full_record, tier_lag
from emulator.results.design_time import host_shares
from tiers import paced as spans

T0 = 1_795_000_000.0  # a wall-clock start


@pytest.mark.parametrize("value", ["0.5", "0", "fast", "-2", ".inf"])
def test_a_dilation_below_one_or_not_a_number_is_refused(value):
    with pytest.raises(ConfigError, match="^run.dilation: must be auto or a factor >= 1"):
        load_config("default", [f"run.dilation={value}"])


def test_auto_and_a_factor_are_read_back_as_written():
    assert load_config("default").to_dict()["run"]["dilation"] == "auto"
    cfg = load_config("default", ["run.dilation=8"])
    assert cfg.run.dilation.factor == 8 and cfg.to_dict()["run"]["dilation"] == 8
    clock = Clock.of(cfg.run)
    assert clock.time_factor == pytest.approx(cfg.run.scale * 8)
    assert clock.wall(cfg.training.step_seconds) == pytest.approx(cfg.training.step_seconds * cfg.run.scale * 8)


def test_a_factor_that_makes_the_run_too_long_is_refused_before_anything_is_written(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["run", "--out", str(out), "--set", "run.dilation=2000", "--set", "run.wall_target=null",
               "--set", f"tiers.global.path={tmp_path}/g",
               "--set", f"tiers.local.path={tmp_path}/l"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert err[0].startswith("ckpt-emu: error: run.dilation: x2000 makes this run take about") and "run.wall_limit" in err[0]
    assert not list(tmp_path.iterdir())


def test_mlperf_measures_the_storage_undilated():
    with pytest.raises(ConfigError, match="^run.dilation: MLPerf's protocol measures the storage as it is"):
        load_config("mlperf-llama3-8b", ["run.dilation=4"])


def test_a_tier_is_paced_at_its_rate_over_d_and_its_latency_at_the_time_factor():
    cfg = load_config("default", ["run.dilation=10"])
    design = run_emulation(cfg, "global")
    got = Clock.of(cfg.run).paced(design)
    k = cfg.run.scale * 10
    assert got.write_gib_s == pytest.approx(design.write_gib_s / 10)
    assert got.read_gib_s == pytest.approx(design.read_gib_s / 10)
    assert got.latency_ms == pytest.approx(design.latency_ms * k)
    assert got.put_per_s_per_prefix == pytest.approx(design.put_per_s_per_prefix / k)
    # so a transfer of B bytes at the run's scale takes k x the design's B_full / rate
    b_full = 1e9
    assert (b_full * cfg.run.scale) / (got.write_gib_s * 2**30) == pytest.approx(k * b_full / (design.write_gib_s * 2**30))


@pytest.mark.parametrize("need,want", [(0.7, 1), (1, 1), (1.1, 1.25), (16.2, 20), (99, 100), (125, 125), (126, 150)])
def test_the_factor_is_rounded_up_to_a_value_that_reads_well(need, want):
    assert nice(need) == pytest.approx(want)


def test_a_phase_needs_twice_the_paced_rate():
    assert PhaseProbe("write", "local", design_bps=6e9, host_bps=1e9).needs == pytest.approx(12)


def test_the_paced_window_leaves_the_host_twice_its_software_and_its_bytes():
    """The window at D is B x D / R. Bytes that take the host 0.6 s after 0.1 s of per-file software:
    twice 0.7 s, D = 14 (12 on the bytes alone). Software of 0.2 s before bytes of 0.06 s: twice
    0.26 s, D = 52 (12 on the bytes alone left the software no room: the host's own time came on top
    of the window and was flagged)."""
    bytes_bound = PhaseProbe("write", "local", design_bps=6e9, host_bps=1e9, fixed_s=0.1, node_bytes=600_000_000)
    assert bytes_bound.needs == pytest.approx(14)
    software_bound = PhaseProbe("write", "local", design_bps=6e9, host_bps=1e9, fixed_s=0.2, node_bytes=60_000_000)
    assert software_bound.needs == pytest.approx(52)
    assert 60_000_000 * software_bound.needs / 6e9 == pytest.approx(2 * (0.06 + 0.2))


def test_software_that_is_a_small_part_of_the_design_time_once_gets_room_once():
    """The embedded default's write on this 2-core machine: 113 MB for the node at 6.88 GB/s after
    43 ms of software (its 8 ranks' node span), against 6.52 GiB/s at scale 0.001. Counted once at
    full size the software is 0.3 % of the design's 16.1 s write, so the window leaves the host its
    bytes twice and the software once: D = 4.7 (x5). With no room for it, D = 2.1 (x2.5), and beside a
    second test the run's writes ran 48-73 % past their pace. The 70B design's 0.23 s of software
    against its 1.27 s write (18 %) still gets room twice."""
    gib = 2**30
    default = PhaseProbe("write", "local", design_bps=6.52 * gib, host_bps=6.88e9, fixed_s=0.0427,
                         node_bytes=112_900_000, scale=0.001)
    assert default.software_share == pytest.approx(0.0427 / (112.9e6 / 0.001 / (6.52 * gib)), rel=0.01)
    assert default.needs == pytest.approx(6.52 * gib * (2 * 112.9e6 / 6.88e9 + 0.0427) / 112.9e6, rel=1e-6)
    assert default.needs == pytest.approx(4.7, abs=0.05)
    llama70 = PhaseProbe("write", "local", design_bps=6e9 * 1.0, host_bps=1e9, fixed_s=0.23,
                         node_bytes=int(7.1 * gib * 0.005), scale=0.005)
    assert llama70.software_share > 0.05
    assert llama70.needs == pytest.approx(2 * 6e9 * (llama70.node_bytes / 1e9 + 0.23) / llama70.node_bytes)


class _NodeOfTwo:
    """A comm whose node 0 has this rank and ``other`` (and node 1 a third rank); counts its gathers."""
    node, nodes, gathers, local_world_size = 0, 1, 0, 2

    def __init__(self, other=(0, (0.7, 1010, T0), (0.2, 10, T0))):  # node, (seconds, bytes, start) whole, skeleton
        self.other = other

    def all_gather(self, mine):
        self.gathers += 1
        return [mine, self.other, (1, (9.0, 2, T0), (9.0, 1, T0))]

    def barrier(self):
        pass


def test_a_phase_probe_is_its_nodes_bytes_over_its_slowest_rank_after_one_gather():
    """Ranks that start together: the node's seconds are its slowest rank's."""
    cfg = load_config(None, [])
    comm = _NodeOfTwo()
    probe = Probe(run_design(cfg), cfg.run.scale, comm, state=None, tiers={}, loop=None)
    probe._add("write", "local", 6e9, full=(0.35, 2010, T0), skeleton=(0.1, 10, T0))  # 0.25 s for 2000 bytes
    (phase,) = probe.phases
    assert comm.gathers == 1
    assert phase.host_bps == pytest.approx((2000 + 1000) / 0.5)  # node 1's rank is not this node's
    assert (phase.fixed_s, phase.node_bytes, phase.scale) == (pytest.approx(0.2), 2010 + 1010, cfg.run.scale)


def test_a_phase_probe_times_its_node_from_its_first_start_to_its_last_end():
    """8 ranks of the 405B design on the 2 cores took turns: each rank's own write was short, and the
    probe said the node wrote 3.75 GB/s, while its real writes ran at 1.07 GB/s. At the D = 5 it
    chose, every run flagged its local write (28-81 % past its paced time). Here two ranks of a node
    write one after the other, 0.35 s each: the node's bytes took 0.7 s, not 0.35."""
    cfg = load_config(None, [])
    comm = _NodeOfTwo(other=(0, (0.35, 2010, T0 + 0.35), (0.1, 10, T0 + 0.1)))
    probe = Probe(run_design(cfg), cfg.run.scale, comm, state=None, tiers={}, loop=None)
    probe._add("write", "local", 6e9, full=(0.35, 2010, T0), skeleton=(0.1, 10, T0))
    (phase,) = probe.phases
    assert phase.fixed_s == pytest.approx(0.2)  # the skeletons too: 0.1 s each, one after the other
    assert phase.host_bps == pytest.approx(4000 / (0.7 - 0.2))


def test_the_peer_sends_are_probed_whole_then_skeleton_against_the_nodes_nic():
    """A memory tier's peer copies leave through the node's NIC (400 Gb/s in the embedded default):
    the probe sends every rank's whole file, then its skeleton, to its holders, unpaced, and the
    node's sent bytes are set against the NIC's rate."""
    cfg = load_config(None, [])
    now = time.time()
    comm = _NodeOfTwo(other=(0, (0.7, 1010, now), (0.2, 10, now)))
    sent = []

    def send_replicas(layout, files, source, store):
        assert (layout, source, store) == ("layout", "memory tier", "held copies")
        sent.append(files[0].key)
        return SimpleNamespace(sent_bytes=files[0].size)
    peer = SimpleNamespace(layout="layout", store="held copies", transport=SimpleNamespace(send_replicas=send_replicas))
    probe = Probe(run_design(cfg), cfg.run.scale, comm, state=None, tiers={"memory": "memory tier"}, loop=None, peer=peer)
    probe._replicate((FileEntry("skeleton", 0, 10, 0), FileEntry("whole", 0, 2010, 0)))
    (phase,) = probe.phases
    assert sent == ["whole", "skeleton"] and comm.gathers == 1
    assert (phase.phase, phase.tier, phase.design_bps, phase.node_bytes) == ("replicate", "peer", 400e9 / 8, 2010 + 1010)


def test_a_devices_snapshot_is_probed_as_the_nodes_copy_rate():
    """The snapshot has no software part to set apart (one copy): its probe is the node's bytes over
    its slowest rank, against the design's rate per accelerator times the node's ranks."""
    cfg = load_config(None, ["design.node.snapshot={rate: 48GiB/s}"])
    n = 2 << 20
    comm = _NodeOfTwo(other=(0, (10.0, n, time.time()), (0.0, 0, 0.0)))  # the other rank copied its 2 MiB in 10 s

    class State:
        nbytes, snapshot_copies = n, True
    probe = Probe(run_design(cfg), cfg.run.scale, comm, state=State(), tiers={}, loop=None)
    probe._snapshot()
    (phase,) = probe.phases
    assert (phase.phase, phase.design_bps, phase.fixed_s, phase.node_bytes) == ("snapshot", 2 * 48 * 2**30, 0.0, 2 * n)
    assert comm.gathers == 1 and phase.host_bps == pytest.approx(2 * n / 10.0)


def test_a_cpu_states_snapshot_is_probed_as_software_alone():
    """A CPU state's paced snapshot swaps buffers: the host moves none of its bytes (no rate), and the
    swap there and back, with a paced sleep's late wake-up, is its software, once per checkpoint."""
    cfg = load_config(None)  # the default snapshot rate: paced
    n, swaps = 2 << 20, []

    class Comm:  # this rank, one other of its node that took 5 s, and a rank of node 1 that took 9 s
        node, gathers = 0, 0

        def all_gather(self, mine):
            self.gathers += 1
            return [mine, (0, 5.0, n), (1, 9.0, n)]

        def barrier(self):
            pass
    comm = Comm()
    state = SimpleNamespace(nbytes=n, snapshot_copies=False, snapshot=lambda paced: swaps.append(paced))
    probe = Probe(run_design(cfg), cfg.run.scale, comm, state=state, tiers={}, loop=None)
    probe._snapshot()
    (phase,) = probe.phases
    assert swaps == [True, True] and comm.gathers == 1  # swapped there and back: the state as it was
    # each accelerator's own: the slowest rank of the node, its bytes at the rate per accelerator
    assert (phase.phase, phase.node_bytes, phase.host_bps, phase.fixed_s) == ("snapshot", n, math.inf, 5.0)
    assert phase.design_bps == 48 * 2**30 and describe([phase], 8)["phases"][0]["host_bytes_per_s"] is None
    # its 5 s of software are a cost per checkpoint counted once at full size whatever the factor: it
    # sets no dilation (room for a 1 ms swap made a 2-rank test run x8, its whole run 8 times longer)
    assert phase.needs == 1.0 and choose([phase], SimpleNamespace(all_max=lambda v: v)) == (1.0, phase)


def test_paced_spans_are_counted_once_where_they_overlap():
    spans.clear()
    t = time.time()
    spans.record("drain", t, t + 2)
    spans.record("drain", t + 1, t + 3)      # concurrent copies: their union
    spans.record("local_write", t, t + 10)   # another phase
    assert spans.seconds("drain", t, t + 10) == pytest.approx(3)
    assert spans.seconds("drain", t + 2.5, t + 10) == pytest.approx(0.5)
    assert spans.seconds(("drain", "local_write"), t, t + 4) == pytest.approx(4)
    spans.clear()


def test_a_phase_at_full_size_is_its_paced_part_over_the_factor_plus_the_host_part_once():
    assert full(1.0, 0.9, 0.01) == pytest.approx(90 + 0.1)
    assert full(1.0, 2.0, 0.01) == pytest.approx(100)   # never more paced than the phase
    assert full(1.0, 0.0, 0.01) == pytest.approx(100)   # nothing paced: the host's throughput, all scaled
    assert full(1.0, None, 0.01) == pytest.approx(100)


def test_a_phase_nothing_paced_is_this_hosts_rate_at_full_bytes_whatever_the_dilation():
    """At scale 0.01 and D 4 (k 0.04) an unpaced second is the host moving 1 % of the bytes: 100 s at
    full size, not 25 (the dilation slows what is paced, never the host)."""
    assert full(1.0, None, 0.04, bytes_factor=0.01) == pytest.approx(100)
    assert full(1.0, 0.0, 0.04, bytes_factor=0.01) == pytest.approx(100)
    assert full(1.0, 0.8, 0.04, bytes_factor=0.01) == pytest.approx(0.8 / 0.04 + 0.2)
    rec = {"mode": "sync", "snapshot_s": 0.1, "local_write_s": 1.0, "drain_s": 0.0, "wait_s": 0.0,
           "stall_s": 1.1, "lag_s": 0.0, "complete_s": 0.0, "paced": {}, "due": ["local"]}
    assert full_record(rec, 0.04, bytes_factor=0.01)["local_write_s"] == pytest.approx(100)


def _sync_record(**over) -> dict:
    rec = {"mode": "sync", "due": ["local", "global"], "stall_s": 1.0, "wait_s": 0.0, "snapshot_s": 0.1,
           "local_write_s": 0.3, "drain_s": 0.5, "lag_s": 0.95, "complete_s": 1.0, "queue_s": 0.0, "d2h_s": 0.0,
           "paced": {"snapshot": 0.1, "local_write": 0.3, "drain": 0.5},
           "tiers": {"local": {"seconds": 0.3, "paced": 0.3, "lag_s": 0.4},
                     "global": {"seconds": 0.5, "paced": 0.5, "lag_s": 0.95}}}
    return {**rec, **over}


def test_a_sync_stall_is_its_phases_at_full_size_plus_the_coordination_once():
    k = 0.01
    rec = full_record(_sync_record(), k)
    assert rec["snapshot_s"] == pytest.approx(10) and rec["local_write_s"] == pytest.approx(30)
    assert rec["drain_s"] == pytest.approx(50)
    coordination = 1.0 - 0.1 - 0.3 - 0.5
    assert rec["stall_s"] == pytest.approx(10 + 30 + 50 + coordination)
    assert rec["lag_s"] == pytest.approx(0.95 - 0.9 + 90)
    assert tier_lag(_sync_record(), "local", k) == pytest.approx(0.4 - 0.4 + 40)


def test_an_async_stall_is_its_snapshot_and_its_wait_for_a_late_previous_checkpoint():
    k = 0.01
    late = full_record(_sync_record(mode="async", stall_s=0.15, wait_s=0.04, missed=True), k)
    assert late["stall_s"] == pytest.approx(0.15 - (0.04 - 4) - (0.1 - 10))
    on_time = full_record(_sync_record(mode="async", stall_s=0.15, wait_s=0.04, missed=False), k)
    assert on_time["stall_s"] == pytest.approx(0.15 - (0.1 - 10))  # the host's bookkeeping, once


def test_host_shares_are_the_hosts_part_of_each_full_size_figure():
    recs = [_sync_record(paced={"snapshot": 0.05, "local_write": 0.3, "drain": 0.0})]
    shares = host_shares(recs, 0.01)
    assert shares["snapshot"] == pytest.approx(0.05 / (5 + 0.05))  # 50 ms of the host on 5 s of design
    assert shares["local_write"] == pytest.approx(0.0)
    assert shares["drain"] == pytest.approx(1.0)  # the host overran the whole paced time


def test_a_span_the_host_overran_ends_when_its_bytes_were_due():
    """The host's real I/O took longer than the paced time: only the paced part is the design's."""
    spans.clear()
    t = time.time()
    spans.record_due("local_write", t - 1.0, -0.6)  # began a second ago, was due 0.6 s ago
    assert spans.seconds("local_write", t - 1.0, t) == pytest.approx(0.4, abs=0.01)
    spans.clear()


def test_a_phases_bytes_are_booked_back_to_back_from_its_anchor():
    """Two writes of one phase with a pause between them (the host's scheduling): inside an anchored
    block the device stays busy with the phase's bytes, so they are due 2 x 0.1 s after the anchor,
    not 0.1 s after the second write began; outside one, the pause is lost to the device."""
    import asyncio

    from tiers.emulated import EmulatedTier, anchored_at
    from tiers.memory import MemoryTier

    def booked_end(anchored: bool) -> float:
        tier = EmulatedTier(MemoryTier(), write_bps=10e6, shared_by="rank")
        bucket = tier._writes.bucket()
        anchor = time.time()
        with anchored_at(anchor) if anchored else contextlib.nullcontext():
            asyncio.run(tier.put("a", b"x" * 1_000_000))
            time.sleep(0.3)
            asyncio.run(tier.put("b", b"x" * 1_000_000))
        return bucket._tat - (bucket.clock() - (time.time() - anchor))  # seconds after the anchor

    assert booked_end(anchored=True) == pytest.approx(0.2, abs=0.02)
    assert booked_end(anchored=False) >= 0.4  # the pause came before the second write's 0.1 s


def test_a_write_the_host_committed_late_is_paced_only_until_its_bytes_were_due():
    """The bytes of 1 MB at 100 MB/s are due in 10 ms; the host's commit took 0.3 s more: the
    paced (design) part of the write is the 10 ms, the rest is the host's."""
    from tiers.base import Sink
    from tiers.emulated import EmulatedTier, anchored_at, counted_as
    from tiers.memory import MemoryTier

    class SlowCommit(MemoryTier):
        def open_write(self, key):
            sink = super().open_write(key)
            commit = sink.commit

            def slow():
                time.sleep(0.3)
                commit()
            sink.commit = slow
            return sink

    tier = EmulatedTier(SlowCommit(), write_bps=100e6, shared_by="rank")
    spans.clear()
    t0 = time.time()
    with counted_as("local_write"), anchored_at(t0):
        with tier.open_write("k") as sink:
            sink.write(b"x" * 1_000_000)
    t1 = time.time()
    assert t1 - t0 >= 0.3
    assert spans.seconds("local_write", t0, t1) == pytest.approx(0.01, abs=0.005)
    spans.clear()
    assert isinstance(sink, Sink)
