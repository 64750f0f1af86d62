"""torchrun's agent, with every store it serves bound to the host it is given, and to no other address.

``python -m emulator.rank.agent [torchrun's arguments]`` is ``python -m torch.distributed.run``
with one change. torch's TCPStore server listens on every interface whatever host it is given
(``*:port``), so a single-node run's rendezvous store (and the store its ranks share) answered
unauthenticated reads and writes from the machine's other addresses, and a node of a multi-node
job served its stores on every network it was on. Here a store gets a socket bound to its host first
(``master_listen_fd``): the rendezvous endpoint's host, the node's address (``--local-addr``). The
launcher starts a single-node run with its c10d rendezvous at 127.0.0.1, port 0 (the kernel picks a
free one), and the ranks' address 127.0.0.1, so nothing of the run listens beyond loopback; a node
given its address (``--node-addr``) listens on it alone (docs/security.md).

The ranks are forked from a fork server that is itself a fork of the agent, taken before torchrun
starts a thread, with torch and the rank's code imported once (``fork_ranks``): torchrun would
start an interpreter per rank that imports them again, multiprocessing's fork server one more, and
a rank forked from the agent itself inherits the locks its store threads hold.
"""
from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import traceback
from datetime import timedelta
from multiprocessing import forkserver, process, resource_tracker, util

import torch.distributed as dist
from torch.distributed import run as torchrun
from torch.distributed.elastic.multiprocessing import api as elastic_api
from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend

from emulator.job.lifeline import FORK_SERVER_PROCESS_NAME, die_with_parent, name_process
from emulator.rank.run import forked_main

_TCPStore = dist.TCPStore
LISTEN_BACKLOG = 4096


def bound_socket(host: str, port: int) -> int:
    """A listening TCP socket bound to ``host`` only (port 0: a free one); its descriptor."""
    family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(LISTEN_BACKLOG)
        return sock.detach()
    except BaseException:
        sock.close()
        raise


class BoundTCPStore(_TCPStore):
    """A TCPStore whose server listens on its host alone (the host's first address, as a client finds it)."""

    def __init__(self, host_name, port, world_size=None, is_master=False, timeout=timedelta(seconds=300),
                 wait_for_workers=True, multi_tenant=False, master_listen_fd=None, use_libuv=True):
        if is_master and master_listen_fd is None:
            try:
                master_listen_fd = bound_socket(host_name, port)
            except (OSError, UnicodeError) as exc:  # as torch's own server fails: its callers then try as a client
                raise RuntimeError(f"cannot listen on {host_name}:{port}: {getattr(exc, 'strerror', exc)}") from exc
        super().__init__(host_name, port, world_size, is_master, timeout, wait_for_workers, multi_tenant,
                         master_listen_fd, use_libuv)


#: the rank's module, as the launcher names it to torchrun (``-m emulator.rank``)
RANK_MODULE = "emulator.rank"


def fork_ranks(config_from_args):
    """torchrun's ``config_from_args``, but a rank of ``emulator.rank`` is started as a function in
    a process forked from this agent's fork server (torchrun's start method ``forkserver``), not as
    ``python -u -m emulator.rank`` importing torch and the rank's code again (about 2 s of CPU a rank).
    torchrun calls it before its rendezvous: this process has no store thread yet."""
    def config(args):
        launch, cmd, cmd_args = config_from_args(args)
        if cmd == sys.executable and cmd_args[:3] == ["-u", "-m", RANK_MODULE]:
            start_fork_server()
            launch.start_method = "forkserver"
            return launch, forked_main, cmd_args[3:]
        return launch, cmd, cmd_args
    return config


def start_fork_server() -> None:
    """multiprocessing's fork server, started as a fork of this process where multiprocessing starts
    a fresh interpreter: it has torch and the rank's code imported, and none of the threads torchrun
    starts later, whose locks a rank forked from this process could inherit held. Its resource
    tracker is started as multiprocessing starts it."""
    socket_folder_that_fits()
    resource_tracker.ensure_running()
    spawn = util.spawnv_passfds
    util.spawnv_passfds = fork_running
    try:
        forkserver.ensure_running()
    finally:
        util.spawnv_passfds = spawn


#: a socket's address holds 107 bytes
SOCKET_PATH_MAX = 107
#: what multiprocessing adds to $TMPDIR: ``/pymp-XXXXXXXX/listener-XXXXXXXX`` (32), with room to spare
SOCKET_SUFFIX = 40


