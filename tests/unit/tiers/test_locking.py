"""tiers/locking.py: a lock held by a run whose launcher has ended is waited for (its processes die
within seconds: emulator/job/lifeline.py); a lock held by a live run is refused at once."""
from __future__ import annotations

import json
import os
import threading

import pytest

from tiers.locking import OWNER, Holder, TierBusy, busy_holder, claim_dir


def _ended_pid() -> int:
    """The pid of a process that has ended and been reaped."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def _held_until(folder, launcher: int, release_after_s: float | None):
    claim = claim_dir(folder, Holder(job="old", launcher=launcher), what="tier")
    if release_after_s is not None:
        threading.Timer(release_after_s, claim.release).start()
    return claim


def test_a_claim_waits_for_a_run_whose_launcher_has_ended(tmp_path):
    _held_until(tmp_path, _ended_pid(), release_after_s=0.5)  # its ranks, still exiting
    claim = claim_dir(tmp_path, Holder(job="new"), what="tier", wait_users_s=30)
    assert json.loads((tmp_path / OWNER).read_text())["job"] == "new"
    claim.release()


def test_a_claim_on_a_run_whose_launcher_lives_fails_at_once(tmp_path):
    old = _held_until(tmp_path, os.getpid(), release_after_s=0.5)  # had the claim waited, it would get it
    with pytest.raises(TierBusy, match=r"is in use by another run: pid \d+ on .* \(run old\)$"):
        claim_dir(tmp_path, Holder(job="new"), what="tier", wait_users_s=30)
    old.release()


def test_a_run_whose_processes_outlive_their_launcher_is_named_after_the_wait(tmp_path):
    old = _held_until(tmp_path, _ended_pid(), release_after_s=None)
    with pytest.raises(TierBusy, match=r"\(run old\); its launcher .* ended but its processes still hold the lock"):
        claim_dir(tmp_path, Holder(job="new"), what="tier", wait_users_s=0.3)
    old.release()


def test_the_check_before_a_run_waits_for_a_run_whose_launcher_has_ended(tmp_path):
    old = _held_until(tmp_path, _ended_pid(), release_after_s=0.5)
    assert busy_holder(tmp_path, wait_ending_s=30) is None
    old.release()
    live = _held_until(tmp_path, os.getpid(), release_after_s=0.5)
    assert busy_holder(tmp_path, wait_ending_s=30).job == "old"
    live.release()


def test_a_holder_with_no_launcher_or_on_another_host_is_not_taken_for_ending():
    assert not Holder(job="a", launcher=0).ending()
    assert not Holder(job="a", launcher=_ended_pid(), host="another-host").ending()
    assert Holder(job="a", launcher=_ended_pid()).ending()
    assert not Holder(job="a", launcher=os.getpid()).ending()
