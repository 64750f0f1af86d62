"""Timeline picture of a run, so a user sees stalls and drain overlap without Grafana.

One subplot per mode (the no-checkpoint baseline, then sync, then async), one row
per rank, bars for compute / stall (with its device-to-host copy, ``d2h``, inside it
when the state lives on a GPU) / local_write; steps whose compute took longer
than the baseline's p99 are drawn in their own colour (interference); drains get their own row per draining rank (the node drainer runs
in local rank 0), because in async mode they overlap that rank's compute. Within a
rank row, compute and stall fill the lower band and local_write the upper band, since
an async local write runs in the background while the rank computes.

Bars are grouped per (row, kind) into one ``broken_barh`` call, so tens of thousands
of events draw quickly. Stalls, local writes and drains are drawn with an outline of
their own colour so that a 10 ms stall stays visible on an axis of hours. The modes
share the time axis, so their stalls and overlap compare at a glance; a mode's title
carries its summary figures when ``results["modes"]`` has them.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

KINDS = ("compute", "slow_compute", "stall", "d2h", "local_write", "drain")
COLOURS = {"compute": "#9ecae1", "slow_compute": "#6a3d9a", "stall": "#d62728", "d2h": "#8c564b", "local_write": "#ff7f0e",
           "drain": "#2ca02c"}
LABELS = {"compute": "compute (training step)",
          "slow_compute": "step slower than the baseline's p99 (interference)",
          "stall": "stall (training blocked by the checkpoint)",
          "d2h": "of the stall, the device-to-host copy (state on a GPU)",
          "local_write": "local write (background in async)", "drain": "drain to the global tier (node)"}
# (y offset, height) inside a row of height 1
_BANDS = {"compute": (0.5, 0.4), "slow_compute": (0.5, 0.4), "stall": (0.5, 0.4), "d2h": (0.6, 0.2), "local_write": (0.1, 0.4),
          "drain": (0.1, 0.8)}
_MODE_ORDER = ("none", "sync", "async")


def _rows(events):
    """Row keys, top to bottom: ranks, then one drain row per rank that drains."""
    ranks = sorted({e["rank"] for e in events if e["kind"] != "drain"})
    drainers = sorted({e["rank"] for e in events if e["kind"] == "drain"})
    return [("rank", r) for r in ranks] + [("drain", r) for r in drainers]


def _title(mode: str, summary: dict | None) -> str:
    if mode == "none":
        return "none: the same steps without checkpoints (the baseline)"
    if not summary:
        return mode
    parts = [f"{summary.get('checkpoints', 0)} checkpoints"]
    if "stall_mean_s" in summary:
        parts.append(f"mean stall {summary['stall_mean_s'] * 1000:.0f} ms")
    if "overhead_ratio" in summary:
        parts.append(f"overhead {summary['overhead_ratio']:.1%}")
    if "drain_overlap_ratio" in summary:
        parts.append(f"drain overlap {summary['drain_overlap_ratio']:.1%}")
    if "slowdown_ratio" in summary:
        parts.append(f"slowdown {summary['slowdown_ratio']:.1%}")
    if summary.get("deadline_misses"):
        parts.append(f"{summary['deadline_misses']} deadline misses")
    return f"{mode}: " + ", ".join(parts)


def _draw_mode(ax, mode, events, summary=None):
    ax.set_title(_title(mode, summary), loc="left", fontsize=10)
    if not events:
        ax.text(0.5, 0.5, "no events recorded", ha="center", va="center", transform=ax.transAxes)
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
        colour = COLOURS.get(kind, "grey")
        edge = {"linewidth": 0} if kind == "compute" else {"edgecolor": colour, "linewidth": 0.8}  # short ones stay visible
        zorder = 3 if kind == "d2h" else 2  # inside its stall bar, drawn over it
        ax.broken_barh(spans, (row + off, height), facecolors=colour, zorder=zorder, **edge)
    step = max(1, len(rows) // 32)  # keep tick labels legible for many ranks
    ticks = list(range(0, len(rows), step))
    ax.set_yticks([t + 0.5 for t in ticks])
    ax.set_yticklabels([f"rank {rows[t][1]}" if rows[t][0] == "rank" else f"drains (rank {rows[t][1]}'s node)"
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
    summaries = results.get("modes") or {}
    present = set(timeline) | set(summaries)
    modes = [m for m in _MODE_ORDER if m in present] + sorted(m for m in present if m not in _MODE_ORDER)
    modes = modes or ["(no modes in results)"]
    out = Path(path)
    if out.suffix.lower() != ".png":
        out = out / "timeline.png"
    out.parent.mkdir(parents=True, exist_ok=True)

    nrows = [max(len(_rows(timeline.get(m) or [])), 1) for m in modes]
    heights = [min(max(1.6, 0.45 * n + 0.9), 20.0) if timeline.get(m) else 1.0 for m, n in zip(modes, nrows)]
    fig_h = sum(heights) + 1.4
    fig, axes = plt.subplots(len(modes), 1, figsize=(13, fig_h), squeeze=False, sharex=True,
                             gridspec_kw={"height_ratios": heights})
    try:
        for ax, mode in zip(axes[:, 0], modes):
            _draw_mode(ax, mode, timeline.get(mode) or [], summaries.get(mode))
            ax.tick_params(labelbottom=True)
        axes[-1, 0].set_xlabel("seconds since the mode started")
        axes[0, 0].set_xlim(left=0)
        fig.legend(handles=[Patch(color=COLOURS[k], label=LABELS[k]) for k in KINDS],
                   loc="lower center", ncol=2, frameon=False, fontsize=9)
        fig.tight_layout(rect=(0, 0.6 / fig_h, 1, 1))  # 0.6 in at the bottom for the legend
        fig.savefig(out, dpi=100)
    finally:
        plt.close(fig)
