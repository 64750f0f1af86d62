"""The timeline picture read back: a PNG's pixels per kind's colour and the bars and axes drawn in a
figure, and synthetic rank events in the format emulator.results.timeline writes.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.collections import PolyCollection

from emulator.results.timeline import COLOURS, KINDS


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def rgb(hex_colour: str) -> np.ndarray:
    return np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)], dtype=float) / 255


def read_png(path: Path) -> np.ndarray:
    import matplotlib.image as mpimg
    path = Path(path)
    assert path.read_bytes()[:8] == PNG_MAGIC, f"{path} is not a PNG"
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[0] >= 150 and img.shape[1] >= 600, img.shape
    return img[..., :3]


def colour_pixels(img: np.ndarray, hex_colour: str) -> int:
    return int((np.abs(img - rgb(hex_colour)).max(axis=2) < 0.02).sum())


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


def panels(fig) -> dict:
    """The axes of a figure by the first word of their left title (the mode: "sync", "async", ...)."""
    return {ax.get_title(loc="left").split(":")[0]: ax for ax in fig.axes if ax.get_title(loc="left")}


def bars(ax, kind: str) -> list[tuple[float, float, float]]:
    """(x start, x end, y) of every bar of ``kind`` drawn in ``ax``."""
    out = []
    for coll in ax.collections:
        if isinstance(coll, PolyCollection) and coll.get_gid() == kind:
            for path in coll.get_paths():
                xs, ys = path.vertices[:, 0], path.vertices[:, 1]
                out.append((xs.min(), xs.max(), ys.min()))
    return sorted(out)
