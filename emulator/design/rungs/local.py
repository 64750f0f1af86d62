"""The node's NVMe: each rank's file on a node-local drive. It survives a process crash and is lost
with its node."""
from emulator.design.rungs.kind import RungKind

KIND = RungKind("local", survives=("process",), files=True, node_local=True, volatile=False,
                copy_phase="persist")
