"""The timeline picture: per rank compute / stall / local write / drain bars, sync above async.

A real run's picture is checked in test_grafana.py (the live run); here synthetic
results in the format emulator.report.timeline writes."""
from __future__ import annotations

import time

import numpy as np

from emulator.results.timeline import COLOURS, KINDS, timeline_figure, write_timeline
from timeline_picture import assert_png_shows_kinds, bars, panels, read_png, rgb, synthetic


def test_writes_png_with_every_kind_sync_above_async(tmp_path):
    res = {"timeline": {"async": synthetic(drain=0.6), "sync": synthetic()},
           "modes": {"sync": {"checkpoints": 5, "stall_mean_s": 0.1, "overhead_ratio": 0.09,
                              "drain_overlap_ratio": 0.05, "deadline_misses": 0},
                     "async": {"checkpoints": 5, "stall_mean_s": 0.01, "overhead_ratio": 0.01,
                               "drain_overlap_ratio": 0.1, "deadline_misses": 2}}}
    path = tmp_path / "timeline.png"
    write_timeline(res, path)
    img = assert_png_shows_kinds(path)
    # sync is drawn above async: the first row with stall red is in the upper half
    red_rows = np.where((np.abs(img - rgb(COLOURS["stall"])).max(axis=2) < 0.02).any(axis=1))[0]
    assert red_rows.min() < img.shape[0] / 2 < red_rows.max()


def test_directory_path_and_epoch_times(tmp_path):
    now = time.time()
    write_timeline({"timeline": {"sync": synthetic(t0=now), "async": synthetic(t0=now + 100)}}, tmp_path / "out")
    assert_png_shows_kinds(tmp_path / "out" / "timeline.png")


def test_copes_with_an_empty_mode(tmp_path):
    write_timeline({"timeline": {"sync": [], "async": synthetic()}}, tmp_path / "a.png")
    assert_png_shows_kinds(tmp_path / "a.png")
    write_timeline({"timeline": {"sync": synthetic(), "async": []}}, tmp_path / "b.png")
    assert_png_shows_kinds(tmp_path / "b.png")


def test_copes_with_no_events_at_all(tmp_path):
    """No events: a picture that says so in every panel, not an empty or broken one."""
    for i, res in enumerate(({"timeline": {"sync": [], "async": []}}, {"timeline": {}}, {})):
        path = tmp_path / f"{i}.png"
        write_timeline(res, path)
        read_png(path)
        axes = timeline_figure(res).axes
        assert axes and all(_texts(ax) == ["no events recorded"] for ax in axes), [_texts(ax) for ax in axes]
        assert not any(bars(ax, kind) for ax in axes for kind in KINDS)
    assert [ax.get_title(loc="left").split(":")[0] for ax in timeline_figure({"timeline": {"sync": []}}).axes] == ["sync"]


def _texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def test_many_ranks_and_events_are_drawn_as_the_job(tmp_path):
    """64 ranks x 60 checkpoints: one bar per checkpoint and kind for the whole job, not one per rank
    (what keeps a big run's picture quick to draw; how quick is bench/'s to measure)."""
    res = {"timeline": {"sync": synthetic(ranks=64, checkpoints=60), "async": synthetic(ranks=64, checkpoints=60)}}
    for mode, ax in panels(timeline_figure(res)).items():
        assert len(bars(ax, "stall")) == 60, mode
        assert len(bars(ax, "drain")) == 60, mode  # rank 0 drains: one node's drains row
    write_timeline(res, tmp_path / "big.png")
    assert_png_shows_kinds(tmp_path / "big.png")