def socket_folder_that_fits() -> None:
    """multiprocessing's folder for the fork server's socket where its address fits: in ``$TMPDIR`` as
    usual, or, where that path is too long for a socket (a test's or a job's deep temporary folder:
    "AF_UNIX path too long"), a private folder of its own (mode 0700) in /tmp, removed at exit."""
    current = process.current_process()._config
    if current.get("tempdir") is not None:
        return
    if len(os.fsencode(tempfile.gettempdir())) + SOCKET_SUFFIX <= SOCKET_PATH_MAX:
        return
    folder = tempfile.mkdtemp(prefix="pymp-", dir="/tmp")
    util.Finalize(None, shutil.rmtree, args=(folder,), kwargs={"ignore_errors": True}, exitpriority=-100)
    current["tempdir"] = folder


def fork_running(path: str, args: list[str], passfds) -> int:
    """What ``util.spawnv_passfds`` starts (``python [flags] -c CODE`` with ``passfds`` open), as a
    fork of this process that runs CODE and keeps only those descriptors; its pid. The fork server
    ends when this process does, however it ends (SIGTERM from the kernel), and then removes its
    socket; the ranks it forked die with it."""
    code = args[args.index("-c") + 1]
    parent = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    _serve_then_exit(code, parent, passfds)


def _serve_then_exit(code: str, parent: int, passfds) -> None:
    """The fork server's life: CODE, then its socket removed and ``os._exit``, whatever is raised
    meanwhile (never a return into the agent's code, of which this process is a copy)."""
    status = 1
    try:
        try:
            signal.signal(signal.SIGTERM, _exit_on_signal)
            die_with_parent(parent, sig=signal.SIGTERM)
            _close_fds_except(passfds)
            name_process(FORK_SERVER_PROCESS_NAME)
            exec(code, {"__name__": "__fork_server__"})
            status = 0
        except SystemExit as exc:  # the fork server's end: SIGTERM, or every client closed its pipe
            status = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        except BaseException:
            traceback.print_exc()
    finally:
        try:
            _remove_socket(forkserver._forkserver._forkserver_address)
        finally:
            os._exit(status)


def _exit_on_signal(signum, frame):
    """The fork server's end, once: its death signal comes again each time the dying agent hands
    it from one of its threads to the next, and another SystemExit while it ends would unwind it
    out of its last ``finally``."""
    signal.signal(signum, signal.SIG_IGN)
    raise SystemExit(128 + signum)


def _remove_socket(address) -> None:
    """The fork server's socket and its folder (multiprocessing's own in ``$TMPDIR``, made by the
    agent), unless something else is in it; gone already after a clean exit of the agent."""
    if not isinstance(address, str) or address.startswith("\0"):
        return
    for remove, path in ((os.unlink, address), (os.rmdir, os.path.dirname(address))):
        try:
            remove(path)
        except OSError:
            return


def _close_fds_except(keep) -> None:
    """Close every descriptor from 3 up, but ``keep``."""
    low = 3
    for fd in sorted(set(keep)) + [os.sysconf("SC_OPEN_MAX")]:
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1


def every_failure(poll):
    """torchrun's poll of forked ranks (``MultiprocessContext._poll``), but a failure lists every rank
    that had ended with an error when it was seen, not the first its join found: a rank another process
    SIGKILLed and the rank that then failed on its closed connection end together, and the run must
    name the first (emulator/launch/failure.py reads torchrun's summary)."""
    def polled(context):
        ended = {rank: proc.exitcode for rank, proc in enumerate(getattr(context._pc, "processes", ()) or ())}
        result = poll(context)
        if result is not None and result.failures:
            for rank, code in ended.items():
                if code and rank not in result.failures:
                    result.failures[rank] = elastic_api.ProcessFailure(
                        local_rank=rank, pid=context._pc.processes[rank].pid, exitcode=code,
                        error_file=context.error_files[rank])
        return result
    return polled


def main(argv: list[str] | None = None) -> None:
    elastic_api.MultiprocessContext._poll = every_failure(elastic_api.MultiprocessContext._poll)
    c10d_rendezvous_backend.TCPStore = BoundTCPStore  # the rendezvous store
    dist.TCPStore = BoundTCPStore  # the store the agent shares with its ranks (dynamic_rendezvous)
    torchrun.config_from_args = fork_ranks(torchrun.config_from_args)
    torchrun.main(argv if argv is not None else sys.argv[1:])


def exit_without_teardown(status: int = 0) -> None:
    """End the agent as ``os._exit`` does, after flushing what it printed and logged and removing
    what multiprocessing made (the fork server's socket folder in ``$TMPDIR``): the interpreter's
    teardown of torch costs about a second of CPU per run and leaves nothing behind (the ranks have
    ended, the stores are closed). Only after torchrun returned: its errors take the usual way out,
    with their traceback and status."""
    util._exit_function()  # what multiprocessing runs at exit: its finalizers
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(status)


if __name__ == "__main__":
    main()
    exit_without_teardown()
