"""One run owns its tiers: a second run in the same place fails at once, naming the holder; a dead
run's lock is taken over; an earlier run's processes that are still exiting are waited for."""
from __future__ import annotations

import asyncio
import fcntl
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from crashcheck import descendants, verify_dir_tier
from emu import ckpt_emu, results, small_config
from s3server import s3_bucket, s3_endpoint, s3_server  # noqa: F401 - pytest fixtures

from emulator.job.lifeline import FORK_SERVER_PROCESS_NAME
from tiers.locking import OWNER, USERS, Holder, TierBusy, claim_dir, join_dir


def _start(cfg, *extra):
    proc = subprocess.Popen([sys.executable, "-m", "emulator.cli", "run", str(cfg), "--quiet", "--duration", "120s",
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc


def _wait_training(proc, out):
    deadline = time.time() + 120
    while not (out / "status.json").exists():
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.2)


@pytest.mark.parametrize("same_out", [True, False])
def test_a_second_run_on_the_same_tiers_fails_at_once_naming_the_holder(tmp_path, same_out):
    cfg = small_config(tmp_path, training={"step_seconds": 0.05})
    first = _start(cfg)
    _wait_training(first, tmp_path / "out")
    try:
        before = sorted(p.name for p in (tmp_path / "global").glob("step_*"))
        second = ckpt_emu("run", cfg, "--quiet", *([] if same_out else ["--out", tmp_path / "out2"]), timeout=120)
        lines = second.stderr.strip().splitlines()
        assert second.returncode == 2 and len(lines) == 1, second.stderr
        what = "results folder" if same_out else "dir tier"
        assert what in lines[0] and "is in use by another run: pid " in lines[0], lines[0]
        assert f" on {socket.gethostname()} since " in lines[0]
        if same_out:
            assert lines[0].endswith(")") and not (tmp_path / "out" / "results.json").exists()
        assert first.poll() is None  # the first run was not disturbed...
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=120)
    assert first.returncode == 0  # ...and ends with every checkpoint complete
    res = results(tmp_path / "out")
    assert all(m["incomplete"] == 0 for m in res["modes"].values())
    assert verify_dir_tier(tmp_path / "global", ranks=2) and before  # only intact checkpoints, as before


def test_a_lock_left_by_a_killed_run_is_taken_over(tmp_path):
    """The rerun starts while the killed run's ranks still hold its locks (they die a few seconds
    after the CLI here: their fork server is stopped until then): it waits for them."""
    cfg = small_config(tmp_path, training={"step_seconds": 0.05})
    first = _start(cfg)
    _wait_training(first, tmp_path / "out")
    fork_server, = (p for p in descendants(first.pid) if _comm(p) == FORK_SERVER_PROCESS_NAME)
    os.kill(fork_server, signal.SIGSTOP)  # the ranks die with it, when it runs again
    first.kill()  # the CLI; its torchrun and ranks follow it (emulator/job/lifeline.py)
    first.communicate(timeout=60)
    threading.Timer(3.0, os.kill, (fork_server, signal.SIGCONT)).start()
    old = json.loads((tmp_path / "global" / OWNER).read_text())
    assert old["launcher"] == first.pid
    ckpt_emu("run", cfg, "--quiet", check=True, timeout=300)
    new = json.loads((tmp_path / "global" / OWNER).read_text())
    assert new["pid"] != old["pid"] and new["job"] != old["job"]
    assert all(m["incomplete"] == 0 for m in results(tmp_path / "out")["modes"].values())


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _hold_shared(folder, ready, release):
    fd = os.open(os.path.join(folder, USERS), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_SH)
    ready.set()
    release.wait(30)


def test_a_claim_waits_for_an_earlier_runs_processes(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    lingering = ctx.Process(target=_hold_shared, args=(str(tmp_path), ready, release))
    lingering.start()
    ready.wait(30)
    with pytest.raises(TierBusy, match="still used by processes of an earlier run"):
        claim_dir(tmp_path, Holder(job="new"), what="tier", wait_users_s=0.5)
    threading.Timer(0.5, release.set).start()  # the lingering process exits while we wait
    claim = claim_dir(tmp_path, Holder(job="new"), what="tier", wait_users_s=20)  # once it exits: ours
    lingering.join(10)
    assert json.loads((tmp_path / OWNER).read_text())["job"] == "new"
    joined = join_dir(tmp_path, what="tier")  # the run's other processes share it
    joined.release()
    claim.release()


# --------------------------------------------------------------------------- S3: a lease object

def _s3(endpoint, bucket, prefix="lease-test"):
    from tiers.s3 import S3Tier
    return S3Tier(bucket, prefix=prefix, endpoint_url=endpoint)


def test_s3_lease_names_its_holder_and_frees_on_release(s3_endpoint, s3_bucket):
    a, b = _s3(s3_endpoint, s3_bucket), _s3(s3_endpoint, s3_bucket)
    claim = a.claim(Holder(job="first"))
    with pytest.raises(TierBusy, match=r"is in use by another run: pid \d+ on .* \(run first\) \(its lease expires in"):
        b.claim(Holder(job="second"))
    assert asyncio.run(a.list()) == []  # the lease is not an object of the tier
    claim.release()
    b.claim(Holder(job="second")).release()


def test_s3_lease_is_renewed_while_its_run_lives_and_taken_over_when_it_expires(s3_endpoint, s3_bucket):
    from tiers.s3_lease import S3Lease
    a, b = _s3(s3_endpoint, s3_bucket), _s3(s3_endpoint, s3_bucket)
    far = Holder(job="elsewhere", host="another-host")
    live = S3Lease(a, far, ttl_s=1.5).acquire()
    time.sleep(3)  # two ttl/3 renewals later it is still held
    with pytest.raises(TierBusy):
        S3Lease(b, Holder(job="second"), ttl_s=1.5).acquire()
    live._stop.set()  # the holder stalls (or its host dies): no more renewals
    live._thread.join()
    time.sleep(2)
    S3Lease(b, Holder(job="second"), ttl_s=60).acquire().release()


def test_s3_lease_of_a_dead_process_on_this_host_is_taken_over_at_once(s3_endpoint, s3_bucket):
    from tiers.s3_lease import S3Lease
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    a, b = _s3(s3_endpoint, s3_bucket), _s3(s3_endpoint, s3_bucket)
    stale = S3Lease(a, Holder(job="killed", pid=dead.pid, started=time.time() - 5), ttl_s=600).acquire()
    stale._stop.set()
    S3Lease(b, Holder(job="rerun"), ttl_s=60).acquire().release()


def test_a_run_refused_for_a_leased_s3_prefix_writes_nothing_anywhere(s3_endpoint, s3_bucket, tmp_path):
    """issue 54, 7: a second run refused because its S3 prefix is leased still made its results folder
    and its local tier (only directory tiers were checked before anything was written)."""
    a = _s3(s3_endpoint, s3_bucket, "busy-prefix")
    claim = a.claim(Holder(job="first", host="another-host"))
    try:
        cfg = small_config(tmp_path, tiers={"global": {"backend": "s3", "bucket": s3_bucket, "prefix": "busy-prefix",
                                                        "endpoint_url": s3_endpoint}})
        before = sorted(p.name for p in tmp_path.iterdir())
        proc = ckpt_emu("run", cfg, "--quiet", timeout=120)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert lines[0].startswith("ckpt-emu: error: tiers.global: s3 tier is in use by another run: pid ")
        assert "(run first)" in lines[0] and "another-host" in lines[0]
        assert sorted(p.name for p in tmp_path.iterdir()) == before  # no results folder, no local tier
    finally:
        claim.release()
