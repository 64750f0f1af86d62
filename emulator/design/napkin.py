"""A design from a napkin: N accelerators, a checkpoint of B bytes, one global storage of aggregate A.

``ckpt-emu plan --accelerators N --size B --bandwidth A`` has no config to resolve: this builds the
same :class:`Design` a config would give for it. The job is N accelerators on nodes of
``accelerators_per_node`` (the last node partial where they do not divide), its state sharded
evenly (each accelerator 1/N of the checkpoint, as ZeRO-3 or FSDP), or, for a checkpoint sized by
a config (``--size CONFIG``), that config's layout filling the N accelerators (:func:`layout_job`:
its nodes' unequal bytes, what each holds and restores); its one tier is the global storage, shared
max-min fair by the nodes behind each one's NIC (emulator/design/links.py); the snapshot, the NIC and
the failure model are the design defaults (or the flags'), stated in the notes like any assumed figure.
"""
from __future__ import annotations

from emulator.config import ParallelismConfig
from emulator.config.design import DEFAULT_NIC, DEFAULT_SNAPSHOT
from emulator.design.failures import failure_model
from emulator.design.job import Job, NodeGroup, job_of
from emulator.design.links import NodeLinks, shared_store
from emulator.design.ladder import Rung
from emulator.design.model import Design
from emulator.design.overrides import Overrides, applied
from emulator.design.snapshot import DEFAULTS as SNAPSHOT_DEFAULTS
from emulator.design.snapshot import Snapshot
from emulator.errors import UserError
from emulator.units import BITS, DECIMAL, parse_rate


def napkin_design(accelerators: int, checkpoint_bytes: int, global_write_bps: float, *,
                  family: str = DECIMAL, global_read_bps: float | None = None, accelerators_per_node: int = 8,
                  nic_bps: float | None = None, snapshot_bps: float | None = None,
                  mttf_hours: float | None = None, node_loss_fraction: float | None = None,
                  group_loss_fraction: float | None = None, restart_s: float | None = None,
                  base_interval_s: float | None = None, modes: tuple = ("sync", "async"),
                  job: Job | None = None) -> Design:
    """The design of the module docstring; ``family``: the units the bandwidth was written in; ``job``:
    a config's layout on the accelerators (:func:`layout_job`), else the checkpoint sharded evenly."""
    if accelerators < 1 or checkpoint_bytes < 1:
        raise UserError("a napkin design needs accelerators >= 1 and a checkpoint of at least a byte")
    job = job or _even_job(accelerators, checkpoint_bytes, accelerators_per_node)
    notes, sources = [], {"global_write": "flag"}
    if nic_bps is None:
        nic_bps = parse_rate(DEFAULT_NIC, "design.node.nic")
        notes.append(f"design.node.nic: not given; assumed {DEFAULT_NIC} per node")
    if snapshot_bps is None:
        snapshot_bps, sources["snapshot"] = parse_rate(DEFAULT_SNAPSHOT, "design.node.snapshot.rate"), "assumed"
        notes.append(f"snapshot: not given; assumed {DEFAULT_SNAPSHOT} per accelerator "
                     "(device-to-host into pinned buffers on one H100)")
    else:
        sources["snapshot"] = "flag"
    store = shared_store(global_write_bps, global_read_bps or global_write_bps, nic_bps, family=family)
    links = NodeLinks({"global": store}, nic_bps, True, BITS)
    fm = failure_model(None, accelerators, mttf_hours=mttf_hours, node_loss_fraction=node_loss_fraction,
                       group_loss_fraction=group_loss_fraction, restart_s=restart_s)
    interval = base_interval_s or fm.cluster_mttf_s / 20  # no configured interval: the rule of thumb's
    # no tensors to count, but every save pays the fixed part (design/snapshot.py's default and its source)
    sources["snapshot_fixed_s"] = "default"
    snapshot = Snapshot(snapshot_bps, fixed_s=SNAPSHOT_DEFAULTS["fixed_s"])
    return Design(job=job, links=links, ladder=(Rung("global", 1, 2),), failures=fm, snapshot=snapshot,
                  modes=tuple(modes), base_interval_s=interval, verify="none", sources=sources, notes=tuple(notes))


def _even_job(accelerators: int, checkpoint_bytes: int, accelerators_per_node: int) -> Job:
    """The checkpoint sharded evenly over the accelerators, on nodes of ``accelerators_per_node``."""
    per_node = min(accelerators_per_node, accelerators)
    full, rest = divmod(accelerators, per_node)
    file_bytes = -(-checkpoint_bytes // accelerators)
    groups = tuple(NodeGroup(k, n * file_bytes, file_bytes, n) for k, n in ((full, per_node), (1, rest)) if k and n)
    layout = ParallelismConfig(tp=1, pp=1, dp=accelerators, zero_stage=3)
    return Job(full + (1 if rest else 0), per_node, layout, groups, groups[-1:], (groups[-1].node_bytes,),
               (groups[-1].held_bytes,))


def layout_job(cfg, accelerators: int, accelerators_per_node: int = 8) -> Job | None:
    """The job of ``cfg``'s layout (TP, PP, ZeRO, shard group, writers) on ``accelerators`` in nodes of
    ``accelerators_per_node``, DP what they give: the nodes' bytes as ``cfg`` would have them. None
    where the layout does not fill them (TP x PP, or whole nodes, do not divide them)."""
    per_node = min(accelerators_per_node, accelerators)
    if accelerators % per_node or accelerators % (cfg.parallelism.tp * cfg.parallelism.pp):
        return None
    return job_of(applied(cfg, Overrides(nodes=accelerators // per_node, accelerators_per_node=per_node)))


def unfilled_note(cfg, accelerators: int) -> str:
    """What a napkin says where the config that sized it cannot fill its accelerators."""
    p = cfg.parallelism
    return (f"--size: {cfg.model.name}'s layout (tp x pp = {p.tp * p.pp}) does not fill {accelerators:,} "
            f"accelerators: its checkpoint is spread evenly over them")
