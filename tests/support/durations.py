"""How a test compares a measured duration: against what pacing guarantees (a lower bound), or with
another duration of the same run (a ratio). Never against an absolute upper bound: on a shared
machine load only adds time, and a test that fails under load finds no defect (docs/testing.md).
"""
from __future__ import annotations

#: what a measured paced duration may fall short of its booked time: clock reads, rounding
SLACK = 0.03


def assert_paced(measured_s: float, paced_s: float, what: str = "", slack: float = SLACK) -> None:
    """``measured_s`` took at least the ``paced_s`` the emulated devices booked (less ``slack``)."""
    assert measured_s >= (1 - slack) * paced_s, f"{what}: {measured_s:.4g} s, faster than the paced {paced_s:.4g} s"


def ratio(a_s: float, b_s: float) -> float:
    """``a_s`` over ``b_s``, two durations of one run (both on the same host, under the same load)."""
    assert b_s > 0, f"the reference duration is {b_s!r}"
    return a_s / b_s
