"""A real run's timeline.png shows the whole run: read back from the figure drawn from its
results.json, every panel spans its own mode and holds a stall bar for every checkpoint record
of every rank (tests/unit/results/test_timeline_axes.py: the same on synthetic runs)."""
from __future__ import annotations

from collections import Counter

from emu import ckpt_emu, results, small_config
from timeline_picture import assert_png_shows_kinds, bars, panels

from emulator.results.timeline import timeline_figure


def test_the_default_shape_of_run_shows_all_its_checkpoints(tmp_path):
    cfg = small_config(tmp_path, ranks=4, training={"step_seconds": 0.1}, run={"timeline": True},
                       checkpoint={"saves": 5, "interval_steps": 4, "loads": 1, "baseline": True})
    ckpt_emu("run", cfg, "--quiet", check=True)
    res = results(tmp_path / "out")
    records = Counter(x["mode"] for r in res["per_rank"] for x in r["records"])
    assert records == {"sync": 5 * 4, "async": 5 * 4}
    axes = panels(timeline_figure(res))
    for mode, ax in axes.items():
        unit = {"s": 1, "min": 60, "h": 3600}[ax.get_xlabel().split()[0]]
        last = max(e["end"] for e in res["timeline"][mode]) / res["scale"] / unit
        assert ax.get_xlim()[0] == 0 and ax.get_xlim()[1] >= last, (mode, ax.get_xlim(), last)
        if mode != "none":
            stalls = bars(ax, "stall")
            assert len(stalls) == records[mode]
            assert max(x1 for _, x1, _ in stalls) <= ax.get_xlim()[1]
    assert_png_shows_kinds(tmp_path / "out" / "timeline.png", kinds=("compute", "stall", "local_write", "drain"))
