"""The peer tier (emulator/checkpoint/peer.py): where copies go, and real bytes over gloo.

Placement is checked against hand-worked tables; the transport in a real job of
2 "nodes" x 2 ranks (spawned processes, gloo on a file rendezvous): copies sent,
a lost node's files fetched back from its holder, a chunk corrupted in flight refused.
"""

import pytest

from emulator.checkpoint.placement import PeerLayout, holders, sources
from emulator.errors import ConfigError


# --------------------------------------------------------------------------- placement

@pytest.mark.parametrize("nodes, replicas, jump, expected", [
    (4, 1, 1, {0: [1], 1: [2], 2: [3], 3: [0]}),
    (4, 2, 1, {0: [1, 2], 1: [2, 3], 2: [3, 0], 3: [0, 1]}),
    (4, 1, 2, {0: [2], 1: [3], 2: [0], 3: [1]}),
    (8, 2, 3, {0: [3, 6], 5: [0, 3], 7: [2, 5]}),
    (8, 1, 4, {0: [4], 3: [7], 6: [2]}),
])
def test_jump_holders_by_hand(nodes, replicas, jump, expected):
    for node, want in expected.items():
        assert holders(node, nodes, replicas, "jump", jump) == want


def test_jump_sources_are_the_inverse_of_holders():
    assert sources(0, 4, 2, "jump", 1) == [3, 2]
    assert sources(0, 8, 2, "jump", 3) == [5, 2]
    for nodes, replicas, jump in [(4, 1, 1), (4, 2, 1), (8, 2, 3), (8, 3, 1)]:
        layout = PeerLayout(nodes, replicas, "jump", jump)
        for n in range(nodes):
            assert sorted(layout.sources(n)) == sorted(s for s in range(nodes) if n in layout.holders(s))


@pytest.mark.parametrize("nodes, replicas, jump, cliques", [
    (4, 1, 1, [[0, 1], [2, 3]]),
    (4, 1, 2, [[0, 2], [1, 3]]),
    (8, 1, 4, [[0, 4], [1, 5], [2, 6], [3, 7]]),
    (8, 3, 1, [[0, 1, 2, 3], [4, 5, 6, 7]]),
    (6, 2, 2, [[0, 2, 4], [1, 3, 5]]),
])
def test_clique_members_hold_each_other_by_hand(nodes, replicas, jump, cliques):
    layout = PeerLayout(nodes, replicas, "clique", jump)
    for clique in cliques:
        for node in clique:
            others = [m for m in clique if m != node]
            assert layout.holders(node) == others and layout.sources(node) == others
            assert holders(node, nodes, replicas, "clique", jump) == others


@pytest.mark.parametrize("nodes, replicas, placement, jump, words", [
    (4, 4, "jump", 1, "replicas: 4 replica(s) need more than 4 nodes"),
    (2, 3, "clique", 1, "replicas: 3 replica(s)"),
    (8, 2, "clique", 1, "cliques of 3"),
    (8, 1, "clique", 3, "multiple of 6"),
    (4, 2, "jump", 2, "replica 2 of a node lands on the node itself"),
    (4, 1, "jump", 4, "replica 1 of a node lands"),
    (4, 1, "ring", 1, "placement: 'ring'"),
    (4, 0, "jump", 1, "replicas and jump must be >= 1"),
])
def test_impossible_layouts_are_one_line_config_errors(nodes, replicas, placement, jump, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")) as info:
        PeerLayout(nodes, replicas, placement, jump)
    assert "\n" not in str(info.value)


def test_fetch_back_server_is_the_first_surviving_holder():
    layout = PeerLayout(4, 2, "jump", 1)
    assert layout.server(0, [0]) == 1
    assert layout.server(0, [0, 1]) == 2
    assert layout.server(0, [0, 1, 2]) is None


# --------------------------------------------------------------------------- real bytes over gloo


# --------------------------------------------------------------------------- pacing a send

def test_a_paced_send_overlaps_the_nic_and_is_logged_as_the_phases_paced_time():
    """A 1 MiB chunk at 4 MiB/s whose real send takes 0.1 s: 0.25 s in all, not 0.35 (the send
    overlaps the NIC's time), and all of it paced time of the phase (it logged none: a run with peer
    copies said its replicate phase was 100 % this host's)."""
    import time

    from emulator.checkpoint.peer import paced_send
    from tiers import paced
    from tiers.emulated import counted_as
    from tiers.pacing import TokenBucket

    nic = TokenBucket(4 * 2**20)
    t0 = time.time()
    with counted_as("replicate"):
        paced_send(lambda: time.sleep(0.1), 2**20, nic)
    t1 = time.time()
    assert t1 - t0 >= 0.25 * 0.98  # the bytes at the NIC's rate: a lower bound pacing guarantees
    assert paced.seconds("replicate", t0, t1) >= 0.9 * (t1 - t0)


def test_each_stream_counts_in_the_callers_phase(monkeypatch):
    """The streams run in threads of their own: each must see the caller's phase, or its paced spans
    count as "other" and the replicate phase reads as this host's (a two-node run said 100 %)."""
    import emulator.checkpoint.peer as peer_mod
    from tiers.emulated import counted_as, current_phase

    seen = []
    transport = object.__new__(peer_mod.PeerTransport)  # no process group: the streams are fakes
    transport.ranks_per_node, transport.group = 1, None
    transport._send_stream = lambda peer, files, source, errors: seen.append(current_phase()) or 0
    transport._recv_stream = lambda peer, store, errors: seen.append(current_phase()) or []
    monkeypatch.setattr(peer_mod.dist, "get_world_size", lambda group=None: 2)
    monkeypatch.setattr(peer_mod.dist, "all_gather_object", lambda out, obj, group=None: out.__setitem__(0, obj),
                        raising=False)
    layout = PeerLayout(nodes=2, replicas=1, placement="jump", jump=1)
    with counted_as("replicate"):
        try:
            transport._exchange(layout, {1: []}, [1], None, None)
        except Exception:  # noqa: BLE001 - only the streams' phase is checked here
            pass
    assert seen == ["replicate", "replicate"]
