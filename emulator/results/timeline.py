"""Timeline picture of a run, so a user sees stalls and drain overlap without Grafana.

One panel per mode (the no-checkpoint baseline, then sync, then async), each spanning its own
mode, on the design's time axis (full size: ``summary.at_full_size``; the measured seconds on the
top axis). A panel draws one row per rank, bars for compute / stall (with its device-to-host
copy, ``d2h``, inside it when the state lives on a GPU) / local_write; steps whose compute took
longer than the baseline's p99 in their own colour (interference); drains get their own row per
draining rank (the node drainer runs in local rank 0), because in async mode they overlap that
rank's compute. Within a rank row, compute and stall fill the lower band and local_write the
upper band, since an async local write runs in the background while the rank computes.

Readable at any size: past ``MAX_RANK_ROWS`` ranks a panel draws one row for all ranks and one for
all drains (the union of their bars: the job is stalled while any rank is); past
``MAX_CHECKPOINT_BARS`` checkpoints it draws each checkpoint's durations instead (the job's
stall, the slowest local write and drain) against the checkpoint interval, where a drain above
the line missed its deadline. Bars are grouped per (row, kind) into one ``broken_barh`` call, and
stalls, local writes and drains have an outline of their own colour so that a 10 ms stall stays
visible on an axis of hours. ``timeline_figure`` returns the figure, so its axes and bars can be
read back.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from emulator.results.summary import at_full_size
from emulator.units import fmt_duration
from tiers.safepath import write_figure

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
#: more ranks than this: one row for all ranks and one for all drains
MAX_RANK_ROWS = 16
#: more checkpoints than this in a mode: each checkpoint's durations instead of its bars
MAX_CHECKPOINT_BARS = 60
#: the time unit of a panel by the span it shows (design seconds): below 5 minutes, seconds, ...
_UNITS = ((300, "s", 1.0), (5 * 3600, "min", 60.0), (float("inf"), "h", 3600.0))


def _unit(span_s: float) -> tuple[str, float]:
    return next((name, size) for limit, name, size in _UNITS if span_s <= limit)


def _rows(events, aggregate: bool):
    """Row keys, top to bottom: ranks, then one drain row per rank that drains; or, aggregated,
    one row for every rank and one for every drain."""
    ranks = sorted({e["rank"] for e in events if e["kind"] != "drain"})
    drainers = sorted({e["rank"] for e in events if e["kind"] == "drain"})
    if aggregate:
        return [("rank", None)] * bool(ranks) + [("drain", None)] * bool(drainers)
    return [("rank", r) for r in ranks] + [("drain", r) for r in drainers]


def _row_label(key, events) -> str:
    kind, rank = key
    if rank is not None:
        return f"rank {rank}" if kind == "rank" else f"drains (rank {rank}'s node)"
    n = len({e["rank"] for e in events if (e["kind"] == "drain") == (kind == "drain")})
    return f"all {n} ranks" if kind == "rank" else f"drains ({n} nodes)"


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """(start, end) spans merged where they overlap."""
    out = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _checkpoints(events) -> int:
    """Checkpoints in a mode: the most stalls any rank had."""
    per_rank = defaultdict(int)
    for e in events:
        if e["kind"] == "stall":
            per_rank[e["rank"]] += 1
    return max(per_rank.values(), default=0)


class _Panel:
    """One mode's events in design time: ``t(measured)`` converts, ``unit`` names the axis."""

    def __init__(self, events, scale: float):
        self.events, self.scale = events, scale
        t0 = min((e["start"] for e in events), default=0.0)
        self.t0 = t0 if t0 > 1e6 else 0.0  # epoch times: from the mode's start
        self.span = max((self.t(e["end"]) for e in events), default=0.0)
        self.unit, self.size = _unit(self.span)

    def t(self, measured: float) -> float:
        """Design seconds since the mode started."""
        return at_full_size(measured - self.t0, self.scale)

    def x(self, measured: float) -> float:
        return self.t(measured) / self.size


