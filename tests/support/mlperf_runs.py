"""MLPerf Storage runs for their unit and system tests: a small config of the mlperf protocol."""
from __future__ import annotations

from pathlib import Path

from emu import small_config

SAVES = 3


def mlperf_config(tmp: Path, *, ranks: int = 8, local: bool = False, **checkpoint) -> Path:
    return small_config(tmp, ranks=ranks, local=local,
                        checkpoint={"protocol": "mlperf", "saves": SAVES, "loads": SAVES, **checkpoint})
