"""The simulator's parts against hand-computed answers: fair sharing, shared_by both ways,
node groups, the async pipeline, lost work per restore tier, accounting, traces, sizing.

Fast (no emulation runs); tests/test_simulate.py checks the whole against real runs,
the closed forms and Llama 3's field data.
"""
import math

import pytest
import simpy

from emulator.config import ParallelismConfig, load_config
from emulator.errors import UserError
from emulator.simulation.arrivals import NODE, RESTART, Arrivals, Failure, read_trace
from emulator.simulation.design import Design, NodeGroup, full_size_groups
from emulator.simulation.link import SharedLink
from emulator.simulation.model import RunSpec, simulate
from emulator.simulation.sharing import SHARINGS, LinkLimits, bytes_sharing, limits, node_load, rate_from
from emulator.simulation.sweep import fit_optimum, parse_spec
from emulator.sizing import checkpoint_size


def design(groups, *, local_bps=None, drain=LinkLimits(node_bps=1.0), snapshot_s=0.0, **kw) -> Design:
    """A design with explicit costs: bytes are chosen so that rates read as seconds."""
    groups = tuple(groups)
    largest = max(g.file_bytes for g in groups)
    local = local_bps is not None
    base = dict(
        groups=groups, ranks_per_node=max(g.files for g in groups), local=local,
        snapshot_bps=largest / snapshot_s if snapshot_s else 1e30,
        local_write=LinkLimits(node_bps=local_bps) if local else None, global_write=drain, drain=drain,
        local_latency_s=0.0, global_latency_s=0.0, drain_waves=1, recovery_global=tuple(0.0 for _ in groups),
        write_loads={"local": [g.node_bytes for g in groups], "global": [g.node_bytes for g in groups]})
    base.update(kw)
    return Design(**base)


def _finish_times(env, events):
    done = {}
    for name, ev in events.items():
        ev.callbacks.append(lambda _e, name=name: done.setdefault(name, env.now))
    env.run()
    return done


# --------------------------------------------------------------------------- link and sharing

def test_link_shares_the_aggregate_fairly_and_caps_each_node():
    env = simpy.Environment()
    link = SharedLink(env, aggregate_bps=40, node_bps=20)
    # 4 nodes share 40 B/s: 10 each; the 3-node group's 50 B end at 5 s; the last node then
    # runs alone at its cap of 20 B/s: 50 B left take 2.5 s more
    done = _finish_times(env, {"one": link.transfer(1, 100), "three": link.transfer(3, 50)})
    assert done == pytest.approx({"three": 5.0, "one": 7.5})
    assert link.peak_bps == pytest.approx(40)


def test_link_joins_and_cancels_mid_transfer():
    env = simpy.Environment()
    link = SharedLink(env, aggregate_bps=10)
    first = link.transfer(1, 100)
    late = {}

    def join():
        yield env.timeout(4)  # 40 B done at 10 B/s, then two nodes at 5 B/s each
        late["ev"] = link.transfer(1, 10)
    env.process(join())
    done = _finish_times(env, {"first": first})
    assert done["first"] == pytest.approx(4 + 10 / 5 + 50 / 10)  # 10 B shared, then 50 B alone
    env2 = simpy.Environment()
    link2 = SharedLink(env2, aggregate_bps=10)
    ev = link2.transfer(1, 100)
    env2.run(until=3)
    link2.cancel_all()
    env2.run()
    assert not ev.triggered  # a failure abandoned it


@pytest.mark.parametrize("shared_by", SHARINGS)
@pytest.mark.parametrize("kind", ["write", "read", "drain"])
def test_calibration_inverts_the_sharing_model(shared_by, kind):
    """A measured duration turned into a rate (calibration) gives back the rate that produced it."""
    rate, files, conc, nodes = 3e8, 4, 2, 3
    file_b, node_b = 5e8, 4 * 5e8
    lim = limits(shared_by, rate, kind=kind, files=files, concurrency=conc)
    load = node_load(shared_by, kind=kind, file_bytes=file_b, node_bytes=node_b, files=files)
    seconds = load / lim.node_rate(nodes)
    shared = bytes_sharing(shared_by, kind=kind, file_bytes=file_b, node_bytes=node_b, job_bytes=nodes * node_b,
                           files=files, concurrency=conc)
    assert rate_from(seconds, shared) == pytest.approx(rate)


