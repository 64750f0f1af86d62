"""Peers' memory: copies of a node's memory-tier files in the host memory of other nodes, sent over
the NIC. No rank writes here; it survives its own node's loss, not a group's."""
from emulator.design.rungs.kind import RungKind

KIND = RungKind("peer", survives=("process", "node"), files=False, node_local=False, volatile=True,
                copy_phase="replicate")
