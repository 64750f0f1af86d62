"""``ckpt-emu plan``'s report: the text of a plan (failures per class, one checkpoint's costs, the
reference and best intervals, what each tier needs and holds, the global volume), of a napkin plan,
of its sweep, and the sweep's plot. Pure rendering of a :class:`planner.Plan`; the command's flags and
its design are read in emulator/cli/plan.py."""
from __future__ import annotations

import math
from pathlib import Path

from emulator import planner
from emulator.design import wear
from emulator.design.snapshot import figures as snapshot_figures
from emulator.errors import UserError
from emulator.units import (
    DECIMAL,
    fmt_bytes,
    fmt_duration,
    fmt_pct,
    fmt_rate,
    table,
)
from tiers.base import TierError
from tiers.safepath import write_figure


# --------------------------------------------------------------------------- the report

def _rate_of(bps: float, family: str) -> str:
    return "unlimited" if math.isinf(bps) else fmt_rate(bps, family)


def answer_family(p: planner.Plan) -> str:
    """The family a design's plan says its sizes and rates in: its global storage's (decimal for a rate in bits)."""
    return wear.answer_family(p.design)


def _header(p: planner.Plan, label: str, family: str) -> list:
    j = p.design.job
    mean = j.checkpoint_bytes / j.nodes
    per = (f"{fmt_bytes(mean, family)} per node" if len(j.groups) == 1 else
           f"{fmt_bytes(mean, family)} per node on average, the heaviest {fmt_bytes(j.heaviest.node_bytes, family)}")
    return [f"Plan for {label}: {j.nodes:,} node{'s' if j.nodes != 1 else ''} x {j.accelerators_per_node} "
            f"accelerators ({j.accelerators:,}), checkpoint {fmt_bytes(j.checkpoint_bytes, family)} ({per})", ""]


def _failure_rows(p: planner.Plan) -> list:
    r = p.reference
    rows = [[f"Failures (MTTF {r.mttf_hours:,g} h per accelerator)"],
            ["  cluster MTTF", fmt_duration(r.cluster_mttf_s)],
            ["  failures per day", f"{r.failures_per_day:.3g}"]]
    return rows


def _class_table(p: planner.Plan) -> str:
    rows = [[c.name, f"{c.per_day:.3g}", c.tier, fmt_duration(c.detect_s), fmt_duration(c.restart_s),
             fmt_duration(c.restore_s), fmt_duration(c.recovery_s)] for c in p.classes]
    return table(rows, ["class", "per day", "restores from", "detect", "restart", "restore", "recovery"],
                 left=(0, 2))


def _cost_rows(p: planner.Plan) -> list:
    c, d = p.costs, p.design
    parts = snapshot_figures(d)
    rows = [["One checkpoint, alone (every node at once)"], ["  snapshot", fmt_duration(c.snapshot_s),
                                                              f"{d.sources.get('snapshot', 'design')}: "
                                                              f"{parts['describe']}"]]
    if parts["planning_s"]:
        rows.append(["  DCP's planning", fmt_duration(parts["planning_s"]), "after the snapshot, before the copies"])
    for name in d.tiers:
        rows.append([f"  {name} copy", fmt_duration(c.copy_s[name]), f"durable {fmt_duration(c.lag_s[name])} "
                     f"after the snapshot"])
    rows += [["  sync stall C", fmt_duration(c.sync_stall_s), "snapshot + every copy"],
             ["  async stall", fmt_duration(c.async_stall_s), "the snapshot"]]
    return rows


def _reference_rows(r) -> list:
    rows = [[f"Reference intervals ({r.checkpoints_per_failure:g} checkpoints per failure, "
             f"{r.overhead_budget * 100:g}% overhead budget)"],
            ["  rule of thumb", fmt_duration(r.rule_of_thumb_s), f"{r.checkpoints_per_day:,.1f} a day, a sync "
             f"checkpoint may take {fmt_duration(r.sync_budget_s)}"]]
    if r.young_s is not None:
        rows += [["  Young sqrt(2CM)", fmt_duration(r.young_s), "for the sync stall C"],
                 ["  Daly", fmt_duration(r.daly_s), "for the sync stall C"]]
    return rows


def _every_text(cell) -> str:
    return ", ".join(f"{n} every {e}" for n, e in list(cell.every.items())[1:]) or "one tier"


def _best_table(p: planner.Plan) -> str:
    rows = []
    for m, s in p.modes.items():
        mark = "<- recommended" if m == p.recommended else ""
        edge = f"on the grid's edge: {', '.join(s.on_edge)}" if s.on_edge and s.recommended is s.best else ""
        cell = s.recommended
        rows.append([m, fmt_duration(cell.base_interval_s), _every_text(cell), fmt_pct(cell.goodput),
                     fmt_pct(s.configured.goodput), " ".join(x for x in (mark, edge) if x)])
    own = next(iter(p.modes.values())).configured
    return table(rows, ["mode", "interval", "other tiers", "goodput",
                        f"at the design's ({fmt_duration(own.base_interval_s)}, {_every_text(own)})", ""],
                 left=(0, 2, 5))


