"""Check, launch and wait for one emulator run: what ``ckpt-emu run`` and ``ckpt-emu tune`` share.

Nothing is written before the config and the tiers have been checked: each
tier's backend checks itself (``Tier.preflight``: a directory writable with
room for ``keep + 1`` checkpoints, a bucket that answers), and every failure
is one ``UserError`` line.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path


from emulator.design import ladder, resolve
from emulator.design.codec import to_json
from emulator.errors import ConfigError, UserError
from emulator.job import outdir
from emulator.job.ownership import FIXED_NODE_RANKS_ENV, claim_results_folder, new_job_id
from emulator.launch.bounds import (check_host_memory, check_metrics, check_node_addr, check_node_counts,
                                    check_ranks_per_host, parse_endpoint)
from emulator.launch.launcher import gloo_env, launch, prepare_out, torchrun_command
from emulator.launch import private_tiers
from emulator.launch.progress import RunProgress
from emulator.sizing import checkpoint_size
from tiers import TierError, backend_class
from tiers.directory import DirOptions, DirTier
from tiers.locking import busy_holder
from tiers.safepath import check_reach


def preflight(cfg, nnodes: int, duration: float | None = None, *, nproc: int | None = None,
              node_rank: int | None = None) -> None:
    """Check the device, the host, the results folder and every tier before anything is launched
    or written; raises UserError naming it."""
    if cfg.state.device == "cuda":  # cuda on a machine without one ends here (auto and cpu cannot fail,
        from emulator.workload.device import resolve_kind  # and importing torch costs each run a second)
        resolve_kind(cfg.state.device)
    nproc = nproc or max(1, cfg.parallelism.active_ranks // nnodes)
    check_ranks_per_host(cfg, nproc)
    check_metrics(cfg, nnodes, node_rank)
    _check_folders_apart(cfg)
    _check_out(cfg.run.out)
    size = checkpoint_size(cfg.model, cfg.parallelism)
    node_bytes = size.run_bytes * cfg.run.scale / max(1, nnodes)
    copies = _copies_on_a_tier(cfg, duration)
    if cfg.checkpoint.protocol == "mlperf":  # MLPerf keeps every checkpoint it writes
        copies = cfg.checkpoint.saves if cfg.checkpoint.phase != "read" else 0
    per_node = int(node_bytes * copies * 1.05) + (64 << 20)
    for name, tcfg in (("memory", cfg.tiers.memory), ("local", cfg.tiers.local), ("global", cfg.tiers.global_)):
        if tcfg is None:
            continue
        need = per_node * (nnodes if name == "global" else 1)
        try:
            backend_class(tcfg.backend).preflight(tcfg.options, need_bytes=need)
        except TierError as exc:
            kept = (f"{copies} checkpoints kept" if cfg.checkpoint.protocol == "mlperf"
                    else f"{cfg.checkpoint.keep} kept + 1 in flight" if copies > cfg.checkpoint.keep
                    else f"the run writes {copies} checkpoint(s)")
            raise UserError(f"tiers.{name}: {exc} ({kept})"
                            if "free, needs" in str(exc) else f"tiers.{name}: {exc}") from None
    check_host_memory(cfg, node_bytes, nproc, copies)
    if nnodes == 1:
        _check_tiers_free(cfg)


#: what a run's results folder needs free at least: config, log, records, report, timeline
OUT_NEEDS_BYTES = 64 << 20


def _check_out(out: str) -> None:
    """``run.out``: a folder (or one that can be made) this user may use safely (docs/security.md),
    writable, and not in use by another run; checked without making or writing anything."""
    what = f"results folder {out}"
    try:
        there, missing = check_reach(Path(out), what=what)
    except NotADirectoryError as exc:
        raise UserError(f"run.out {out}: {exc.filename} is not a directory") from None
    except TierError as exc:
        raise UserError(f"run.out: {exc}") from None
    if not os.access(there, os.W_OK | os.X_OK):
        raise UserError(f"run.out {out}: {there} is not writable")
    free = shutil.disk_usage(there).free
    if free < OUT_NEEDS_BYTES:
        raise UserError(f"run.out {out}: {there} has {free / 2**20:.0f} MiB free, needs at least "
                        f"{OUT_NEEDS_BYTES >> 20} MiB for the run's records and report")
    busy = None if missing else busy_holder(there)
    if busy is not None:
        raise UserError(f"{what} is in use by another run: {busy.describe()}")


def _check_tiers_free(cfg) -> None:
    """A single node's tiers are not held by another run, whatever their backend (a folder's lock, an
    S3 prefix's lease): a refused run writes nothing anywhere. (With several nodes a node may start
    while others of its own job hold the shared tier: the ranks' claims decide then.)"""
    for name in ladder.file_tiers():
        tier = cfg.tiers.entry(name)
        if tier is None:
            continue
        if isinstance(tier.options, DirOptions):
            busy = DirTier.busy(tier.options)
            if busy is not None:
                raise UserError(f"tiers.{name}: dir tier {tier.options.for_node(0)} is in use by another run: "
                                f"{busy.describe()}")
            continue
        holder = getattr(backend_class(tier.backend), "busy", None)
        try:
            busy = holder(tier.options) if holder is not None else None
        except TierError as exc:
            raise UserError(f"tiers.{name}: {exc}") from None
        if busy is not None:
            raise UserError(f"tiers.{name}: {tier.backend} tier is in use by another run: {busy}")


