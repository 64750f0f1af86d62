"""Faults the pipeline must survive: global-tier outages, a full local disk, corrupt files, S3 going away.

Most checks drive the real Checkpointer and Restorer in-process (one rank,
SoloComm, real directory and S3 tiers), where a fault can be placed exactly;
a few run the CLI end to end to prove the ``failures:``/``drain``/``checkpoint``
config reaches the ranks and results.json. The bad-input table at the end
covers the fault and retry keys and the environment (endpoints, credentials,
disks) beyond tests/unit/config/test_config.py.
"""
from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import pytest
import torch
from crashcheck import partials, state_from_lineage, step_dirs, verify_dir_tier
from rundesign import rank_state
from s3server import aws_env  # noqa: F401 - a pytest fixture

from emulator.checkpoint.checkpointer import CheckpointFailed
from emulator.checkpoint.drainer import DEFAULT_VERIFY
from emulator.checkpoint.injection import damage
from emulator.checkpoint.layout import manifest_key, step_dir
from emulator.checkpoint.restore import Restorer
from emulator.checkpoint.retry import RetryPolicy
from emulator.checkpoint.tally import Tally
from emulator.config import DrainConfig, load_config
from emulator.rank.comm import SoloComm
from tiers.base import TierWrapper
from tiers.directory import DirTier
from tiers.emulated import EmulatedTier
from tiers.faulty import FaultyTier, TransientFault
from faulting import MIB, Run, _can_mount_tmpfs, _closed_port, _key, _one_line_exit_2, cfg, meta, tmpfs  # noqa: F401 - helpers and fixtures shared with tests/system/


def dirs(tmp_path):
    return DirTier(tmp_path / "local"), DirTier(tmp_path / "global")


# --------------------------------------------------------------------------- global-tier outages

class Flaky(FaultyTier):
    """Fails the next ``n`` requests, whenever they come (a time window would race with a slow disk)."""

    def __init__(self, inner, n: int):
        super().__init__(inner)
        self.left = n

    def request_error(self, what):
        if self.left > 0:
            self.left -= 1
            return TransientFault(f"flaky: {what}: 503 Service Unavailable")
        return None


def test_transient_errors_are_retried_and_the_checkpoint_completes(cfg, tmp_path):
    local, glob = dirs(tmp_path)
    flaky = Flaky(glob, 3)  # two drain attempts and one manifest attempt fail
    run = Run(cfg, local, flaky, policy=RetryPolicy(retries=3, backoff_s=0.02))
    rec = run.to(2)
    run.close()
    assert rec.global_complete and not rec.error and rec.drain_retries >= 1
    assert run.ckpt.tally.counts["drain_retry"] == 3 and flaky.left == 0
    assert verify_dir_tier(tmp_path / "global", cfg, ranks=1) == [2]


def test_abandoned_drain_in_async_mode_is_counted_and_training_goes_on(cfg, tmp_path):
    local, glob = dirs(tmp_path)
    faulty = FaultyTier(glob)
    run = Run(cfg, local, faulty)
    faulty.activate(60)
    run.to(2, "async")
    run.ckpt.finish()  # on_failure=auto: async continues
    first = run.ckpt.records[0]
    assert not first.global_complete and first.abandoned and "abandoned after 3 attempt(s)" in first.error
    assert run.ckpt.tally.counts["drain_abandoned"] == 1
    assert not (tmp_path / "global" / step_dir(2)).exists() and not partials(tmp_path / "global")
    assert verify_dir_tier(tmp_path / "local", cfg) == [2]  # the local copy is complete
    faulty.activate(0)  # the outage ends; the next checkpoint drains
    run.to(4, "async")
    run.close()
    assert run.ckpt.records[1].global_complete
    assert verify_dir_tier(tmp_path / "global", cfg, ranks=1) == [4]


def test_sync_failure_stops_the_run_with_one_line(cfg, tmp_path):
    local, glob = dirs(tmp_path)
    faulty = FaultyTier(glob)
    run = Run(cfg, local, faulty)
    faulty.activate(60)
    with pytest.raises(CheckpointFailed) as info:
        run.to(2, "sync")
    run.close()
    msg = str(info.value)
    assert "\n" not in msg and len(msg) < 700
    assert msg.startswith("checkpoint at step 2 (sync) did not reach the global tier: node 0 drain: ")
    assert "injected global tier outage" in msg and "drain.on_failure=auto" in msg
    assert verify_dir_tier(tmp_path / "global") == []


def test_on_failure_continue_keeps_sync_training(cfg, tmp_path):
    local, glob = dirs(tmp_path)
    faulty = FaultyTier(glob)
    run = Run(cfg, local, faulty, on_failure="continue")
    faulty.activate(60)
    rec = run.to(2, "sync")
    run.close()
    assert not rec.global_complete and rec.local_complete