def _bound_lines(p: planner.Plan) -> list:
    """Why the recommendation is not the model's optimum: the optimum beside it and the bounds it breaks;
    or, where no cell meets them, the bounds the recommendation itself breaks."""
    if p.broken:
        return ["  NO CELL MEETS THE BOUNDS: the recommendation breaks " + "; ".join(p.broken)]
    o = p.optimum
    if o is p.best:
        return []
    return [f"  unconstrained optimum ({p.recommended}): every {fmt_duration(o.base_interval_s)}, {_every_text(o)}, "
            f"goodput {fmt_pct(o.goodput)} ({(o.goodput - p.best.goodput) * 100:+.2f} points), not recommended: "
            + "; ".join(p.optimum_broken)]


def _tier_table(p: planner.Plan, family: str) -> str:
    rows = []
    for t in p.tiers:
        per = "for the job" if t.scope == "job" else "per node"
        said = wear.rate_family(t.family, family)
        rows.append([t.name, f"every {t.every}", fmt_duration(t.interval_s), fmt_duration(t.copy_s),
                     fmt_pct(t.overlap), f"{_rate_of(t.rate_bps, said)} {per}",
                     f"{fmt_rate(t.needed_bps, said)} {per}", f"x{t.headroom:.3g}",
                     "" if t.overlap <= p.overlap_target else "over the overlap target"])
    return table(rows, ["tier", "takes", "interval", "copy", "overlap", "moves at",
                        f"needs ({p.overlap_target * 100:g}% overlap)", "headroom", ""], left=(0, 1, 5, 6, 8))


def _volume_lines(p: planner.Plan, s3: dict | None, family: str) -> list:
    v = p.volume
    if v is None:
        return []
    lines = [f"Global storage: {fmt_bytes(v.bytes_per_day, family)} a day, a sustained "
             f"{fmt_rate(v.sustained_bytes_per_s, family)} "
             f"({v.checkpoints_per_day:,.1f} checkpoints, {v.per_failure:,.0f} per failure that restores from it)"]
    if v.flagged:
        lines.append(f"  FLAG: more than {v.limit_per_failure:g} checkpoints per failure ("
                     f"{v.limit_per_failure / p.reference.checkpoints_per_failure:g} x the rule of thumb) and more "
                     "than one every 15 minutes: storage traffic, wear and cost the model does not price, for "
                     "little goodput")
    if s3 is not None:
        from emulator.simulation import s3cost
        lines.append(f"  S3 cost at the recommended interval: {s3cost.format_cost(s3)}")
    return lines


def as_config(p: planner.Plan, cfg) -> dict | None:
    """The recommended intervals as the config's keys: the base interval in steps, and each tier's
    that takes fewer than every checkpoint (None without a config's step time)."""
    step = cfg.training.step_seconds if cfg is not None else 0
    if not step:
        return None
    base = max(1, round(p.best.base_interval_s / step))
    return {"step_seconds": step, "interval_steps": base,
            "tiers": {n: base * e for n, e in list(p.best.every.items())[1:] if e > 1}}


def _config_lines(p: planner.Plan, cfg) -> list:
    keys = as_config(p, cfg)
    if keys is None:
        return []
    base, step = keys["interval_steps"], keys["step_seconds"]
    tiers = ", ".join(f"tiers.{n}.interval_steps: {steps}" for n, steps in keys["tiers"].items())
    return [f"  as config: checkpoint.interval_steps: {base} ({fmt_duration(base * step)} of "
            f"{fmt_duration(step)} steps){', ' + tiers if tiers else ''}"]


def render(p: planner.Plan, label: str, *, cfg=None, s3: dict | None = None, family: str | None = None) -> str:
    """The plan's report; its sizes in ``family`` (default: :func:`answer_family`)."""
    family = family or answer_family(p)
    out = _header(p, label, family)
    out.append(table(_failure_rows(p), indent="", left=(0, 2)))
    out.append(_class_table(p))
    out.append(table(_cost_rows(p) + _reference_rows(p.reference), indent="", left=(0, 2)))
    out += ["", "Best intervals within the bounds (the multi-level model over a grid of base intervals and "
                "every-N-th per tier; global volume, request rate, NVMe endurance)",
            _best_table(p)] + _bound_lines(p) + ["",
            f"Tiers at the recommended intervals ({p.recommended}, every {fmt_duration(p.best.base_interval_s)})",
            _tier_table(p, family)]
    out += _config_lines(p, cfg) + _volume_lines(p, s3, family)
    out += [wear.capacity_heading("at the recommended intervals"), wear.capacity_table(p.holdings, family)]
    if p.notes:
        out += ["Notes"] + [f"  - {n}" for n in p.notes]
    return "\n".join(out)


