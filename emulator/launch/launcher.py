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
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from emulator.errors import EXIT_BAD_INPUT, RunFailed, UserError
from emulator.job import outdir
from emulator.job.lifeline import die_with_parent
from emulator.job.ownership import JOB_ENV, LAUNCHER_ENV
from emulator.launch import failure
from tiers.base import TierError
from tiers.fileops import partial_of
from tiers.safepath import is_own_file, open_own_file, reach, write_file


#: where a single-node run's rendezvous listens: loopback, port 0 (the kernel picks a free one)
LOOPBACK = "127.0.0.1"


def torchrun_command(config_path: Path, *, nproc: int, duration: float | None, soak: bool = False, nnodes: int = 1,
                     rdzv_endpoint: str | None = None, rdzv_id: str | None = None,
                     node_rank: int | None = None, node_addr: str | None = None,
                     log_dir: Path | None = None) -> list[str]:
    """torchrun for this node, through ``emulator.rank.agent`` (each store it serves listens on the
    host it is given alone): alone, a c10d rendezvous on 127.0.0.1 with the ranks' address 127.0.0.1,
    so nothing of the run listens beyond loopback; with a node rank, the static rendezvous at node
    0's address (node ranks never change, so a replacement node takes a lost node's place); else
    the c10d rendezvous (torchrun numbers the nodes). ``node_addr``: the node's address, the ranks'
    (``--local-addr``), and whether it hosts the rendezvous: the endpoint is its address (torchrun
    guesses from the host name, which may resolve elsewhere). ``log_dir``: torchrun's log folder (its
    default is a new folder in the system's temporary folder, left there)."""
    cmd = [sys.executable, "-m", "emulator.rank.agent", "--nproc-per-node", str(nproc)]
    if log_dir is not None:
        cmd += ["--log-dir", str(log_dir)]
    if nnodes == 1 and not rdzv_endpoint:
        cmd += ["--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{LOOPBACK}:0",
                "--rdzv-id", rdzv_id or "ckpt-emu", "--rdzv-conf", "is_host=1", "--local-addr", LOOPBACK]
    elif node_rank is not None:
        host, _, port = rdzv_endpoint.rpartition(":")
        cmd += ["--nnodes", str(nnodes), "--node-rank", str(node_rank), "--master-addr", host,
                "--master-port", port, "--rdzv-id", rdzv_id or "ckpt-emu"]
    else:
        cmd += ["--nnodes", str(nnodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", rdzv_endpoint,
                "--rdzv-id", rdzv_id or "ckpt-emu"]
        if node_addr:
            cmd += ["--rdzv-conf", f"is_host={int(hosts_endpoint(node_addr, rdzv_endpoint))}"]
    if node_addr and rdzv_endpoint:
        cmd += ["--local-addr", node_addr]
    cmd += ["-m", "emulator.rank", "--config", str(config_path)]
    if duration:
        cmd += ["--duration", str(duration)] + (["--soak"] if soak else [])
    return cmd


def hosts_endpoint(node_addr: str, rdzv_endpoint: str) -> bool:
    """Whether the node at ``node_addr`` serves the rendezvous: the endpoint's host is that address."""
    host = rdzv_endpoint.rpartition(":")[0].strip("[]")
    try:
        return node_addr in {a[4][0] for a in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}
    except socket.gaierror:
        return False


def gloo_env(nnodes: int, rdzv_endpoint: str | None, node_iface: str | None = None) -> dict:
    """Where gloo's connections between ranks listen (``GLOO_SOCKET_IFNAME``), not on the address
    the host name resolves to: a node given its address, on its interface (``node_iface``); a
    single-node run, on the loopback interface."""
    if node_iface:
        return {"GLOO_SOCKET_IFNAME": node_iface}
    if nnodes != 1 or rdzv_endpoint:
        return {}
    names = [name for _, name in socket.if_nameindex()]
    return {"GLOO_SOCKET_IFNAME": "lo"} if "lo" in names else {}


def prepare_out(out: Path, cfg_dict: dict, design_dict: dict, *, keep_write_phase: bool = False) -> Path:
    """The results folder for a new run (checked by ``runner.check_results_folder``): the last run's
    outputs and shared working state gone (a new run's attempts start at 0), an MLPerf write phase's
    results kept under their ``outdir.WRITE_PHASE`` names for its read phase, every working folder
    made (never through a link: a name in it that is not the tool's is refused), the resolved config
    written, and beside it the design the ranks read (emulator/design/codec.py)."""
    what = f"results folder {out}"
    try:
        with reach(out, create=True, mode=0o755, what=what) as folder:
            if keep_write_phase:
                _keep_write_phase(folder, what)
            for stale in outdir.OUTPUTS:
                folder.remove_own_file(stale, what=what)
            _remove_partial_outputs(folder, what)
            for working in outdir.EMPTIED:  # a link of the user's own is left alone (outdir.py)
                folder.remove_own_tree(working, what=what, own_links=True)
            for working in outdir.WORKING:
                folder.subfolder(working, what=what, own_links=True).close()
        path = out / outdir.CONFIG
        write_file(path, json.dumps(cfg_dict, indent=1))
        write_file(out / outdir.DESIGN, json.dumps(design_dict, indent=1, allow_nan=False))
    except TierError as exc:
        raise UserError(str(exc)) from None
    except OSError as exc:  # e.g. a full disk
        raise UserError(f"{what}: cannot write there ({exc.strerror})") from None
    return path


def _remove_partial_outputs(folder, what: str) -> None:
    """What a killed run left half-written of its outputs or config (``.progress.json.<12 hex>.partial``,
    as ``tiers.safepath.write_file`` names them): removed where it is a regular file of this user's; anything
    else, at such a name or another, is left alone."""
    outputs = (*outdir.OUTPUTS, outdir.CONFIG, outdir.DESIGN)
    for name in folder.listdir():
        if partial_of(name) in outputs:
            st = folder.lstat(name)
            if st is not None and is_own_file(st):
                folder.remove_own_file(name, what=what)


def _create(path: Path) -> int:
    """A new, empty file of the results folder (``prepare_out`` removed the last run's), opened to
    write: the folder reached safely, never through a link planted at the name, and an existing
    file only if it is the tool's (tiers.safepath)."""
    fd = open_own_file(path, os.O_WRONLY | os.O_CREAT, what="results folder")
    os.ftruncate(fd, 0)
    return fd


def _keep_write_phase(folder, what: str) -> None:
    """An MLPerf write phase's results renamed for its read phase: only the tool's own files."""
    for name, kept in outdir.WRITE_PHASE.items():
        st = folder.lstat(name)
        if st is not None and is_own_file(st):
            os.rename(name, kept, src_dir_fd=folder.fd, dst_dir_fd=folder.fd)


def _root_exit_code(lines: list[str]) -> int | None:
    """The exit status torchrun reports for the first rank that failed (its "Root Cause"); None
    when no rank failed (torchrun itself did not get the ranks started)."""
    text = "\n".join(lines)
    root = text.rfind("Root Cause (first observed failure)")
    m = re.search(r"exitcode\s*:\s*(-?\d+)", text[root:]) if root >= 0 else None
    return int(m.group(1)) if m else None


def run_failure(log: Path, rc: int, *, oom_killed: bool = False, folders: tuple = ()) -> UserError:
    """The one-line error of a run whose torchrun ended with ``rc`` (emulator/launch/failure.py says
    why): bad input (exit 2) when its first failed rank found bad input or no rank started (a
    rendezvous that never formed), else a run that could not finish (exit 3: a rank died, was
    killed, or ended the run; the agent was killed; a disk of ``folders`` ((what, folder): the
    results folder first, then the tiers') filled up)."""
    lines = failure.read_lines(log)
    if rc < 0:  # the agent itself: a signal, never bad input
        return RunFailed(f"the ranks' launcher (torchrun's agent) was killed by signal {failure.signal_name(-rc)}: "
                         f"the run ends (its checkpoints so far stay on the tiers) (full log: {log})")
    reason = failure.first_error(lines, oom_killed=oom_killed)
    full = failure.full_folder(list(folders))
    if full is not None and (reason is None or full[0] == "results folder"):  # its log is not to be trusted then
        what, where, free = full
        return RunFailed(f"{what} {where} is full ({free >> 10} KiB free): the run could not write there "
                         f"(No space left on device); free space there or give it another folder (full log: {log})")
    code = _root_exit_code(lines)
    if reason is None and code is None:  # no rank failed: torchrun's agent did, by itself
        agent = failure.agent_error(lines)
        reason = (f"torchrun's agent failed: {agent}" if agent
                  else f"torchrun's agent failed (exit status {rc}) and no rank said why")
    reason = reason or f"a rank failed (exit status {rc})"
    kind = UserError if code is None or code == EXIT_BAD_INPUT else RunFailed
    return kind(f"{reason} (full log: {log})")


def launch(cmd: list[str], out: Path, *, threads: int, progress=None, job: str = "", env: dict | None = None,
           folders: tuple = ()) -> int:
    """Run torchrun (``env`` added to ours), logging to the results folder's torchrun.log;
    returns its exit status. ``folders``: (what, folder) of the tiers, looked at when the run fails."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1",
               **{JOB_ENV: job, LAUNCHER_ENV: str(os.getpid())}, **(env or {}))
    log_path = out / outdir.LOG
    interrupts, oom_before = 0, failure.oom_kills()
    with open(_create(log_path), "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                preexec_fn=functools.partial(die_with_parent, os.getpid()))

        def on_sigint(signum, frame):
            nonlocal interrupts
            interrupts += 1
            if interrupts == 1:
                os.close(_create(out / outdir.STOP))
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
    lines = failure.read_lines(log_path)
    for line in failure.warnings(lines):  # what the ranks said the user should know
        print(line, file=sys.stderr)
    if rc != 0:
        raise run_failure(log_path, rc, oom_killed=failure.oom_kills() > oom_before,
                          folders=(("results folder", out), *folders))
    return rc