def test_slow_global_tier_delays_each_request(tmp_path):
    faulty = FaultyTier(DirTier(tmp_path), kind="slow", delay_s=0.2)
    faulty.activate(5)
    t = time.perf_counter()
    asyncio.run(faulty.put("a/b", b"x"))
    assert time.perf_counter() - t >= 0.2
    assert asyncio.run(faulty.get("a/b")) == b"x"


# --------------------------------------------------------------------------- a full local tier

@pytest.mark.parametrize("policy", ["global", "skip"])
def test_local_tier_full(cfg, tmp_path, policy):
    """ENOSPC (emulated capacity: 3 MiB, the file is ~7 MiB): straight to global, or skipped."""
    local = EmulatedTier(DirTier(tmp_path / "local"), capacity_bytes=3 * MIB)
    run = Run(cfg, local, DirTier(tmp_path / "global"), on_local_full=policy)
    rec = run.to(2, "sync")  # a skip is not a failure: sync mode goes on
    run.close()
    assert rec.local_full and run.ckpt.tally.counts["local_full"] == 1
    assert step_dirs(tmp_path / "local") == [] and not partials(tmp_path / "local")
    if policy == "global":
        assert rec.written_to == "global" and rec.global_complete and not rec.skipped
        assert verify_dir_tier(tmp_path / "global", cfg, ranks=1) == [2]
    else:
        assert rec.skipped and not rec.global_complete and "ENOSPC" in rec.error
        assert step_dirs(tmp_path / "global") == []


# --------------------------------------------------------------------------- resume

def test_resume_drains_checkpoints_complete_only_locally(cfg, tmp_path):
    local, glob = dirs(tmp_path)
    faulty = FaultyTier(glob)
    run = Run(cfg, local, faulty, on_failure="continue")
    faulty.activate(60)
    run.to(2)
    run.to(4)
    run.close()
    assert verify_dir_tier(tmp_path / "global") == [] and verify_dir_tier(tmp_path / "local") == [2, 4]
    other = Run(load_config("llama3-8b", ["parallelism.ranks=1", "run.scale=0.001"]), local, glob)
    assert other.ckpt.resume() == []  # another layout's checkpoints are not drained
    other.close()
    again = Run(cfg, local, glob)
    resumed = again.ckpt.resume()
    again.close()
    assert [(r.step, r.mode, r.global_complete) for r in resumed] == [(2, "resume", True), (4, "resume", True)]
    assert verify_dir_tier(tmp_path / "global", cfg, ranks=1) == [2, 4]
    again = Run(cfg, local, glob)
    assert again.ckpt.resume() == []  # nothing left to do
    again.close()


# --------------------------------------------------------------------------- a drained copy whose bytes differ

class FlipsEachUpload(TierWrapper):
    """A global tier that stores every uploaded rank file with one byte flipped: same size, wrong bytes."""

    def __init__(self, inner):
        super().__init__(inner)
        self.flipped = 0

    async def put_file(self, key, src):
        await super().put_file(key, src)
        if key.endswith(".pt"):
            await asyncio.to_thread(damage, self.inner, key, "flip")
            self.flipped += 1


def test_default_drain_verification_rejects_a_copy_of_the_right_size_with_wrong_bytes(cfg, tmp_path):
    local, glob = dirs(tmp_path)
    flipping = FlipsEachUpload(glob)
    run = Run(cfg, local, flipping, drain_verify=cfg.drain.verify, on_failure="continue")
    rec = run.to(2, "sync")
    run.close()
    assert cfg.drain.verify == DrainConfig().verify == DEFAULT_VERIFY  # the default, as a run gets it
    assert not rec.global_complete and rec.local_complete, rec.error
    assert "checksum" in rec.error and flipping.flipped == 3  # every attempt (retries=2) was checked
    assert run.ckpt.tally.counts["drain_abandoned"] == 1
    assert not (tmp_path / "global" / manifest_key(2)).exists()


def test_size_verification_is_what_it_says_it_does_not_read_the_bytes(cfg, tmp_path):
    """``drain.verify: size``, the cheaper option, counts the same damaged copy complete."""
    local, glob = dirs(tmp_path)
    run = Run(cfg, local, FlipsEachUpload(glob), drain_verify="size")
    rec = run.to(2, "sync")
    run.close()
    assert rec.global_complete and (tmp_path / "global" / manifest_key(2)).exists()


# --------------------------------------------------------------------------- restore never loads a bad checkpoint

