"""A restore whose reads the pacing did not cover is this host's (its checksums and deserialisation
behind the paced rate): the embedded default's loads showed 3.5 min at full size, 0.52 s here over
the scale, against the 16 s its design reads in, and no note said so."""
from __future__ import annotations

import pytest

from emulator.config import load_config
from emulator.results.summary import host_notes, summarize_loads

K, SCALE = 0.02, 0.0025  # the default at x8


def _ranks(seconds: float, paced_s: float) -> list[dict]:
    load = {"ok": True, "tier": "local", "seconds": seconds, "paced_s": paced_s, "bytes": 35_000_000,
            "fallbacks": [], "h2d_s": 0.0}
    return [{"loads": [load], "page_cache_dropped": True}]


def _restore_notes(load: dict) -> list[str]:
    results = {"modes": {}, "bytes": {"run_actual_state": 1 << 30}, "load": load}
    return [n for n in host_notes(load_config("default"), results) if n.startswith("restore")]


def test_an_unpaced_restore_is_all_this_hosts_and_said_so():
    load = summarize_loads(_ranks(0.52, 0.0), K, SCALE)
    assert load["load_host_share"] == pytest.approx(1.0)
    [note] = _restore_notes(load)
    assert "100% of its full-size time is this host's own" in note and "run.dilation" in note


def test_a_paced_restore_is_the_designs_and_needs_no_note():
    load = summarize_loads(_ranks(0.33, 0.32), K, SCALE)
    assert load["load_host_share"] == pytest.approx(0.01 / (0.32 / K + 0.01))
    assert _restore_notes(load) == []