def _draw_bars(ax, panel: _Panel, aggregate: bool) -> None:
    rows = _rows(panel.events, aggregate)
    index = {key: i for i, key in enumerate(rows)}
    spans = defaultdict(list)
    for e in panel.events:
        kind = e["kind"]
        key = ("drain" if kind == "drain" else "rank", None if aggregate else e["rank"])
        spans[(index[key], kind)].append((panel.x(e["start"]), panel.x(max(e["end"], e["start"]))))
    for (row, kind), xs in spans.items():
        merged = _union(xs) if aggregate else xs
        off, height = _BANDS.get(kind, (0.1, 0.8))
        colour = COLOURS.get(kind, "grey")
        edge = {"linewidth": 0} if kind == "compute" else {"edgecolor": colour, "linewidth": 0.8}  # short ones stay visible
        zorder = 3 if kind == "d2h" else 2  # inside its stall bar, drawn over it
        ax.broken_barh([(s, e - s) for s, e in merged], (row + off, height), facecolors=colour, zorder=zorder,
                       gid=kind, **edge)
    step = max(1, len(rows) // 32)  # keep tick labels legible for many ranks
    ticks = list(range(0, len(rows), step))
    ax.set_yticks([t + 0.5 for t in ticks])
    ax.set_yticklabels([_row_label(rows[t], panel.events) for t in ticks])
    ax.set_ylim(len(rows), 0)  # rank 0 on top


def _per_checkpoint(panel: _Panel, kind: str) -> list[tuple[float, float]]:
    """(start, duration) in design seconds of each checkpoint's ``kind``: the i-th of every rank
    (drains: of every draining node), the longest of them."""
    by_rank = defaultdict(list)
    for e in panel.events:
        if e["kind"] == kind:
            by_rank[e["rank"]].append((panel.t(e["start"]), at_full_size(e["end"] - e["start"], panel.scale)))
    lists = [sorted(v) for v in by_rank.values()]
    return [(min(x[i][0] for x in lists if i < len(x)), max(x[i][1] for x in lists if i < len(x)))
            for i in range(max(map(len, lists), default=0))]


def _draw_durations(ax, panel: _Panel, interval_s: float | None) -> None:
    for kind, marker in (("stall", "o"), ("local_write", "s"), ("drain", "^")):
        points = _per_checkpoint(panel, kind)
        if points:
            ax.plot([s / panel.size for s, _ in points], [d for _, d in points], marker=marker, markersize=2.5,
                    linewidth=0.6, color=COLOURS[kind], gid=kind,
                    label=f"{LABELS[kind].split(' (')[0]} per checkpoint (longest rank)")
    if interval_s:
        ax.axhline(interval_s, color="black", linestyle="--", linewidth=0.8, gid="interval",
                   label=f"checkpoint interval ({interval_s:g} s): a drain above it missed its deadline")
    ax.set_yscale("log")
    ax.set_ylabel("seconds at full size")
    ax.legend(fontsize=7, loc="upper right", ncol=2)


def _title(mode: str, summary: dict | None, checkpoints: int, aggregate: bool) -> str:
    if mode == "none":
        return "none: the same steps without checkpoints (the baseline)"
    full = (summary or {}).get("full_size") or {}
    parts = [f"{(summary or {}).get('checkpoints', checkpoints)} checkpoints"]
    if "stall_mean_s" in full:
        parts.append(f"mean stall {fmt_duration(full['stall_mean_s'])}")
    for key, word in (("overhead_ratio", "overhead"), ("drain_overlap_ratio", "drain overlap"),
                      ("slowdown_ratio", "slowdown")):
        if key in full or key in (summary or {}):  # on the design's clock, as the axes
            parts.append(f"{word} {full.get(key, (summary or {}).get(key)):.1%}")
    if (summary or {}).get("deadline_misses"):
        parts.append(f"{summary['deadline_misses']} deadline misses")
    if checkpoints > MAX_CHECKPOINT_BARS:
        parts.append("too many checkpoints to draw one by one: each one's durations")
    elif aggregate:
        parts.append("ranks and drains drawn together")
    return f"{mode}: " + ", ".join(parts)


def _interval_s(results: dict) -> float | None:
    """The checkpoint interval at full size (the deadline a drain must meet), from the config."""
    cfg = results.get("config") or {}
    try:
        return cfg["checkpoint"]["interval_steps"] * cfg["training"]["step_seconds"]
    except (KeyError, TypeError):
        return None


def _factor(results: dict) -> float:
    """Wall seconds per full-size second: the run's time factor (scale x dilation)."""
    return results.get("time_factor") or results.get("scale") or 1.0


def _draw_mode(ax, mode: str, events, results: dict) -> None:
    scale = _factor(results)
    summary = (results.get("modes") or {}).get(mode)
    panel = _Panel(events, scale)
    checkpoints = _checkpoints(events)
    aggregate = len({e["rank"] for e in events}) > MAX_RANK_ROWS
    ax.set_title(_title(mode, summary, checkpoints, aggregate), loc="left", fontsize=10)
    if not events:
        ax.text(0.5, 0.5, "no events recorded", ha="center", va="center", transform=ax.transAxes)
        ax.set_yticks([])
        return
    if checkpoints > MAX_CHECKPOINT_BARS:
        _draw_durations(ax, panel, _interval_s(results))
    else:
        _draw_bars(ax, panel, aggregate)
    ax.set_xlim(0, panel.span / panel.size * 1.01 or 1.0)  # this mode's whole span
    ax.set_xlabel(f"{panel.unit} at full size since the mode started")
    if scale != 1.0:  # the same instants as measured on this host
        per_unit = panel.size * scale
        top = ax.secondary_xaxis("top", functions=(lambda v: v * per_unit, lambda v: v / per_unit))
        top.set_xlabel("measured seconds (this host)", fontsize=8)
        top.tick_params(labelsize=7)
    ax.grid(axis="x", alpha=0.3)


def _modes(results: dict) -> list[str]:
    present = set(results.get("timeline") or {}) | set(results.get("modes") or {})
    modes = [m for m in _MODE_ORDER if m in present] + sorted(m for m in present if m not in _MODE_ORDER)
    return modes or ["(no modes in results)"]


def _height(events) -> float:
    if not events:
        return 1.0
    if _checkpoints(events) > MAX_CHECKPOINT_BARS:
        return 3.2
    rows = len(_rows(events, len({e["rank"] for e in events}) > MAX_RANK_ROWS))
    return min(max(1.8, 0.45 * rows + 1.3), 20.0)


def timeline_figure(results: dict):
    """The timeline of ``results`` (a run's results.json) as a matplotlib Figure, one axes per mode."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    timeline = results.get("timeline") or {}
    modes = _modes(results)
    heights = [_height(timeline.get(m) or []) for m in modes]
    fig_h = sum(heights) + 1.6
    fig = Figure(figsize=(13, fig_h), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(modes), 1, squeeze=False, gridspec_kw={"height_ratios": heights})[:, 0]
    for ax, mode in zip(axes, modes):
        _draw_mode(ax, mode, timeline.get(mode) or [], results)
    scale = _factor(results)
    fig.legend(handles=[Patch(color=COLOURS[k], label=LABELS[k]) for k in KINDS],
               loc="lower center", ncol=2, frameon=False, fontsize=9)
    fig.text(0.01, 0.8 / fig_h, f"time at full size: measured / the time factor {scale:g} (scale x dilation: the "
             "run compresses time with the bytes, and dilates it); top axes: the measured seconds", fontsize=8,
             color="dimgrey")
    fig.tight_layout(rect=(0, 0.9 / fig_h, 1, 1))  # room at the bottom for the legend and the caption
    return fig


def write_timeline(results: dict, path) -> None:
    """Draw ``results["timeline"]`` to ``path`` (a ``.png`` file, or a directory: ``path/timeline.png``)."""
    out = Path(path)
    if out.suffix.lower() != ".png":
        out = out / "timeline.png"
    write_figure(timeline_figure(results), out, what="timeline", dpi=100, format="png")
