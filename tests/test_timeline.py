"""The timeline picture: per rank compute / stall / local write / drain bars, sync above async.

A real run's picture is checked in test_grafana.py (the live run); here synthetic
results in the format emulator.report.timeline writes."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from emulator.results.timeline import COLOURS, KINDS, write_timeline

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _rgb(hex_colour: str) -> np.ndarray:
    return np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)], dtype=float) / 255


def read_png(path: Path) -> np.ndarray:
    import matplotlib.image as mpimg
    path = Path(path)
    assert path.read_bytes()[:8] == PNG_MAGIC, f"{path} is not a PNG"
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[0] >= 150 and img.shape[1] >= 600, img.shape
    return img[..., :3]


def colour_pixels(img: np.ndarray, hex_colour: str) -> int:
    return int((np.abs(img - _rgb(hex_colour)).max(axis=2) < 0.02).sum())


def assert_png_shows_kinds(path: Path, kinds=KINDS) -> np.ndarray:
    """A valid, non-trivial PNG in which every kind's colour is drawn (bars, not just the legend)."""
    img = read_png(path)
    packed = (img * 255).astype(np.uint32) @ np.array([1 << 16, 1 << 8, 1], dtype=np.uint32)
    assert len(np.unique(packed)) > 20, "picture looks blank"
    legend_patch = 200  # about what one legend handle covers at 100 dpi
    for kind in kinds:
        n = colour_pixels(img, COLOURS[kind])
        assert n > legend_patch, f"{kind}: only {n} pixels of {COLOURS[kind]} in {path}"
    return img


def synthetic(ranks=2, checkpoints=5, interval=1.0, drain=0.3, t0=0.0) -> list[dict]:
    events = []
    for r in range(ranks):
        t = t0
        for c in range(checkpoints):
            events.append({"rank": r, "kind": "compute", "start": t, "end": t + interval})
            t += interval
            events.append({"rank": r, "kind": "stall", "start": t, "end": t + 0.1})
            events.append({"rank": r, "kind": "local_write", "start": t + 0.05, "end": t + 0.25})
            if r == 0:
                events.append({"rank": 0, "kind": "drain", "start": t + 0.25, "end": t + 0.25 + drain})
            t += 0.1
    return events


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
    red_rows = np.where((np.abs(img - _rgb(COLOURS["stall"])).max(axis=2) < 0.02).any(axis=1))[0]
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
    for i, res in enumerate(({"timeline": {"sync": [], "async": []}}, {"timeline": {}}, {})):
        path = tmp_path / f"{i}.png"
        write_timeline(res, path)
        read_png(path)


def test_many_ranks_and_events_draw_quickly(tmp_path):
    res = {"timeline": {"sync": synthetic(ranks=64, checkpoints=60), "async": synthetic(ranks=64, checkpoints=60)}}
    t = time.perf_counter()
    write_timeline(res, tmp_path / "big.png")
    assert time.perf_counter() - t < 30
    assert_png_shows_kinds(tmp_path / "big.png")
