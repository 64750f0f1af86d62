"""A rank's restore is paced while any node's reads are: the restart waits for the slowest node.

The peer design on two whole nodes restored 40.1 MB a rank on node 0 and 34.9 MB on node 1, whose
ranks then waited 0.58 s for node 0's paced reads. Covered by their own node's reads only, that wait
read as software, counted once at full size: the loads' worst figure was node 1's (1.97 s, 0.58 s of
it "software") and its paced part 1.40 s, 13 % under the design's 1.60 s; node 0's is 1.60 s.
"""
from __future__ import annotations

import pytest

from emulator.checkpoint.restore import device_seconds


def test_a_node_done_early_waits_for_the_slowest_nodes_reads_not_its_software():
    t = 1_800_000_000.0
    everyone = [(4.06, 40_124_294, 0, [(t, t + 4.013)]), (4.06, 34_870_665, 1, [(t, t + 3.487)])]
    assert device_seconds(everyone, t, 4.066) == pytest.approx(4.013)
    assert device_seconds(everyone[1:], t, 4.066) == pytest.approx(3.487)
