"""simulate's sweep picture marks the recommended cell and says when it sits on the grid's edge:
the best interval may then lie beyond what was swept."""
from __future__ import annotations

from matplotlib.patches import Rectangle

from emulator.simulation.plot import heatmap_figure
from emulator.simulation.report import render_sweep
from emulator.simulation.sweep import _on_edge

INTERVALS = [300.0, 600.0, 1200.0]
BANDWIDTHS = [100e9, 400e9]
SPEC = {"interval": INTERVALS, "global_bandwidth": BANDWIDTHS}
ROWS = [{"global_bandwidth_bps": bw, "every": {}} for bw in BANDWIDTHS]


def _sweep(best_j: int, best_i: int) -> dict:
    grid = [[0.80 + 0.01 * (i + j) for j in range(3)] for i in range(2)]
    grid[best_i][best_j] = 0.95
    best = {"interval_s": INTERVALS[best_j], **ROWS[best_i], "goodput": 0.95,
            "on_edge": _on_edge(SPEC, {}, ROWS[best_i], INTERVALS[best_j])}
    return {"keys": SPEC, "rows": ROWS, "units": "decimal",
            "modes": {"async": {"intervals_s": INTERVALS, "goodput": grid, "fitted": [], "best": best}}}


def test_the_edge_is_named_per_axis():
    assert _on_edge(SPEC, {}, ROWS[0], 600.0) == ["global_bandwidth"]
    assert _on_edge({"interval": INTERVALS}, {}, {"global_bandwidth_bps": None, "every": {}}, 1200.0) == ["interval"]
    assert _on_edge({"interval": INTERVALS}, {}, {"global_bandwidth_bps": None, "every": {}}, 600.0) == []
    assert _on_edge({"interval": [600.0]}, {}, {"global_bandwidth_bps": None, "every": {}}, 600.0) == []  # one column
    # a tier taking every checkpoint is no edge: nothing lies below every 1
    assert _on_edge({"interval": INTERVALS}, {"global": [1, 2]}, {"global_bandwidth_bps": None, "every": {"global": 1}},
                    600.0) == []


def _best_marks(ax):
    star = [line for line in ax.get_lines() if line.get_gid() == "best"]
    cell = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_gid() == "best cell"]
    return star, cell


def test_the_picture_marks_the_best_cell_and_its_edge():
    inside = heatmap_figure("t", _sweep(best_j=1, best_i=1)).axes[0]
    star, cell = _best_marks(inside)
    assert star and (star[0].get_xdata()[0], star[0].get_ydata()[0]) == (1, 1)
    assert cell and cell[0].get_xy() == (0.5, 0.5)
    assert "grid's edge" in inside.get_title()  # the highest bandwidth swept is an edge

    edge = heatmap_figure("t", _sweep(best_j=2, best_i=1)).axes[0]
    assert "on the grid's edge: interval, global_bandwidth" in edge.get_title()
    assert "ON THE GRID'S EDGE (interval, global_bandwidth)" in render_sweep(_sweep(best_j=2, best_i=1))
