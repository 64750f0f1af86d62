"""A link's batches: loads started together are one event, done when the last of them is, and a
transfer joining or a cancel meets the batch's flows where the fair shares have brought them."""
import pytest
import simpy
from simdesign import LinkLimits

from emulator.simulation.link import SharedLink


def _when(env, ev, out, name):
    ev.callbacks.append(lambda _e: out.setdefault(name, env.now))


def test_a_batch_is_done_when_its_last_load_is():
    env = simpy.Environment()
    link = SharedLink(env, LinkLimits(aggregate_bps=40, node_bps=20))
    done = {}
    # 4 nodes at 10 B/s: the 3 nodes' 50 B end at 5 s, the last node's 50 B left at its cap: 7.5 s
    _when(env, link.transfer_all([(1, 100), (3, 50)]), done, "batch")
    env.run()
    assert done == {"batch": pytest.approx(7.5)} and link.peak_bps == pytest.approx(40)


def test_a_transfer_joining_after_a_step_of_a_batch():
    """10 B/s shared: 20 B and 100 B at 5 B/s each until 4 s, then 100 - 20 B alone at 10 B/s; at 6 s
    (60 B left) 10 B join: both at 5 B/s until 8 s, then the 50 B left alone until 13 s."""
    env = simpy.Environment()
    link = SharedLink(env, LinkLimits(aggregate_bps=10))
    done = {}
    _when(env, link.transfer_all([(1, 20), (1, 100)]), done, "batch")

    def join():
        yield env.timeout(6)
        _when(env, link.transfer(1, 10), done, "late")
    env.process(join())
    env.run()
    assert done == {"late": pytest.approx(8.0), "batch": pytest.approx(13.0)}


def test_a_cancelled_batch_never_fires_and_the_link_is_free_again():
    env = simpy.Environment()
    link = SharedLink(env, LinkLimits(aggregate_bps=10))
    first = link.transfer_all([(1, 20), (1, 100)])
    env.run(until=5)
    link.cancel_all()
    done = {}
    _when(env, link.transfer(1, 10), done, "next")
    env.run()
    assert not first.triggered and done == {"next": pytest.approx(6.0)}


@pytest.mark.parametrize("start, peak", [(2.0, 15.0), (1.0, 25.0)])
def test_capped_transfers_count_in_the_peak_only_while_in_flight(start, peak):
    """Each node at its 5 B/s cap: 2 nodes for 2 s, then 3 nodes from ``start``."""
    env = simpy.Environment()
    link = SharedLink(env, LinkLimits(node_bps=5))
    first = link.transfer_all([(2, 10)])

    def later():
        yield env.timeout(start)
        yield link.transfer(3, 10)
    env.process(later())
    env.run()
    assert first.triggered and link.peak_bps == pytest.approx(peak)


def test_an_exclusive_links_batches_each_take_the_batchs_fair_time():
    """An exclusive link (one batch at a time) steps a batch once and reuses its seconds: the same
    loads again, later, take the same 7.5 s; other loads their own (3 nodes' 50 B at 40/3 B/s each)."""
    env = simpy.Environment()
    link = SharedLink(env, LinkLimits(aggregate_bps=40, node_bps=20), exclusive=True)
    done = {}

    def batches():
        for name, loads in (("first", [(1, 100), (3, 50)]), ("again", [(1, 100), (3, 50)]), ("other", [(3, 50)])):
            start = env.now
            yield link.transfer_all(loads)
            done[name] = env.now - start
    env.process(batches())
    env.run()
    assert done == {"first": pytest.approx(7.5), "again": pytest.approx(7.5), "other": pytest.approx(3.75)}
