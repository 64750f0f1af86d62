"""The simulator's parts against hand-computed answers: fair sharing, node groups, the async
pipeline, lost work per restore tier, accounting, traces, sizing.

Fast (no emulation runs); tests/unit/simulation/test_simulate.py checks the whole against real runs,
the closed forms and Llama 3's field data.
"""
import math

import pytest
import simpy
from simdesign import LinkLimits, NodeGroup, design

from emulator.config import ParallelismConfig, load_config
from emulator.design import resolve
from emulator.errors import UserError
from emulator.simulation.arrivals import Arrivals, Failure, read_trace
from emulator.simulation.link import SharedLink
from emulator.simulation.model import RunSpec, simulate
from emulator.simulation.sweep import fit_optimum, parse_spec
from emulator.sizing import checkpoint_size


def _finish_times(env, events):
    done = {}
    for name, ev in events.items():
        ev.callbacks.append(lambda _e, name=name: done.setdefault(name, env.now))
    env.run()
    return done


# --------------------------------------------------------------------------- link and sharing

def test_link_shares_the_aggregate_fairly_and_caps_each_node():
    env = simpy.Environment()
    link = SharedLink(env, LinkLimits(aggregate_bps=40, node_bps=20))
    # 4 nodes share 40 B/s: 10 each; the 3-node group's 50 B end at 5 s; the last node then
    # runs alone at its cap of 20 B/s: 50 B left take 2.5 s more
    done = _finish_times(env, {"one": link.transfer(1, 100), "three": link.transfer(3, 50)})
    assert done == pytest.approx({"three": 5.0, "one": 7.5})
    assert link.peak_bps == pytest.approx(40)


def test_link_joins_and_cancels_mid_transfer():
    env = simpy.Environment()
    link = SharedLink(env, LinkLimits(aggregate_bps=10))
    first = link.transfer(1, 100)
    late = {}

    def join():
        yield env.timeout(4)  # 40 B done at 10 B/s, then two nodes at 5 B/s each
        late["ev"] = link.transfer(1, 10)
    env.process(join())
    done = _finish_times(env, {"first": first})
    assert done["first"] == pytest.approx(4 + 10 / 5 + 50 / 10)  # 10 B shared, then 50 B alone
    env2 = simpy.Environment()
    link2 = SharedLink(env2, LinkLimits(aggregate_bps=10))
    ev = link2.transfer(1, 100)
    env2.run(until=3)
    link2.cancel_all()
    env2.run()
    assert not ev.triggered  # a failure abandoned it


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
    trace = [Failure(50.0, "process"), Failure(130.0, "node"), Failure(131.0, "process")]
    for mode in ("sync", "async"):
        outs = []
        for gs in (groups, one_by_one):
            d = design(gs, **kw, restores={"process": 0.5, "node": 1.0, "group": 1.0}, restart_s=5.0)
            outs.append(simulate(d, RunSpec(mode, 4.0, horizon_s=300.0), Arrivals(d.failures, trace=trace)))
        a, b = outs
        for k in ("goodput", "stall_mean_s", "drain_mean_s", "local_write_mean_s", "drain_overlap",
                  "deadline_misses", "lost_work_s", "complete"):
            assert getattr(a, k) == pytest.approx(getattr(b, k)), (mode, k)


def _one_failure(kind: str, at: float):
    """Checkpoints every 10 s of training; local write 1 s, drain 2 s; restart 5 s, no restore cost."""
    d = design([NodeGroup(1, 10, 10, 1)], local_bps=10.0, drain=LinkLimits(node_bps=5.0), restart_s=5.0)
    return simulate(d, RunSpec("async", 10.0, horizon_s=40.0), Arrivals(d.failures, trace=[Failure(at, kind)]))


def test_lost_work_reaches_back_to_the_checkpoint_on_the_restoring_tier():
    # checkpoint 2 (at 20 s of training) is complete locally at 21 s, globally at 23 s
    crash = _one_failure("process", 21.5)  # restores checkpoint 2 from local: 1.5 s lost
    assert crash.lost_work_s == pytest.approx(1.5) and crash.restores == {"local": 1}
    assert crash.classes["process"]["lost_work_s"] == pytest.approx(1.5)
    node = _one_failure("node", 22.5)  # the node's local copy is gone; global has only checkpoint 1
    assert node.lost_work_s == pytest.approx(12.5) and node.restores == {"global": 1}
    early = _one_failure("process", 20.5)  # checkpoint 2 is not complete anywhere yet
    assert early.lost_work_s == pytest.approx(10.5)
    group = _one_failure("group", 22.5)  # only global survives a lost group
    assert group.lost_work_s == pytest.approx(12.5) and group.restores == {"global": 1}


