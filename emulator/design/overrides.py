"""What a command's flags restate of a design: applied on the config's ``design:`` after the config.

``plan --nodes 32 --nic 200Gb/s``, ``simulate --global-bandwidth 400GB/s --node-loss-fraction 0.5``
and a sweep's row of bandwidths each name a few of the design's figures. Each flag is the ``--set``
of one key of ``design:`` (``--nic`` is ``design.node.nic``, ``--nodes`` ``design.job.nodes``, ...),
applied to the config as it stands (its file, ``extends`` and ``--set``) and validated as ``--set``
is, so a flag restates only what it names: the job keeps its layout (an HSDP shard group, its
writers), a global storage its read rate, a drain the cap of the NVMe it reads, and the design's
links are decided where every other rate is (emulator/design/links.py).
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from emulator.config.mapping import apply_value
from emulator.config.schema import Config, from_mapping
from emulator.design.failures import CLASSES, DEFAULT_GROUP_LOSS_FRACTION, DEFAULT_NODE_LOSS_FRACTION, \
    DEFAULT_RECOVERY
from emulator.errors import UserError
from emulator.units import BINARY, BITS, GIB, parse_rate, rate_family


@dataclass(frozen=True)
class Overrides:
    """The figures a command's flags give (None: the config's). Rates are text in the unit grammar
    (``400Gb/s``) or bytes/s; ``restart_s`` is one restart for every class, or ``{class: seconds}``."""

    nodes: int | None = None
    accelerators_per_node: int | None = None
    global_write: str | float | None = None
    nic: str | float | None = None
    snapshot: str | float | None = None
    mttf_hours: float | None = None
    node_loss_fraction: float | None = None
    group_loss_fraction: float | None = None
    restart_s: float | dict | None = None

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self))

    def over(self, base: "Overrides") -> "Overrides":
        """These overrides on top of ``base``'s (a sweep's row over the command's flags)."""
        return Overrides(**{f.name: getattr(self, f.name) if getattr(self, f.name) is not None
                            else getattr(base, f.name) for f in fields(self)})


#: each flag's name, for the line that refuses it
FLAGS = {"nodes": "--nodes", "accelerators_per_node": "--accelerators-per-node",
         "global_write": "--global-bandwidth", "nic": "--nic", "snapshot": "--snapshot-rate",
         "node_loss_fraction": "--node-loss-fraction", "group_loss_fraction": "--group-loss-fraction"}


def _rate(value, written=None) -> str:
    """A rate (text or bytes/s) as design text, in the family the design wrote that rate in (``written``),
    so that its report keeps speaking the design's units; else as given."""
    family = rate_family(written) if written is not None else None
    if family is None:
        return value.strip() if isinstance(value, str) else f"{float(value)!r}B/s"
    bps = parse_rate(value, "rate") if isinstance(value, str) else float(value)
    return {BITS: f"{bps * 8 / 1e9!r}Gb/s", BINARY: f"{bps / GIB!r}GiB/s"}.get(family, f"{bps!r}B/s")


def _text(cfg: Config, *keys) -> dict:
    """The design's section at ``keys`` as the user wrote it ({} where absent)."""
    node = cfg.design.text if cfg.design is not None else {}
    for k in keys:
        node = node.get(k) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def _global(cfg: Config, rate) -> list:
    """``design.global.write``; its read stays what the design said (it followed the write unless given).
    A global tier its ``emulate:`` knobs describe as the job's aggregate (``shared_by: job``) has that
    knob restated; knobs of a node's or a stream's rate have no aggregate to restate."""
    knobs = cfg.tiers.global_.emulate
    if cfg.design is None or cfg.design.global_ is None:
        if knobs is None or not (knobs.write_gib_s or knobs.read_gib_s):
            return [("design.global.write", _rate(rate))]
        if knobs.shared_by != "job":
            raise UserError(f"--global-bandwidth: the global tier's rates are tiers.global.emulate's, "
                            f"shared_by {knobs.shared_by} (not the job's aggregate): describe it as design.global "
                            "(write, read) or give its knobs shared_by: job")
        bps = parse_rate(rate, "--global-bandwidth") if isinstance(rate, str) else float(rate)
        return [("tiers.global.emulate.write_gib_s", bps / GIB)]
    own = _text(cfg, "global")
    kept = [] if "read" in own else [("design.global.read", own["write"])]
    return [("design.global.write", _rate(rate, own["write"]))] + kept


def _fractions(cfg: Config, o: Overrides) -> list:
    """The loss fractions; refused where the flags and the design together take more than every failure."""
    spec = cfg.design.failures if cfg.design is not None else None
    said = {}
    for key, default in (("node_loss_fraction", DEFAULT_NODE_LOSS_FRACTION),
                         ("group_loss_fraction", DEFAULT_GROUP_LOSS_FRACTION)):
        flag, given = getattr(o, key), getattr(spec, key, None)
        said[key] = (flag, FLAGS[key]) if flag is not None else \
            (given, f"design.failures.{key}") if given is not None else (default, f"the default {key}")
    total = sum(v for v, _ in said.values())
    if total > 1 and (o.node_loss_fraction is not None or o.group_loss_fraction is not None):
        raise UserError(" + ".join(f"{where} {v:g}" for v, where in said.values())
                        + f" = {total:g} is above 1: the classes share every failure, the rest are process crashes")
    return [(f"design.failures.{k}", getattr(o, k)) for k in said if getattr(o, k) is not None]


def _restarts(cfg: Config, restart) -> list:
    """Each class's restart or replacement, its detection kept (the design's, else the default)."""
    restarts = restart if isinstance(restart, dict) else {c: restart for c in CLASSES}
    out = []
    for cls, seconds in restarts.items():
        detect = _text(cfg, "failures", cls).get("detect", DEFAULT_RECOVERY[cls][0])
        out.append((f"design.failures.{cls}", {"detect": detect, "restart": float(seconds)}))
    return out


def assignments(cfg: Config, o: Overrides) -> list:
    """The ``design:`` keys the overrides set, as (dotted key, value), in the order they are applied."""
    out = []
    if o.nodes is not None:
        out.append(("design.job.nodes", int(o.nodes)))
    if o.accelerators_per_node is not None:
        out.append(("design.job.accelerators_per_node", int(o.accelerators_per_node)))
    if o.global_write is not None:
        out += _global(cfg, o.global_write)
    if o.nic is not None:
        out.append(("design.node.nic", _rate(o.nic, _text(cfg, "node").get("nic"))))
    if o.snapshot is not None:
        out.append(("design.node.snapshot.rate", _rate(o.snapshot, _text(cfg, "node", "snapshot").get("rate"))))
    if o.mttf_hours is not None:
        out.append(("design.failures.mttf_hours", float(o.mttf_hours)))
    out += _fractions(cfg, o)
    if o.restart_s is not None:
        out += _restarts(cfg, o.restart_s)
    return out


def applied(cfg: Config, o: Overrides | None) -> Config:
    """``cfg`` with the overrides on its ``design:``, validated as ``--set`` is (ConfigError names the key)."""
    if not o:
        return cfg
    data = cfg.to_dict()
    for key, value in assignments(cfg, o):
        data = apply_value(data, key, value)
    return from_mapping(data)
