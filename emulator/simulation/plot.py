"""Pictures: where the wall time went (simulate) and goodput over the design grid (sweep)."""
from __future__ import annotations

from emulator.units import fmt_duration, fmt_rate

PARTS = (("useful", "useful_s", "tab:green"), ("checkpoint stall", "stall_s", "tab:blue"),
         ("lost work", "lost_work_s", "tab:red"), ("restarts", "restart_s", "tab:orange"),
         ("restores", "recovery_s", "tab:purple"))


def _figure(**kw):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(**kw)
    FigureCanvasAgg(fig)
    return fig


def breakdown_figure(title: str, outcomes: dict):
    """One horizontal bar per mode: the wall time split into useful work and each overhead."""
    fig = _figure(figsize=(8, 1.6 + 0.9 * len(outcomes)), dpi=100)
    ax = fig.add_subplot()
    modes = list(outcomes)
    for y, mode in enumerate(modes):
        o, left = outcomes[mode], 0.0
        for label, attr, color in PARTS:
            w = getattr(o, attr) / o.wall_s * 100
            ax.barh(y, w, left=left, color=color, label=label if y == 0 else None)
            left += w
        ax.text(101, y, f"goodput {o.goodput * 100:.1f} %\nevery {fmt_duration(o.interval_s)}",
                va="center", fontsize=8)
    ax.set_yticks(range(len(modes)), modes)
    ax.set_xlim(0, 125)
    ax.set_xlabel("share of wall time (%)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, ncol=5, loc="upper center", bbox_to_anchor=(0.45, -0.35 if len(modes) < 2 else -0.2))
    fig.tight_layout()
    return fig




def heatmap_figure(title: str, sweep: dict):
    """Goodput per (interval, global bandwidth) cell, one panel per mode, the best cell starred and
    outlined, and said when it sits on the grid's edge (the best may lie beyond the sweep)."""
    from matplotlib.patches import Rectangle
    modes = list(sweep["modes"])
    rows = sweep["rows"]
    labels = [row_label(r, sweep.get("units", "decimal")) for r in rows]
    fig = _figure(figsize=(4 + 3.2 * len(modes), 2.2 + 0.45 * len(rows)), dpi=100)
    for k, mode in enumerate(modes):
        m = sweep["modes"][mode]
        cols, grid = m["intervals_s"], [[g * 100 for g in r] for r in m["goodput"]]
        ax = fig.add_subplot(1, len(modes), k + 1)
        im = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis")
        ax.set_xticks(range(len(cols)), [fmt_duration(c) for c in cols], rotation=60, fontsize=7)
        ax.set_yticks(range(len(rows)), labels, fontsize=7)
        ax.set_xlabel("interval (training between checkpoints)")
        ax.set_ylabel(", ".join(k for k in sweep["keys"] if k != "interval") or "design")
        b = m["best"]
        bi = next(i for i, r in enumerate(rows) if all(r[k] == b[k] for k in r))
        bj = cols.index(b["interval_s"])
        ax.plot([bj], [bi], marker="*", markersize=16, color="white", markeredgecolor="black", gid="best")
        ax.add_patch(Rectangle((bj - 0.5, bi - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2, gid="best cell"))
        if len(cols) * len(rows) <= 120:
            for i, r in enumerate(grid):
                for j, v in enumerate(r):
                    ax.text(j, i, f"{v:.1f}", ha="center", va="center", fontsize=6, color="white")
        edges = b.get("on_edge") or []
        ax.set_title(f"{mode}: best {b['goodput'] * 100:.2f} % every {fmt_duration(b['interval_s'])}"
                     + (f"\non the grid's edge: {', '.join(edges)}" if edges else ""), fontsize=9,
                     color="firebrick" if edges else "black")
        fig.colorbar(im, ax=ax, label="goodput (%)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def row_label(row: dict, family: str = "decimal") -> str:
    """A sweep row's bandwidth and ``every`` values, short."""
    parts = [] if row["global_bandwidth_bps"] is None else [fmt_rate(row["global_bandwidth_bps"], family)]
    parts += [f"{k[0]}{v}" for k, v in row["every"].items()]
    return " ".join(parts) or "config"