@pytest.fixture(scope="module")
def pristine(cfg, tmp_path_factory):
    """Checkpoints 2 and 4, complete and identical on both tiers."""
    root = tmp_path_factory.mktemp("pristine")
    run = Run(cfg, *dirs(root))
    run.to(2)
    run.to(4)
    run.close()
    return root


def _garble_manifest(root: Path, tier: str, step: int):
    path = root / tier / manifest_key(step)
    raw = bytearray(path.read_bytes())
    i = raw.index(b'"size"') + 9  # a digit of the file's size: still valid JSON, wrong content
    raw[i] = ord("1") if raw[i] != ord("1") else ord("2")
    path.write_bytes(bytes(raw))


SCENARIOS = {
    # name: (damage per (tier, step), step restored, tier that serves it, mismatches counted)
    "flip-local": ({("local", 4): "flip"}, 4, "global", 1),
    "flip-both": ({("local", 4): "flip", ("global", 4): "flip"}, 2, "local", 2),
    "truncated-and-missing": ({("local", 4): "truncate", ("global", 4): "delete"}, 2, "local", 1),
    "garbled-manifest": ({("local", 4): "manifest", ("global", 4): "flip"}, 2, "local", 1),
    "everything-bad": ({("local", 4): "delete", ("global", 4): "truncate", ("local", 2): "flip",
                        ("global", 2): "manifest"}, -1, "", 2),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_restore_verifies_and_falls_back(cfg, pristine, tmp_path, name):
    damages, want_step, want_tier, mismatches = SCENARIOS[name]
    root = tmp_path / "tiers"
    shutil.copytree(pristine, root)
    tiers = {"local": DirTier(root / "local"), "global": DirTier(root / "global")}
    for (tier, step), how in damages.items():
        if how == "manifest":
            _garble_manifest(root, tier, step)
        else:
            damage(tiers[tier], _key(pristine, tier, step), how)
    state = rank_state(cfg, 0)
    before = {k: t.clone().view(-1).view(torch.uint8) for k, t in state.live["optimizer"].items()}
    tally = Tally()
    restorer = Restorer(state, list(tiers.items()), SoloComm(),
                        meta=meta(cfg), tally=tally)
    rec = restorer.load()
    assert (rec.step, rec.tier) == (want_step, want_tier), rec.fallbacks
    assert tally.counts["checksum_mismatch"] == mismatches, rec.fallbacks
    if want_step < 0:  # nothing loadable: the live state was never touched
        assert not rec.ok
        assert all(t.view(-1).view(torch.uint8).equal(before[k]) for k, t in state.live["optimizer"].items())
        return
    want = state_from_lineage(cfg, 0, [[1, want_step]])
    for group, tensors in want.live.items():
        for k, t in tensors.items():
            got = state.live[group][k].view(-1).view(torch.uint8)
            assert got.equal(t.view(-1).view(torch.uint8)), f"{group}.{k}"


# --------------------------------------------------------------------------- S3 going away mid-drain


# --------------------------------------------------------------------------- end to end through the CLI


# --------------------------------------------------------------------------- bad input: one line, exit 2

BAD = [
    # (file content or None, extra CLI args, expected fragment); the default preset has 8 ranks
    ("failures: {kill: [{rank: 9, checkpoint: 1, phase: drain}]}\n", [],
     "failures.kill[0].rank: rank 9 does not exist (the run has 8 ranks)"),
    ("failures: {kill: [{phase: fsync}]}\n", [],
     "failures.kill[0].phase: unknown phase 'fsync' (use staging, local_write, drain, manifest)"),
    ("failures: {kill: [{checkpoint: 0}]}\n", [], "failures.kill[0].checkpoint: must be >= 1"),
    ("failures: {kill: [{attempt: -1}]}\n", [], "failures.kill[0].attempt: must be >= 0"),
    ("failures: {kill: [3]}\n", [], "failures.kill[0]: expected a mapping (rank, checkpoint, phase), got 3"),
    ("failures: {kill: {rank: 1}}\n", [], "failures.kill: expected a list"),
    ("failures: {kill: [{rank: 1, signal: 9}]}\n", [], "failures.kill[0].signal: unknown key"),
    ("failures: {kill: [{phase: drain}]}\ntiers: {local: null}\n", [],
     "failures.kill[0].phase: 'drain' needs tiers.local"),
    ("failures: {global_fault: {seconds: 0}}\n", [], "failures.global_fault.seconds: must be in (0, 86400]"),
    ("failures: {global_fault: {kind: flaky}}\n", [], "failures.global_fault.kind: must be 'error' or 'slow'"),
    ("failures: {global_fault: {delay_s: -1}}\n", [], "failures.global_fault.delay_s: must be between 0 and 600"),
    ("failures: {corrupt: {how: melt}}\n", [], "failures.corrupt.how: must be flip, truncate or delete"),
    ("failures: {corrupt: {tier: local}}\ntiers: {local: null}\n", [],
     "failures.corrupt.tier: 'local' but tiers.local is not configured"),
    ("failures: {corrupt: {rank: 8}}\n", [], "failures.corrupt.rank: rank 8 does not exist (the run has 8 ranks)"),
    ("failures: {corrupt: {tier: nvme}}\n", [], "failures.corrupt.tier: must be 'local' or 'global'"),
    ("failures: {lose_local_node: -1}\n", [], "failures.lose_local_node: must be >= 0"),
    ("failures: [kill]\n", [], "failures: expected a mapping, got list"),
    ("drain: {retries: -1}\n", [], "drain.retries: must be between 0 and 100"),
    ("drain: {retries: three}\n", [], "drain.retries: expected an integer, got 'three'"),
    ("drain: {retry_backoff_s: -0.5}\n", [], "drain.retry_backoff_s: must be between 0 and 600 seconds"),
    ("drain: {on_failure: ignore}\n", [], "drain.on_failure: must be auto, continue or fail"),
    ("checkpoint: {on_local_full: disk}\n", [], "checkpoint.on_local_full: must be 'global' or 'skip'"),
    ("extends: ./missing-base.yaml\n", [], "config file not found: ./missing-base.yaml"),
    (None, ["--lose-local-after", "0"], "failures.lose_local_after: must be >= 1"),
    (None, ["--set", "failures.kill=[{rank: 1, checkpoint: 2, phase: snapshot}]"],
     "failures.kill[0].phase: unknown phase 'snapshot'"),
    (None, ["--kill", "1:x:drain"], "argument --kill: '1:x:drain': use RANK:CHECKPOINT:PHASE[:ATTEMPT]"),
    (None, ["--kill", "8:1:drain"], "failures.kill[0].rank: rank 8 does not exist (the run has 8 ranks)"),
]


@pytest.mark.parametrize("content,args,message", BAD)
def test_bad_fault_config(tmp_path, capsys, content, args, message, monkeypatch):
    monkeypatch.chdir(tmp_path)
    src = []
    if content is not None:
        (tmp_path / "bad.yaml").write_text(content)
        src = [str(tmp_path / "bad.yaml")]
    _one_line_exit_2(capsys, ["run", *src, "--out", str(tmp_path / "out"), "--quiet", *args],
                     tmp_path / "out", message)


def test_unreachable_s3_endpoint(tmp_path, capsys, aws_env):
    port = _closed_port()
    line = _one_line_exit_2(capsys, [
        "run", "--quiet", "--out", str(tmp_path / "out"), "--set", "tiers.global.backend=s3",
        "--set", "tiers.global.bucket=ckpt", "--set", f"tiers.global.endpoint_url=http://127.0.0.1:{port}"],
        tmp_path / "out", f"tiers.global: s3 tier s3://ckpt/ at 127.0.0.1:{port}: cannot reach endpoint")
    assert line.endswith("connection refused")


def test_local_path_is_a_file(tmp_path, capsys):
    blocker = tmp_path / "nvme"
    blocker.write_text("a file where the local tier should be")
    _one_line_exit_2(capsys, ["run", "--quiet", "--out", str(tmp_path / "out"),
                              "--set", f"tiers.local.path={blocker}/node{{node}}",
                              "--set", f"tiers.global.path={tmp_path}/g"],
                     tmp_path / "out", f"tiers.local: cannot create directory tier at {blocker}/node0")


def test_read_only_local_filesystem(tmp_path, capsys, tmpfs):
    ro = tmpfs("ro", "1m", ",ro,mode=755")  # a tmpfs root is 1777 unless told: refused for that
    if ro is None:
        pytest.skip("mounting a tmpfs is not permitted here")
    _one_line_exit_2(capsys, ["run", "--quiet", "--out", str(tmp_path / "out"),
                              "--set", f"tiers.local.path={ro}", "--set", f"tiers.global.path={tmp_path}/g"],
                     tmp_path / "out", f"tiers.local: directory tier {ro} is not writable")


def test_tiny_local_filesystem(tmp_path, capsys, tmpfs):
    tiny = tmpfs("tiny", "8m")
    if tiny is None:
        pytest.skip("mounting a tmpfs is not permitted here")
    line = _one_line_exit_2(capsys, ["run", "--quiet", "--out", str(tmp_path / "out"),
                                     "--set", f"tiers.local.path={tiny}/node{{node}}",
                                     "--set", f"tiers.global.path={tmp_path}/g"],
                            tmp_path / "out", f"tiers.local: {tiny}/node0 has 0.01 GiB free, needs about")
    assert "(2 kept + 1 in flight)" in line