def test_sharing_mirrors_the_emulated_tier():
    """tiers/emulated.py: none/rank give every stream the rate, node one rate per node, job one in all;
    a drain is the node leader's put_file calls, drain.concurrency at a time."""
    assert limits("none", 1.0, kind="write", files=8) == LinkLimits(node_bps=8.0)
    assert limits("rank", 1.0, kind="write", files=8) == LinkLimits(node_bps=8.0)
    assert limits("node", 1.0, kind="write", files=8) == LinkLimits(node_bps=1.0)
    assert limits("job", 1.0, kind="write", files=8) == LinkLimits(aggregate_bps=1.0)
    assert limits("none", 1.0, kind="drain", files=8, concurrency=4) == LinkLimits(node_bps=4.0)
    assert limits("rank", 1.0, kind="drain", files=8, concurrency=4) == LinkLimits(node_bps=1.0)


# --------------------------------------------------------------------------- the pipeline

def test_async_waits_for_the_previous_checkpoint_and_counts_misses():
    """Local write 1 s, drain 3 s, snapshot 0.1 s, 2 s of training between checkpoints: each
    checkpoint after the first waits 2 s for its predecessor (staging reuse), a deadline miss."""
    d = design([NodeGroup(1, 10, 10, 1)], local_bps=10.0, drain=LinkLimits(node_bps=10 / 3), snapshot_s=0.1)
    a = simulate(d, RunSpec("async", 2.0, saves=4))
    assert a.deadline_misses == 3
    assert a.stall_mean_s == pytest.approx((0.1 + 3 * 2.1) / 4)
    assert a.local_write_mean_s == pytest.approx(1.0) and a.drain_mean_s == pytest.approx(3.0)
    assert a.wall_s == pytest.approx(18.4)  # the last pipeline ends 4.1 s after the 4th checkpoint began
    assert a.drain_overlap == pytest.approx(12 / 18.4)
    s = simulate(d, RunSpec("sync", 2.0, saves=4))
    assert s.deadline_misses == 0 and s.stall_mean_s == pytest.approx(4.1)
    assert s.overhead_ratio == pytest.approx(4.1 / 6.1) and s.drain_overlap == pytest.approx(12 / 24.4)


def test_nodes_in_a_group_behave_like_nodes_simulated_one_by_one():
    groups = [NodeGroup(3, 30, 10, 3), NodeGroup(1, 90, 30, 3)]
    one_by_one = [NodeGroup(1, g.node_bytes, g.file_bytes, g.files) for g in groups for _ in range(g.nodes)]
    kw = dict(local_bps=30.0, drain=LinkLimits(aggregate_bps=40.0, node_bps=25.0), snapshot_s=0.2)
    trace = [Failure(50.0, RESTART), Failure(130.0, NODE), Failure(131.0, RESTART)]
    for mode in ("sync", "async"):
        outs = []
        for gs in (groups, one_by_one):
            d = design(gs, **kw, recovery_local_s=0.5, recovery_global=tuple(1.0 for _ in gs))
            arr = Arrivals(accelerators=1, mttf_hours=None, trace=trace, node_loss_fraction=0, seed=0)
            outs.append(simulate(d, RunSpec(mode, 4.0, horizon_s=300.0, restart_s=5.0), arr))
        a, b = outs
        for k in ("goodput", "stall_mean_s", "drain_mean_s", "local_write_mean_s", "drain_overlap",
                  "deadline_misses", "lost_work_s", "complete"):
            assert getattr(a, k) == pytest.approx(getattr(b, k)), (mode, k)


def _one_failure(kind: str, at: float):
    """Checkpoints every 10 s of training; local write 1 s, drain 2 s; restart 5 s, no restore cost."""
    d = design([NodeGroup(1, 10, 10, 1)], local_bps=10.0, drain=LinkLimits(node_bps=5.0))
    arr = Arrivals(accelerators=1, mttf_hours=None, trace=[Failure(at, kind)], node_loss_fraction=0, seed=0)
    return simulate(d, RunSpec("async", 10.0, horizon_s=40.0, restart_s=5.0), arr)


