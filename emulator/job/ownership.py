"""One run owns its tiers and its results folder, for its lifetime.

The CLI claims the results folder before it writes anything there (a second
``ckpt-emu run`` with the same ``--out`` fails at once, one line, exit 2).
In the ranks, each node leader claims its node's local tier and rank 0 the
global tier, before any rank writes to them; every rank then joins all of
them as a user (tiers/locking.py, tiers/s3_lease.py). A claim that fails ends
every rank with the same line; a claim lost later (an S3 lease another run
took over, a tier folder deleted or replaced during the run) ends the run at
once with one line (``lifeline.end_run``). The job
id ties a run's nodes together: the rendezvous id and endpoint for several
nodes, a fresh id for one.
"""
from __future__ import annotations

import os
import uuid

from emulator.errors import UserError
from emulator.job.lifeline import end_run
from tiers.base import TierError
from tiers.locking import Holder, claim_dir, join_dir
from tiers.safepath import reach

JOB_ENV = "CKPT_EMU_JOB"
#: the pid of the CLI that launched this node's ranks: a lock whose launcher ended is waited for
LAUNCHER_ENV = "CKPT_EMU_LAUNCHER"
#: set by the launcher when the nodes were started with fixed node ranks (``--node-rank``): a
#: replacement node may then take a lost node's place (emulator/rank/membership.py)
FIXED_NODE_RANKS_ENV = "CKPT_EMU_FIXED_NODE_RANKS"


def new_job_id(rdzv_endpoint: str | None, rdzv_id: str) -> str:
    return f"{rdzv_id}@{rdzv_endpoint}" if rdzv_endpoint else uuid.uuid4().hex[:12]


def holder() -> Holder:
    launcher = os.environ.get(LAUNCHER_ENV, "")
    return Holder(job=os.environ.get(JOB_ENV, "?"), launcher=int(launcher) if launcher.isdigit() else 0)


def claim_results_folder(out, job: str):
    """The CLI's claim on ``run.out``, made (0755) if missing, reached without following what the
    tool did not make (docs/security.md); raises UserError naming the run that holds it."""
    what = f"results folder {out}"
    try:
        with reach(out, create=True, mode=0o755, what=what) as folder:
            return claim_dir(folder, Holder(job=job, launcher=os.getpid()), what=what)
    except TierError as exc:
        raise UserError(str(exc)) from None
    except OSError as exc:  # e.g. a full disk
        raise UserError(f"{what}: cannot write there ({exc.strerror})") from None


def claim_tiers(comm, out, local, global_, *, memory=None) -> list:
    """Collective: claims by node leaders (the node's tiers: memory, local) and rank 0 (global),
    then every rank joins.

    Returns the claims to hold for the run's lifetime; raises UserError on every rank if any
    claim failed."""
    claims, error = [join_dir(out, what=f"results folder {out}", job=os.environ.get(JOB_ENV))], None
    node_tiers = [t for t in (memory, local) if t is not None]
    try:
        for tier in node_tiers if comm.is_node_leader else ():
            claims.append(_end_run_if_lost(tier.claim(holder())))
        if comm.rank == 0:
            claims.append(_end_run_if_lost(global_.claim(holder())))
    except TierError as exc:
        error = f"{exc}{_same_run_hint(exc)}"
    failed = [e for e in comm.all_gather(error) if e]
    if failed:
        release(claims)
        raise UserError(failed[0])
    for tier in node_tiers if not comm.is_node_leader else ():
        claims.append(tier.join())
    if comm.rank != 0:
        claims.append(global_.join())
    _held[:] = claims
    return claims


#: this process's claims, so a failure can say when its cause was a claimed folder that went
_held: list = []


def lost_claim() -> str | None:
    """The line of a claim this process holds that was lost (its folder deleted or replaced), if
    any: a write that failed because the folder went is reported as that, not as the write."""
    for claim in _held:
        lost = getattr(claim, "lost", None)
        line = lost() if callable(lost) else None  # a folder's claim (an S3 lease ends the run itself)
        if line:
            return line
    return None


def _end_run_if_lost(claim):
    """A claim that can be lost while the run holds it (an S3 lease; a folder deleted or replaced
    under the run) ends the run when it is: nothing more may be written or deleted under another
    run's claim, and a tier's folder is never silently made again without its lock."""
    if hasattr(claim, "on_lost"):
        claim.on_lost = end_run
    if hasattr(claim, "watch"):
        claim.watch()
    return claim


def _same_run_hint(exc: TierError) -> str:
    job = os.environ.get(JOB_ENV)
    if job and f"(run {job})" in str(exc):
        return " -- another node of this same run: give each node its own local tier ({node} in tiers.local.path)"
    return ""


def release(claims) -> None:
    for c in claims:
        c.release()
    _held[:] = [c for c in _held if c not in claims]
