"""A config's run as the launcher resolves it and the ranks start it: its design (design.json), its
clock before any probe (emulator/job/clock.py) and a rank's state: what the results and the rank's
parts take."""
from emulator.design import resolve
from emulator.job.clock import Clock


def run_design(cfg, nodes: int = 1):
    return resolve(cfg, emulated_nodes=nodes, run=True)


def run_of(cfg, nodes: int = 1):
    """(design, clock) of a run of ``cfg`` on ``nodes`` nodes."""
    return run_design(cfg, nodes), Clock.of(cfg.run)


def rank_state(cfg, rank: int = 0, device="cpu"):
    """The state rank ``rank`` of a run of ``cfg`` starts with (emulator/workload/state.py), on its design."""
    from emulator.workload.state import RankState
    return RankState.of_run(cfg, run_design(cfg), rank, device)