def _folders(cfg) -> list[tuple[str, Path]]:
    """(what, node 0's folder) of the results folder and of every directory tier (a memory tier's
    peer copies in the folder beside it), made absolute without following anything."""
    found = [("run.out", cfg.run.out)]
    for name in ladder.file_tiers():
        tier = cfg.tiers.entry(name)
        if tier is not None and isinstance(tier.options, DirOptions):
            found.append((f"tiers.{name}.path", tier.options.for_node(0)))
    if cfg.tiers.peer is not None and isinstance(cfg.tiers.memory.options, DirOptions):
        found.append(("tiers.peer (beside tiers.memory.path)", cfg.tiers.memory.options.for_node(0).rstrip("/") + "-peers"))
    return [(what, Path(os.path.abspath(os.path.expanduser(p)))) for what, p in found]


def _check_folders_apart(cfg) -> None:
    """Each tier needs a folder of its own, not the results folder, not inside another tier's (two
    tiers in one folder delete each other's checkpoints; a folder inside a tier is foreign there)."""
    folders = _folders(cfg)
    for i, (what_a, a) in enumerate(folders):
        for what_b, b in folders[i + 1:]:
            if a == b:
                raise UserError(f"{what_a} and {what_b} are the same folder ({a}): each needs a folder of its own")
            inner = [(x, y) for x, y in (((what_a, a), (what_b, b)), ((what_b, b), (what_a, a)))
                     if y[1] in x[1].parents and y[0] != "run.out"]
            if inner:
                (what_in, path_in), (what_out, path_out) = inner[0]
                raise UserError(f"{what_in} ({path_in}) is inside {what_out} ({path_out}): each needs a folder "
                                "of its own, outside the others")