def test_lost_work_reaches_back_to_the_checkpoint_on_the_restoring_tier():
    # checkpoint 2 (at 20 s of training) is complete locally at 21 s, globally at 23 s
    restart = _one_failure(RESTART, 21.5)  # restores checkpoint 2 from local: 1.5 s lost
    assert restart.lost_work_s == pytest.approx(1.5) and restart.restores == {"local": 1}
    node = _one_failure(NODE, 22.5)  # the node's local copy is gone; global has only checkpoint 1
    assert node.lost_work_s == pytest.approx(12.5) and node.restores == {"global": 1}
    early = _one_failure(RESTART, 20.5)  # checkpoint 2 is not complete anywhere yet
    assert early.lost_work_s == pytest.approx(10.5)


def test_every_second_is_useful_stall_or_failure():
    d = design([NodeGroup(4, 40, 10, 4)], local_bps=20.0, drain=LinkLimits(aggregate_bps=30.0, node_bps=10.0),
               snapshot_s=0.05, recovery_local_s=2.0, recovery_global=(4.0,), housekeeping_s=0.3)
    for mode in ("sync", "async"):
        arr = Arrivals(accelerators=1000, mttf_hours=10.0, trace=None, node_loss_fraction=0.5, seed=3)
        o = simulate(d, RunSpec(mode, 7.0, horizon_s=20000.0, restart_s=30.0), arr)
        assert sum(o.failures.values()) > 100
        assert o.goodput + o.checkpoint_overhead + o.failure_overhead == pytest.approx(1.0, abs=1e-9)
        assert o.useful_s + o.lost_work_s + o.stall_s + o.restart_s + o.recovery_s == pytest.approx(o.wall_s)


# --------------------------------------------------------------------------- layout, traces, sweep

def test_full_size_nodes_hold_the_whole_checkpoint():
    cfg = load_config("llama3-405b")
    groups = full_size_groups(cfg, 2048, 8)
    par = ParallelismConfig(tp=8, pp=32, dp=64, zero_stage=1)
    assert sum(g.nodes for g in groups) == 2048 and len(groups) <= 8
    assert sum(g.nodes * g.node_bytes for g in groups) == checkpoint_size(cfg.model, par).total_bytes
    with pytest.raises(UserError, match="multiple of"):
        full_size_groups(cfg, 100, 8)


def test_trace_rows(tmp_path):
    good = tmp_path / "good.csv"
    good.write_text("# Llama-style trace\ntime,kind\n90s,restart\n1.5h,node\n\n2d4h\n7200.5,process\n")
    with pytest.raises(UserError, match="line 7"):  # 7200.5 s is before 2d4h
        read_trace(str(good))
    good.write_text("time,kind\n90s,restart\n1.5h,node\n2d4h\n")
    assert read_trace(str(good)) == [Failure(90, RESTART), Failure(5400, NODE), Failure(187200, None)]
    for text, msg in (("1h,meteor\n", "unknown kind"), ("soon\n", "not a time"), ("-5\n", ">= 0"),
                      ("1h,node,extra\n", "columns")):
        bad = tmp_path / "bad.csv"
        bad.write_text(text)
        with pytest.raises(UserError, match=msg):
            read_trace(str(bad))


def test_sweep_spec_and_fitted_optimum():
    spec = parse_spec(["interval=5m,10m", "20m,global_gib_s=100..400:3"])
    assert spec["interval"] == [300, 600, 1200]
    assert spec["global_gib_s"] == pytest.approx([100, 200, 400])
    xs = [100 * 1.3 ** i for i in range(7)]
    ys = [-(math.log(x) - math.log(237.0)) ** 2 for x in xs]
    assert fit_optimum(xs, ys) == pytest.approx(237.0)
    assert fit_optimum(xs, sorted(ys)) is None  # the best point at an edge: no optimum inside
    for bad in (["interval=0"], ["speed=3"], ["5m"], ["global_gib_s=-1"], ["interval=5m..1m:3"]):
        with pytest.raises(UserError):
            parse_spec(bad)