def test_every_second_is_useful_stall_or_failure():
    d = design([NodeGroup(4, 40, 10, 4)], local_bps=20.0, drain=LinkLimits(aggregate_bps=30.0, node_bps=10.0),
               snapshot_s=0.05, restores={"process": 2.0, "node": 4.0, "group": 4.0}, restart_s=30.0,
               mttf_hours=10.0 * 16 / 1000, node_share=0.5, retention_request_s=0.3 / 20)
    for mode in ("sync", "async"):
        o = simulate(d, RunSpec(mode, 7.0, horizon_s=20000.0), Arrivals(d.failures, seed=3))
        assert sum(o.failures.values()) > 100 and o.failures["process"] and o.failures["node"]
        assert sum(c["recovery_s"] for c in o.classes.values()) == pytest.approx(o.restart_s + o.recovery_s)
        assert sum(c["lost_work_s"] for c in o.classes.values()) == pytest.approx(o.lost_work_s)
        assert o.goodput + o.checkpoint_overhead + o.failure_overhead == pytest.approx(1.0, abs=1e-9)
        assert o.useful_s + o.lost_work_s + o.stall_s + o.restart_s + o.recovery_s == pytest.approx(o.wall_s)


# --------------------------------------------------------------------------- layout, traces, sweep

def test_full_size_nodes_hold_the_whole_checkpoint():
    cfg = load_config("llama3-405b")
    groups = resolve(cfg, nodes=2048, accelerators_per_node=8).job.groups
    par = ParallelismConfig(tp=8, pp=32, dp=64, zero_stage=1)
    assert sum(g.nodes for g in groups) == 2048 and len(groups) <= 8
    assert sum(g.nodes * g.node_bytes for g in groups) == checkpoint_size(cfg.model, par).total_bytes
    with pytest.raises(UserError, match="multiple of"):
        resolve(cfg, nodes=100, accelerators_per_node=8)


def test_trace_rows(tmp_path):
    good = tmp_path / "good.csv"
    good.write_text("# Llama-style trace\ntime,kind\n90s,restart\n1.5h,node\n\n2d4h\n7200.5,process\n")
    with pytest.raises(UserError, match="line 7"):  # 7200.5 s is before 2d4h
        read_trace(str(good))
    good.write_text("time,kind\n90s,restart\n1.5h,node\n2d4h\n3d,group\n")
    assert read_trace(str(good)) == [Failure(90, "process"), Failure(5400, "node"), Failure(187200, None),
                                     Failure(259200, "group")]
    for text, msg in (("1h,meteor\n", "unknown kind"), ("soon\n", "not a time"), ("-5\n", ">= 0"),
                      ("1h,node,extra\n", "columns")):
        bad = tmp_path / "bad.csv"
        bad.write_text(text)
        with pytest.raises(UserError, match=msg):
            read_trace(str(bad))


def test_sweep_spec_and_fitted_optimum():
    spec = parse_spec(["interval=5m,10m", "20m,global_bandwidth=100GB/s..400GB/s:3", "local_every=4,1"])
    assert spec["interval"] == [300, 600, 1200]
    assert spec["global_bandwidth"] == pytest.approx([100e9, 200e9, 400e9])
    assert spec["local_every"] == [1, 4]
    xs = [100 * 1.3 ** i for i in range(7)]
    ys = [-(math.log(x) - math.log(237.0)) ** 2 for x in xs]
    assert fit_optimum(xs, ys) == pytest.approx(237.0)
    assert fit_optimum(xs, sorted(ys)) is None  # the best point at an edge: no optimum inside
    for bad, message in ((["interval=0"], "must be > 0"), (["speed=3"], "unknown key"), (["5m"], "has no key"),
                         (["global_bandwidth=-1GB/s"], "finite rate > 0"), (["interval=5m..1m:3"], "LO < HI"),
                         (["global_bandwidth=400"], "not a rate with a unit"), (["global_gib_s=400"], "now global_bandwidth"),
                         (["local_every=1.5"], "whole number")):
        with pytest.raises(UserError, match=message):
            parse_spec(bad)
