"""Synthetic rank results (what rank 0 gathers for the report) without torchrun: a rank's records
and its modes' training loops, for the results tests (tests/unit/results/)."""
from __future__ import annotations

from emulator.checkpoint.records import RankResult
from emulator.units import GIB


def loop(wall: float, steps: int, step_s: float) -> dict:
    """A mode's training loop of ``steps`` steps of ``step_s`` (their compute), ending at ``wall``."""
    compute = [(float(s) * step_s, s * step_s + step_s) for s in range(steps)]
    return {"start": 0.0, "train_end": wall, "end": wall, "steps": steps, "flush_s": 0.0, "compute": compute,
            "at_risk": 0}


def rank_result(rank: int, records: list, modes: dict, *, node: int = 0) -> dict:
    """Rank ``rank``'s result dict: its checkpoint ``records`` (CkptRecord dicts) and ``modes``
    (mode -> :func:`loop`), no loads, no failure."""
    return RankResult(rank=rank, node=node, state_bytes=GIB, emulated_bytes=GIB, records=records, loads=[],
                      page_cache_dropped=True, modes=modes, events=[], local="dir", global_="dir",
                      stopped_early=False, failure=None, attempt=0, resume=[], recovery=None, fault_counts={},
                      content={}, content_audit=None, peak_rss_bytes=0).to_dict()