def render_napkin(r, size: int | None, preset: str | None, overlap_target: float, family: str = DECIMAL) -> str:
    """A napkin plan without a bandwidth; its sizes and rates in ``family`` (``--size``'s)."""
    out = [f"Plan for {r.accelerators:,} accelerators (MTTF {r.mttf_hours:,g} h each)"
           + (f", checkpoint {fmt_bytes(size, family)}" + (f" ({preset})" if preset else "") if size else ""), ""]
    rows = [["Failures"], ["  cluster MTTF", fmt_duration(r.cluster_mttf_s)],
            ["  failures per day", f"{r.failures_per_day:.3g}"]] + _reference_rows(r)
    if size:
        need = planner.rule_of_thumb_needs(r, size, overlap_target)
        rows += [["Bandwidth needed at the rule of thumb's interval"],
                 ["  sync: size / time budget", fmt_rate(need["sync_bytes_per_s"], family)],
                 [f"  async: size / ({overlap_target * 100:g}% x interval)",
                  fmt_rate(need["async_bytes_per_s"], family)],
                 ["  written per day", fmt_bytes(need["bytes_per_day"], family),
                  f"a sustained {fmt_rate(need['sustained_bytes_per_s'], family)}"]]
    out.append(table(rows, indent="", left=(0, 2)))
    out.append("give --size and --bandwidth (or a CONFIG) for the best intervals and their goodput"
               if not size else "give --bandwidth (the global storage's write rate) for the best intervals and "
                                "their goodput")
    return "\n".join(out)


#: the sweep shows the base intervals where some mode is within this many points of its best
SWEEP_SPAN = 0.20


def _shown(p: planner.Plan) -> list:
    """Indices of the grid's base intervals the sweep shows: where some mode comes within SWEEP_SPAN of its best."""
    curves = [(s.curve, s.best.goodput) for s in p.modes.values()]
    return [k for k in range(len(curves[0][0])) if any(c[k][1] >= best - SWEEP_SPAN for c, best in curves)]


def render_sweep(p: planner.Plan) -> str:
    modes = list(p.modes)
    curves = [p.modes[m].curve for m in modes]
    rows = []
    for k in _shown(p):
        marks = [f"<- {m}" for m, c in zip(modes, curves) if c[k][0] == p.modes[m].grid_best.base_interval_s]
        rows.append([fmt_duration(curves[0][k][0])] + [fmt_pct(c[k][1]) for c in curves] + [" ".join(marks)])
    lines = [f"Goodput against the base interval (each at its best every-N-th per tier; within "
             f"{SWEEP_SPAN * 100:g} points of a best)", table(rows, ["interval", *modes, ""], left=(0, len(modes) + 1))]
    for m in modes:
        b = p.modes[m].best
        lines.append(f"  best {m}: every {fmt_duration(b.base_interval_s)}, goodput {fmt_pct(b.goodput)}")
    return "\n".join(lines)


def plot_figure(p: planner.Plan):
    """Goodput against the base interval for each mode, the optima and the reference intervals marked."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    fig = Figure(figsize=(8, 5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    shown = _shown(p)
    for (mode, s), color in zip(p.modes.items(), ("tab:blue", "tab:orange")):
        ax.plot([s.curve[k][0] / 60 for k in shown], [s.curve[k][1] * 100 for k in shown], color=color, label=mode)
        ax.plot([s.best.base_interval_s / 60], [s.best.goodput * 100], marker="*", markersize=14, color=color,
                linestyle="none", label=f"best {mode}: {fmt_duration(s.best.base_interval_s)}, "
                                        f"{fmt_pct(s.best.goodput)}")
    r = p.reference
    for name, t, style in (("rule of thumb", r.rule_of_thumb_s, ":"), ("Young", r.young_s, "--"),
                           ("Daly", r.daly_s, "-.")):
        if t is not None:
            ax.axvline(t / 60, color="grey", linestyle=style, linewidth=1, label=f"{name}: {fmt_duration(t)}")
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    best = [s.best.goodput * 100 for s in p.modes.values()]
    ax.set_ylim(max(0.0, min(best) - 25), min(100.0, max(best) + 2))
    ax.set_xlabel("base checkpoint interval (minutes)")
    ax.set_ylabel("expected goodput (%)")
    ax.set_title(f"{p.design.job.accelerators:,} accelerators, cluster MTTF {fmt_duration(r.cluster_mttf_s)}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower center")
    return fig


def write_plot(p: planner.Plan, path: str) -> Path:
    """PNG of :func:`plot_figure` at ``path`` (parent folders are made), drawn in memory and renamed
    into place (tiers.safepath: never through a link planted at the name)."""
    try:
        return write_figure(plot_figure(p), path, what=f"--plot {path}")
    except TierError as exc:
        raise UserError(str(exc)) from None
    except OSError as exc:
        raise UserError(f"--plot {path}: cannot write: {exc.strerror}") from None
