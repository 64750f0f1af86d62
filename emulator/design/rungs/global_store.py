"""Global storage: a parallel file system or an object store the whole job shares. The durable copy
every failure class leaves intact."""
from emulator.design.rungs.kind import RungKind

KIND = RungKind("global", survives=("process", "node", "group"), files=True, node_local=False, volatile=False,
                copy_phase="drain")
