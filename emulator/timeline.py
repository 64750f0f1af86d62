"""Timeline picture of a run, so a user sees stalls and drain overlap without Grafana.

One subplot per mode (sync on top, async below), one row per rank, bars for compute /
stall / local_write; drains get their own row per draining rank (the node drainer runs
in local rank 0), because in async mode they overlap that rank's compute. Within a
rank row, compute and stall fill the upper band and local_write the lower band, since
an async local write runs in the background while the rank computes.

Bars are grouped per (row, kind) into one ``broken_barh`` call, so tens of thousands
of events draw quickly.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

KINDS = ("compute", "stall", "local_write", "drain")
COLOURS = {"compute": "#9ecae1", "stall": "#d62728", "local_write": "#ff7f0e", "drain": "#2ca02c"}
# (y offset, height) inside a row of height 1
_BANDS = {"compute": (0.5, 0.4), "stall": (0.5, 0.4), "local_write": (0.1, 0.4), "drain": (0.1, 0.8)}
_MODE_ORDER = ("sync", "async")


def _rows(events):
    """Row keys, top to bottom: ranks, then one drain row per rank that drains."""
    ranks = sorted({e["rank"] for e in events if e["kind"] != "drain"})
    drainers = sorted({e["rank"] for e in events if e["kind"] == "drain"})
    return [("rank", r) for r in ranks] + [("drain", r) for r in drainers]


def _draw_mode(ax, mode, events):
    ax.set_title(f"{mode}")
    if not events:
        ax.text(0.5, 0.5, f"no {mode} events", ha="center", va="center", transform=ax.transAxes)
        ax.set_yticks([])
        return
    # Times are seconds since the mode started; epoch times are shifted to that.
    t0 = min(e["start"] for e in events)
    t0 = t0 if t0 > 1e6 else 0.0
    rows = _rows(events)
    index = {key: i for i, key in enumerate(rows)}
    bars = defaultdict(list)
    for e in events:
        kind = e["kind"]
        key = ("drain", e["rank"]) if kind == "drain" else ("rank", e["rank"])
        bars[(index[key], kind)].append((e["start"] - t0, max(e["end"] - e["start"], 0.0)))
    for (row, kind), spans in bars.items():
        off, height = _BANDS.get(kind, (0.1, 0.8))
        ax.broken_barh(spans, (row + off, height), facecolors=COLOURS.get(kind, "grey"), linewidth=0)
    step = max(1, len(rows) // 32)  # keep tick labels legible for many ranks
    ticks = list(range(0, len(rows), step))
    ax.set_yticks([t + 0.5 for t in ticks])
    ax.set_yticklabels([f"rank {rows[t][1]}" if rows[t][0] == "rank" else f"drain (rank {rows[t][1]})"
                        for t in ticks])
    ax.set_ylim(len(rows), 0)  # rank 0 on top
    ax.set_xlim(left=0)
    ax.grid(axis="x", alpha=0.3)


def write_timeline(results: dict, path) -> None:
    """Draw ``results["timeline"]`` to ``path`` (a ``.png`` file, or a directory: ``path/timeline.png``)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    timeline = results.get("timeline") or {}
    modes = [m for m in _MODE_ORDER] + sorted(m for m in timeline if m not in _MODE_ORDER)
    out = Path(path)
    if out.suffix.lower() != ".png":
        out = out / "timeline.png"
    out.parent.mkdir(parents=True, exist_ok=True)

    nrows = [max(len(_rows(timeline.get(m) or [])), 1) for m in modes]
    heights = [min(max(2.0, 0.3 * n + 1.0), 20.0) for n in nrows]
    fig, axes = plt.subplots(len(modes), 1, figsize=(12, sum(heights) + 0.8), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    try:
        for ax, mode in zip(axes[:, 0], modes):
            _draw_mode(ax, mode, timeline.get(mode) or [])
        axes[-1, 0].set_xlabel("seconds since the mode started")
        fig.legend(handles=[Patch(color=COLOURS[k], label=k) for k in KINDS],
                   loc="upper right", ncol=len(KINDS), frameon=False)
        fig.tight_layout(rect=(0, 0, 1, 0.97))
        fig.savefig(out, dpi=100)
    finally:
        plt.close(fig)
