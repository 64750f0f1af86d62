"""Which engine writes a run's checkpoint files (``checkpoint.engine``), built for one rank: the
registry's (emulator/checkpoint/rank_file.py), or DCP's with its saver on the rank's own gloo group
(emulator/checkpoint/dcp_engine.py). DCP is imported only by a rank that uses it: with DTensor and
sympy it is about 50 MB resident in every rank process."""
from __future__ import annotations

from emulator.checkpoint.rank_file import RankFileEngine, engine


def engine_for(cfg, state, comm, *, group=None) -> RankFileEngine:
    """The engine ``checkpoint.engine`` names, for this rank (``group``: DCP's own gloo group); a node
    leader of a node without DCP's coordinator keeps its node's copy of ``.metadata``."""
    if cfg.checkpoint.engine == "dcp":
        from emulator.checkpoint.dcp_engine import Dcp, DcpSaver
        saver = DcpSaver(state, cfg.parallelism, group, read_timeout_s=cfg.checkpoint.read_timeout_s)
        return Dcp(saver, node_copy=comm.is_node_leader and comm.node != 0)
    return engine(cfg.checkpoint.engine)
