"""Start the ranks through PyTorch's own launcher (torch.distributed.run) and watch them.

The launcher runs in its own session so a Ctrl-C reaches only us: we then ask
the ranks to stop (a file rank 0 polls every step), they finish the step and
the checkpoint in flight, write the report and exit 0. A second Ctrl-C
terminates them.
"""
from __future__ import annotations

import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from emulator.errors import EXIT_BAD_INPUT, RunFailed, UserError
from emulator.job import outdir
from emulator.job.lifeline import die_with_parent
from emulator.job.ownership import JOB_ENV


def torchrun_command(config_path: Path, *, nproc: int, duration: float | None, nnodes: int = 1,
                     rdzv_endpoint: str | None = None, rdzv_id: str | None = None,
                     node_rank: int | None = None) -> list[str]:
    """torchrun for this node: standalone alone; with a node rank, the static rendezvous at node
    0's address (node ranks never change, so a replacement node takes a lost node's place); else
    the c10d rendezvous (torchrun numbers the nodes)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc)]
    if nnodes == 1 and not rdzv_endpoint:
        cmd += ["--standalone"]
    elif node_rank is not None:
        host, _, port = rdzv_endpoint.rpartition(":")
        cmd += ["--nnodes", str(nnodes), "--node-rank", str(node_rank), "--master-addr", host,
                "--master-port", port, "--rdzv-id", rdzv_id or "ckpt-emu"]
    else:
        cmd += ["--nnodes", str(nnodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", rdzv_endpoint,
                "--rdzv-id", rdzv_id or "ckpt-emu"]
    cmd += ["-m", "emulator.rank", "--config", str(config_path)]
    if duration:
        cmd += ["--duration", str(duration)]
    return cmd


def prepare_out(out: Path, cfg_dict: dict, *, keep_write_phase: bool = False) -> Path:
    """The results folder for a new run (checked by ``runner.check_results_folder``): a previous
    run's outputs and working state removed, an MLPerf write phase's results kept under their
    ``outdir.WRITE_PHASE`` names for its read phase; returns the config the ranks read."""
    out.mkdir(parents=True, exist_ok=True)
    if keep_write_phase:
        for name, kept in outdir.WRITE_PHASE.items():
            if (out / name).exists():
                os.replace(out / name, out / kept)
    for stale in outdir.OUTPUTS:
        (out / stale).unlink(missing_ok=True)
    shutil.rmtree(outdir.OutDir(out).shared_root, ignore_errors=True)
    shutil.rmtree(outdir.OutDir(out).records_root, ignore_errors=True)  # a new run: its attempts start at 0
    path = out / outdir.CONFIG
    tmp = out / f".config.{uuid.uuid4().hex[:8]}.json"
    tmp.write_text(json.dumps(cfg_dict, indent=1))
    os.replace(tmp, path)
    return path


def _first_error(log: Path) -> str | None:
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("ckpt-emu: error:"):
            return line[len("ckpt-emu: error:"):].strip()
    for line in lines:  # the exception line of the first rank that crashed
        m = re.match(r"^\[rank(\d+)\]: ([\w.]*(?:Error|Exception|Interrupt)\b.*)$", line)
        if m:
            return f"rank {m.group(1)} failed: {m.group(2)}"
    return None


def _root_exit_code(log: Path) -> int | None:
    """The exit status torchrun reports for the first rank that failed (its "Root Cause"); None
    when no rank failed (torchrun itself did not get the ranks started)."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return None
    root = text.rfind("Root Cause (first observed failure)")
    m = re.search(r"exitcode\s*:\s*(-?\d+)", text[root:]) if root >= 0 else None
    return int(m.group(1)) if m else None


def failure(log: Path, rc: int) -> UserError:
    """The one-line error of a run whose torchrun ended with ``rc``: bad input (exit 2) when its
    first failed rank found bad input or no rank started (a rendezvous that never formed), else
    a run that could not finish (exit 3: a rank died or ended the run)."""
    reason = _first_error(log) or f"a rank failed (exit status {rc})"
    code = _root_exit_code(log)
    kind = UserError if code is None or code == EXIT_BAD_INPUT else RunFailed
    return kind(f"{reason} (full log: {log})")


def _warnings(log: Path) -> list[str]:
    """The ranks' ``ckpt-emu: warning:`` lines, each once, in order."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return []
    return list(dict.fromkeys(line for line in lines if line.startswith("ckpt-emu: warning:")))


def launch(cmd: list[str], out: Path, *, threads: int, progress=None, job: str = "", env: dict | None = None) -> int:
    """Run torchrun (``env`` added to ours), logging to the results folder's torchrun.log;
    returns its exit status."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1", **{JOB_ENV: job}, **(env or {}))
    log_path = out / outdir.LOG
    interrupts = 0
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                preexec_fn=functools.partial(die_with_parent, os.getpid()))

        def on_sigint(signum, frame):
            nonlocal interrupts
            interrupts += 1
            if interrupts == 1:
                (out / outdir.STOP).touch()
                print("\nckpt-emu: stopping after the current step (Ctrl-C again to abort)", file=sys.stderr)
            else:
                os.killpg(proc.pid, signal.SIGTERM)

        old = signal.signal(signal.SIGINT, on_sigint)
        old_term = signal.signal(signal.SIGTERM, on_sigint)
        try:
            while proc.poll() is None:
                if progress:
                    progress.update(out / outdir.PROGRESS)
                time.sleep(0.25)
        finally:
            signal.signal(signal.SIGINT, old)
            signal.signal(signal.SIGTERM, old_term)
            if progress:
                progress.close()
    rc = proc.returncode
    for line in _warnings(log_path):  # what the ranks said the user should know
        print(line, file=sys.stderr)
    if rc != 0:
        raise failure(log_path, rc)
    return rc
