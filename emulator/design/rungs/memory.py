"""Host memory: each rank's file in the node's own memory (a folder on /dev/shm). The nearest copy,
the cheapest to take; it survives a process crash and is lost with its node."""
from emulator.design.rungs.kind import RungKind

KIND = RungKind("memory", survives=("process",), files=True, node_local=True, volatile=True)
