"""A run whose nodes hold fewer ranks than the design's node says they are paced at their part of it.

Each node of such a run is paced at its part of its design node's devices, NIC and share of global
storage (tests/unit/design/test_part_of_a_node.py), so its figures are the whole node's; the
report says how much of a node each run node is, so a reader knows why its rates are lower.
"""
from __future__ import annotations

from rundesign import run_design
from emulator.config import load_config
from emulator.results.summary import host_notes


def _notes(cfg, ranks: int, nodes: int) -> list[str]:
    results = {"modes": {}, "bytes": {"run_actual_state": 1 << 30}, "load": {}, "ranks": ranks, "nodes": nodes}
    return [n for n in host_notes(run_design(cfg), results) if n.startswith("node:")]


def test_half_a_design_node_is_said_to_be_paced_at_half_of_it():
    [note] = _notes(load_config("default", ["parallelism.ranks=4"]), ranks=4, nodes=1)
    assert note.startswith("node: each node of this run holds 4 of the design node's 8 ranks, and is paced at "
                           "that part (50%) of the node's devices"), note
    assert "its write, drain and restore figures are the whole node's" in note


def test_two_agents_of_four_ranks_of_the_peer_design_are_said_so():
    [note] = _notes(load_config("design-memory-peer-pfs"), ranks=8, nodes=2)
    assert "holds 4 of the design node's 8 ranks" in note


def test_whole_design_nodes_and_runs_without_a_design_say_nothing():
    assert _notes(load_config("default"), ranks=8, nodes=1) == []
    assert _notes(load_config("design-memory-peer-pfs", ["parallelism.ranks=16"]), ranks=16, nodes=2) == []
    assert _notes(load_config(None, ["design=null", "parallelism.ranks=2"]), ranks=2, nodes=1) == []
