"""simulate's sweep picture marks the recommended cell and says when it sits on the grid's edge:
the best interval may then lie beyond what was swept."""
from __future__ import annotations

from matplotlib.patches import Rectangle

from emulator.simulation.plot import heatmap_figure
from emulator.simulation.report import render_sweep
from emulator.simulation.sweep import grid_edges

INTERVALS = [300.0, 600.0, 1200.0]
BANDWIDTHS = [100.0, 400.0]


def _sweep(best_j: int, best_i: int) -> dict:
    grid = [[0.80 + 0.01 * (i + j) for j in range(3)] for i in range(2)]
    grid[best_i][best_j] = 0.95
    best = {"interval_s": INTERVALS[best_j], "global_gib_s": BANDWIDTHS[best_i], "goodput": 0.95,
            "on_edge": grid_edges(INTERVALS, BANDWIDTHS, INTERVALS[best_j], BANDWIDTHS[best_i])}
    return {"global_gib_s": BANDWIDTHS,
            "modes": {"async": {"intervals_s": INTERVALS, "goodput": grid, "fitted": [], "best": best}}}


def test_the_edge_is_named_per_axis():
    assert grid_edges(INTERVALS, BANDWIDTHS, 600.0, 100.0) == ["at the lowest global bandwidth swept"]
    assert grid_edges(INTERVALS, [None], 1200.0, None) == [
        "at the longest interval swept: the best may lie beyond, extend the sweep"]
    assert grid_edges(INTERVALS, [None], 600.0, None) == []
    assert grid_edges([600.0], [None], 600.0, None) == []  # one column: no grid to be on the edge of


def _best_marks(ax):
    star = [line for line in ax.get_lines() if line.get_gid() == "best"]
    cell = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_gid() == "best cell"]
    return star, cell


def test_the_picture_marks_the_best_cell_and_its_edge():
    inside = heatmap_figure("t", _sweep(best_j=1, best_i=1)).axes[0]
    star, cell = _best_marks(inside)
    assert star and (star[0].get_xdata()[0], star[0].get_ydata()[0]) == (1, 1)
    assert cell and cell[0].get_xy() == (0.5, 0.5)
    assert "interval swept" not in inside.get_title()

    edge = heatmap_figure("t", _sweep(best_j=2, best_i=1)).axes[0]
    assert "at the longest interval swept: the best may lie beyond, extend the sweep" in edge.get_title()
    assert "on the grid's edge: at the longest interval swept" in render_sweep(_sweep(best_j=2, best_i=1))