def _copies_on_a_tier(cfg, duration: float | None) -> int:
    """Checkpoints a tier holds at once at most: ``keep`` complete ones plus the one in flight,
    or every checkpoint the run writes when that is fewer (unknown under --duration)."""
    most = cfg.checkpoint.keep + 1
    if duration is not None:
        return most
    written = len(cfg.checkpoint.modes) * (cfg.steps_per_mode // cfg.checkpoint.interval_steps)
    return max(1, min(most, written))


def _check_nodes(cfg, nnodes: int, duration: float | None = None) -> None:
    """What needs the run's node count or length: nodes to lose, and when; peers to place copies on."""
    lose = cfg.failures.lose_nodes
    taken = len(cfg.checkpoint.modes) * (cfg.steps_per_mode // cfg.checkpoint.interval_steps)
    if lose is not None and duration is None and lose.after > taken:
        raise UserError(f"failures.lose_nodes.after: {lose.after}, but the run takes {taken} checkpoint(s) "
                        "(checkpoint.saves x modes): the nodes would never be lost")
    if lose is not None and max(lose.nodes) >= nnodes:
        raise UserError(f"failures.lose_nodes.nodes: node {max(lose.nodes)} does not exist (the run has {nnodes} "
                        "node(s), --nnodes)")
    peer = cfg.tiers.peer
    if peer is not None and peer.replicas >= nnodes:
        raise UserError(f"tiers.peer.replicas: {peer.replicas} replica(s) need more than the run's {nnodes} "
                        "node(s) (--nnodes): a node's copies go to other nodes")
    if peer is not None:  # cliques and jumps that do not fit these nodes: now, not when the ranks start
        from emulator.checkpoint.placement import PeerLayout
        try:
            PeerLayout(nnodes, peer.replicas, peer.placement, peer.jump)
        except ConfigError as exc:
            raise UserError(f"tiers.peer.{exc} (--nnodes {nnodes})") from None
    _check_design_nodes(cfg, nnodes)


def _check_design_nodes(cfg, nnodes: int) -> None:
    """A run emulates some of the design's nodes: never more than the modelled job has."""
    if cfg.design is None:
        return
    modelled = cfg.design.job_nodes(cfg.parallelism.world_size)
    if modelled < nnodes:
        raise UserError(f"design.job.nodes: {modelled} modelled node(s), fewer than the {nnodes} this run "
                        "emulates (--nnodes)")


def _check_node_rank(node_rank: int | None, nnodes: int, rdzv_endpoint: str | None) -> None:
    if node_rank is None:
        return
    if nnodes < 2 or not 0 <= node_rank < nnodes:
        raise UserError(f"--node-rank {node_rank}: needs --nnodes > 1 and a rank from 0 to nnodes - 1")
    host, _, port = (rdzv_endpoint or "").rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"--rdzv-endpoint {rdzv_endpoint!r}: with --node-rank, use node 0's HOST:PORT")


def check_given_dilation(cfg, duration: float | None) -> None:
    """A given dilation that makes the run too long is refused before anything is written, unless
    run.wall_target lowers the scale (the ranks fit it, and refuse what still does not fit: emulator/
    rank/dilation.py); ``auto``: the ranks' probe decides, and checks, once it has measured."""
    if not cfg.run.dilation.auto and (cfg.run.wall_target is None or duration is not None):
        cfg.check_wall(cfg.run.dilation.factor, duration=duration)


def check_results_folder(cfg, force: bool) -> bool:
    """A finished run's results are never replaced unasked: a results folder holding them is
    refused (one line, exit 2) without ``force``. An MLPerf read phase continues its write phase's
    folder (the protocol's 30 s rule reads it): the write phase's results are kept, renamed
    (``outdir.WRITE_PHASE``). Returns whether this run is such a read phase."""
    out = Path(cfg.run.out)
    continues = _continues_write_phase(cfg, out)
    allowed = (outdir.RESULTS, outdir.REPORT, outdir.dlio_folder("write")) if continues else ()
    held = [name for name in outdir.finished_outputs(out) if name not in allowed]
    if held and not force:
        raise UserError(f"results folder {out} holds a finished run's results ({', '.join(held)}): give another "
                        "--out, or --force to replace them")
    return continues


def _continues_write_phase(cfg, out: Path) -> bool:
    if cfg.checkpoint.protocol != "mlperf" or cfg.checkpoint.phase != "read":
        return False
    try:
        return json.loads((out / outdir.RESULTS).read_text()).get("phase") == "write"
    except (OSError, ValueError, AttributeError):
        return False


def execute_run(cfg, *, duration: float | None = None, soak: bool = False, nnodes: int = 1,
                nproc_per_node: int | None = None,
                rdzv_endpoint: str | None = None, rdzv_id: str = "ckpt-emu", quiet: bool = True,
                node_rank: int | None = None, node_addr: str | None = None, force: bool = False,
                progress_label: str = "") -> Path:
    """Check, launch and wait for one emulator run; returns its results folder. A folder holding a
    finished run's results is refused unless ``force`` (:func:`check_results_folder`). ``soak``: the
    soak mode for ``duration`` (emulator/rank/soak.py). ``node_addr``:
    this node's address on the job's network, where all it serves listens."""
    check_node_counts(nnodes, nproc_per_node)
    ranks = cfg.parallelism.active_ranks
    nproc = nproc_per_node or (ranks // nnodes)
    if nproc * nnodes != ranks:
        raise UserError(f"{nnodes} node(s) x {nproc} ranks per node != {ranks} ranks in the config")
    if nnodes > 1 and not rdzv_endpoint:
        raise UserError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT (the c10d rendezvous)")
    _check_node_rank(node_rank, nnodes, rdzv_endpoint)
    if rdzv_endpoint:
        parse_endpoint(rdzv_endpoint)
    node_iface = check_node_addr(node_addr, rdzv_endpoint)
    _check_nodes(cfg, nnodes, duration)
    cfg, private = private_tiers.private_tiers(cfg, nnodes)  # the per-user folder another user took first
    check_given_dilation(cfg, duration)
    preflight(cfg, nnodes, duration, nproc=nproc, node_rank=node_rank)
    design = resolve(cfg, emulated_nodes=nnodes, run=True)  # once: every rank reads it (design.json)
    if cfg.checkpoint.protocol == "mlperf" and cfg.checkpoint.phase == "read":
        from emulator.mlperf.protocol import check_read_phase
        check_read_phase(cfg)
    write_phase = check_results_folder(cfg, force)

    out = Path(cfg.run.out)
    job = new_job_id(rdzv_endpoint, rdzv_id)
    claim = claim_results_folder(out, job)  # before anything in it is touched
    try:
        if private is not None:
            private_tiers.make(private)
        config_path = prepare_out(out, cfg.to_dict(), to_json(design), keep_write_phase=write_phase)
        cmd = torchrun_command(config_path, nproc=nproc, duration=duration, soak=soak, nnodes=nnodes,
                               rdzv_endpoint=rdzv_endpoint, rdzv_id=rdzv_id if rdzv_endpoint else job,
                               node_rank=node_rank, node_addr=node_addr, log_dir=out / outdir.AGENT_LOGS)
        progress = None if quiet else RunProgress(nproc * nnodes, label=progress_label)
        env = {FIXED_NODE_RANKS_ENV: "1"} if node_rank is not None else {}
        env.update(gloo_env(nnodes, rdzv_endpoint, node_iface))
        tiers = tuple((what.removesuffix(".path"), path) for what, path in _folders(cfg) if what.endswith(".path"))
        launch(cmd, out, threads=cfg.run.threads_per_rank, progress=progress, job=job, env=env, folders=tiers)
    finally:
        claim.release()
        if private is not None and not cfg.run.keep_tiers:
            private_tiers.remove(private)
    return out
