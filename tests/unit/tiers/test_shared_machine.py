"""Safe on a shared machine (issue 37): a second user's planted names never turn a write, read or
delete of the tool's elsewhere, and clean-up touches only the tool's own names.

Every test plants as uid 65534 (``planting.py``) and checks the root-only victims beside the
tool's folders byte for byte afterwards. In-process: no run is started here
(``test_shared_machine_e2e.py`` starts real runs).
"""
from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from planting import machine, plant_fifo, plant_folder, plant_link, snapshot  # noqa: F401 - a fixture

from tiers.base import TierError
from tiers.directory import POOL_DIR, DirTier
from tiers.locking import OWNER, USERS, Holder, claim_dir, join_dir


def _sticky_folder(parent: Path, name: str) -> Path:
    """A folder of root's that others may add names to, as /dev/shm itself."""
    folder = parent / name
    folder.mkdir()
    os.chmod(folder, 0o1777)
    return folder


def _closed(folder: Path) -> None:
    """Names were planted while ``folder`` was open to others; it is the user's own again (a folder
    others can write is refused outright, sticky or not): what was planted must still be refused."""
    os.chmod(folder, 0o755)


def write(tier, key: str, data: bytes) -> None:
    with tier.open_write(key) as sink:
        sink.write(data)


# --------------------------------------------------------------------------- 1: lock files

@pytest.mark.parametrize("name", [OWNER, USERS])
def test_a_lock_file_planted_as_a_link_is_refused_and_its_target_untouched(machine, name):
    shared, victims = machine
    folder = _sticky_folder(shared, "tier")
    plant_link(folder / name, victims / "secret")
    _closed(folder)
    before = snapshot(victims)
    with pytest.raises(TierError, match="is a link; refused"):
        claim_dir(folder, Holder(job="x"), what="dir tier")
    assert snapshot(victims) == before


def test_joining_through_a_planted_users_link_is_refused(machine):
    shared, victims = machine
    folder = _sticky_folder(shared, "tier")
    plant_link(folder / USERS, victims / "secret")
    _closed(folder)
    before = snapshot(victims)
    with pytest.raises(TierError, match="is a link; refused"):
        join_dir(folder, what="dir tier")
    assert snapshot(victims) == before


def test_a_folder_another_user_made_first_is_refused_naming_it(machine):
    shared, victims = machine
    plant_folder(shared / "ckpt-emu-data")
    with pytest.raises(TierError, match=r"ckpt-emu-data belongs to another user \(uid 65534\)"):
        DirTier(shared / "ckpt-emu-data" / "pfs")
    assert not (shared / "ckpt-emu-data" / "pfs").exists()


def test_a_folder_others_can_write_without_the_sticky_bit_is_refused(tmp_path):
    folder = tmp_path / "open"
    folder.mkdir()
    os.chmod(folder, 0o777)
    with pytest.raises(TierError, match=r"writable by other users without the sticky bit \(mode 777\)"):
        DirTier(folder)


def test_a_link_another_user_owns_on_the_way_is_never_followed(machine):
    shared, victims = machine
    plant_link(shared / "ckpt", victims)
    with pytest.raises(TierError, match="ckpt is a link owned by another user"):
        DirTier(shared / "ckpt" / "nvme")
    assert not (victims / "nvme").exists()


# --------------------------------------------------------------------------- 2: the recycling pool

def test_a_pooled_file_planted_as_a_link_is_never_written_through(machine):
    shared, victims = machine
    tier = DirTier(_sticky_folder(shared, "mem") / "node0", recycle=True, pool_files=4)
    os.chmod(tier.root, 0o1777)  # a tier folder others may add names to (the sticky bit allows it)
    pool = tier.root / POOL_DIR
    write(tier, "step_00000001/a.pt", b"x" * 4096)
    asyncio.run(tier.delete("step_00000001/a.pt"))  # makes the pool folder
    os.chmod(pool, 0o1777)
    plant_link(pool / ("0" * 32 + ".pool"), victims / "secret")
    for f in [p for p in pool.iterdir() if not p.is_symlink()]:
        f.unlink()  # only the planted name is left to take
    before = snapshot(victims)
    write(tier, "step_00000002/a.pt", b"checkpoint bytes" * 1000)
    assert snapshot(victims) == before
    assert (tier.root / "step_00000002" / "a.pt").read_bytes() == b"checkpoint bytes" * 1000


def test_a_pool_folder_planted_as_a_link_is_not_used(machine):
    shared, victims = machine
    tier = DirTier(_sticky_folder(shared, "mem") / "node0", recycle=True, pool_files=4)
    os.chmod(tier.root, 0o1777)
    plant_link(tier.root / POOL_DIR, victims / "tree")
    write(tier, "step_00000001/a.pt", b"y" * 8192)
    before = snapshot(victims)
    asyncio.run(tier.delete("step_00000001/a.pt"))  # not moved into the link's target
    assert snapshot(victims) == before
    write(tier, "step_00000002/a.pt", b"z" * 8192)
    asyncio.run(tier.recover_after_crash())
    assert snapshot(victims) == before


# --------------------------------------------------------------------------- 4: crash clean-up

def test_crash_clean_up_touches_only_the_tools_own_names(tmp_path):
    """Pointed at a project folder (``allow_foreign``), recovery removes its own partials and empty
    step folders, and nothing else: not an empty mount point, not a user's partial download."""
    root = tmp_path / "project"
    (root / "mnt" / "empty-mount-point").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "data" / ".model.bin.0123456789ab.partial").write_text("a user's partial download")
    (root / ".notes.partial").write_text("mine")
    (root / "step_00000007").mkdir()  # a crashed run's empty step folder
    (root / "step_00000008").mkdir()
    (root / "step_00000008" / ".rank0.pt.0123456789ab.partial").write_bytes(b"torn")
    tier = DirTier(root)
    before = snapshot(root / "mnt") | snapshot(root / "data")
    note = asyncio.run(tier.recover_after_crash())
    assert snapshot(root / "mnt") | snapshot(root / "data") == before
    assert (root / ".notes.partial").exists()
    assert not (root / "step_00000007").exists() and not (root / "step_00000008").exists()
    assert note == "removed 1 partial file(s), 2 empty folder(s)"


def test_retention_never_deletes_through_a_step_folder_planted_as_a_link(machine):
    from emulator.checkpoint.layout import delete_checkpoint
    shared, victims = machine
    tier = DirTier(_sticky_folder(shared, "pfs") / "t")
    os.chmod(tier.root, 0o1777)
    plant_link(tier.root / "step_00000003", victims / "tree" / "deep")
    before = snapshot(victims)
    asyncio.run(delete_checkpoint(tier, 3))
    asyncio.run(tier.recover_after_crash())
    assert asyncio.run(tier.list()) == []
    assert snapshot(victims) == before


# --------------------------------------------------------------------------- 7: step folders

def test_a_step_folder_planted_as_a_link_is_refused_not_written_through(machine):
    shared, victims = machine
    tier = DirTier(_sticky_folder(shared, "nvme") / "node0")
    os.chmod(tier.root, 0o1777)
    plant_link(tier.root / "step_00000010", victims / "tree")
    before = snapshot(victims)
    with pytest.raises(TierError, match="step_00000010 is a link; refused"):
        write(tier, "step_00000010/rank0.pt", b"ckpt")
    with pytest.raises(TierError, match="step_00000010 is a link; refused"):
        asyncio.run(tier.put("step_00000010/manifest.json", b"{}"))
    assert snapshot(victims) == before


def test_a_step_folder_another_user_made_is_refused_not_written_into(machine):
    """A step folder another user made first in a tier others may add names to (sticky, as
    /dev/shm): the write is refused, naming its owner, and nothing of the tool's lands in it. Root
    may write into any folder, so only the ownership check stands between them (it survived every
    test when removed from ``Folder.subfolder``)."""
    shared, _ = machine
    tier = DirTier(_sticky_folder(shared, "nvme") / "node0")
    os.chmod(tier.root, 0o1777)
    plant_folder(tier.root / "step_00000011", 0o755)
    with pytest.raises(TierError, match=r"step_00000011 belongs to another user \(uid 65534\)"):
        write(tier, "step_00000011/rank0.pt", b"ckpt")
    with pytest.raises(TierError, match="belongs to another user"):
        asyncio.run(tier.put("step_00000011/manifest.json", b"{}"))
    assert os.listdir(tier.root / "step_00000011") == []


# --------------------------------------------------------------------------- 6: typed reads

def test_reading_a_fifo_planted_in_a_tier_fails_at_once(machine):
    shared, _ = machine
    tier = DirTier(_sticky_folder(shared, "pfs") / "t")
    os.chmod(tier.root, 0o1777)
    asyncio.run(tier.put("step_00000001/manifest.json", b"{}"))
    os.chmod(tier.root / "step_00000001", 0o1777)
    plant_fifo(tier.root / "step_00000001" / "rank0.pt")
    with pytest.raises(TierError, match="not a regular file"):
        tier.open_read("step_00000001/rank0.pt")
    with pytest.raises(TierError, match="not a regular file"):
        asyncio.run(tier.get("step_00000001/rank0.pt"))


# --------------------------------------------------------------------------- 8: the folder is the claim

@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_claimed_tier_whose_folder_goes_is_never_made_again_and_the_claim_says_so(tmp_path, how):
    import shutil
    import threading
    tier = DirTier(tmp_path / "nvme" / "node0")
    write(tier, "step_00000001/a.pt", b"1")
    claim = tier.claim(Holder(job="first"))
    lost = threading.Event()
    lines = []
    claim.on_lost = lambda line: (lines.append(line), lost.set())
    claim.watch(interval_s=0.05)
    shutil.rmtree(tier.root)
    if how == "replaced":
        tier.root.mkdir()  # e.g. a second run that made it again: another folder
    assert lost.wait(10), "the claim did not notice"
    assert f"dir tier {tier.root} was" in lines[0] and "during the run" in lines[0]
    with pytest.raises(TierError, match="during the run; it is never made again"):
        write(tier, "step_00000002/a.pt", b"2")
    with pytest.raises(TierError, match="during the run"):
        asyncio.run(tier.put("step_00000002/manifest.json", b"{}"))
    assert os.path.exists(tier.root) == (how == "replaced")
    assert not (tier.root / "step_00000002").exists()
    claim.release()


# --------------------------------------------------------------------------- 3: the results folder

@pytest.mark.parametrize("name", [".spool", ".shared", ".records", ".metrics"])
def test_a_working_folder_planted_as_a_link_in_the_results_folder_is_refused(machine, name):
    from emulator.errors import UserError
    from emulator.launch.launcher import prepare_out
    shared, victims = machine
    out = _sticky_folder(shared, "results")  # as --out /tmp: others may add names to it
    (victims / "tree" / "node0").mkdir()
    plant_link(out / name, victims / "tree")
    _closed(out)
    before = snapshot(victims)
    with pytest.raises(UserError, match=f"{name} is a link; refused"):
        prepare_out(out, {"run": {}}, {})
    assert snapshot(victims) == before and not (out / "config.json").exists()


def test_the_spool_and_metrics_folders_are_emptied_without_following_a_link(machine):
    from emulator.metrics import prepare_multiprocess_dir
    from tiers.safepath import fresh_folder
    shared, victims = machine
    out = _sticky_folder(shared, "results")
    (victims / "tree" / "node0").mkdir()
    for name in (".spool", ".metrics"):
        plant_link(out / name, victims / "tree")
    _closed(out)
    before = snapshot(victims)
    with pytest.raises(TierError, match=r"\.spool is a link"):
        fresh_folder(out / ".spool" / "node0")  # what each node's leader does at start
    with pytest.raises(TierError, match=r"\.metrics is a link"):
        prepare_multiprocess_dir(out / ".metrics" / "node0")
    assert snapshot(victims) == before


@pytest.mark.parametrize("name", ["results.json", "report.txt", "torchrun.log", "status.json", "stop"])
def test_an_output_planted_as_a_link_is_refused_before_the_run(machine, name):
    from emulator.errors import UserError
    from emulator.launch.launcher import prepare_out
    shared, victims = machine
    out = _sticky_folder(shared, "results")
    plant_link(out / name, victims / "secret")
    _closed(out)
    before = snapshot(victims)
    with pytest.raises(UserError, match=f"{name} is not a file this tool made"):
        prepare_out(out, {"run": {}}, {})
    assert snapshot(victims) == before


def test_reports_replace_a_planted_link_instead_of_writing_through_it(machine):
    from tiers.safepath import write_file
    shared, victims = machine
    out = _sticky_folder(shared, "results")
    plant_link(out / "results.json", victims / "secret")
    before = snapshot(victims)
    write_file(out / "results.json", "{}")
    assert snapshot(victims) == before and (out / "results.json").read_text() == "{}"


# --------------------------------------------------------------------------- the default locations

@pytest.mark.parametrize("moved", [None, "/dev/shm/ckpt-emu-elsewhere"])
def test_the_default_tiers_live_in_a_folder_of_the_users_own(monkeypatch, moved):
    """In /dev/shm/ckpt-emu-<uid>, or where CKPT_EMU_TIERS_DIR says (a test suite's own folder)."""
    from emulator.config import load_config
    from tiers.directory import TIERS_DIR_ENV
    if moved is None:
        monkeypatch.delenv(TIERS_DIR_ENV, raising=False)
    else:
        monkeypatch.setenv(TIERS_DIR_ENV, moved)
    mine = (moved or f"/dev/shm/ckpt-emu-{os.geteuid()}") + "/"
    cfg = load_config(None)
    for tier in (cfg.tiers.local, cfg.tiers.global_):
        assert tier.options.for_node(0).startswith(mine), tier.options.path
    for preset in ("design-memory-peer-pfs", "design-memory-nvme-s3"):
        assert load_config(preset).tiers.memory.options.for_node(0).startswith(mine)


def test_a_per_user_folder_another_user_made_first_refuses_the_run_before_anything_is_written(
        machine, tmp_path, monkeypatch, capsys):
    from emulator.cli import main
    shared, victims = machine
    plant_folder(shared / f"ckpt-emu-{os.geteuid()}")
    plant_link(shared / f"ckpt-emu-{os.geteuid()}" / "nvme", victims / "tree")
    monkeypatch.chdir(tmp_path)
    before = snapshot(victims) | snapshot(shared)
    rc = main(["run", "--quiet", "--set", f"tiers.local.path={shared}/ckpt-emu-{{uid}}/nvme/node{{node}}",
               "--set", f"tiers.global.path={shared}/ckpt-emu-{{uid}}/pfs"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert err[0].startswith("ckpt-emu: error: tiers.local: dir tier") and "belongs to another user (uid 65534)" in err[0]
    assert snapshot(victims) | snapshot(shared) == before and list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- 6: bounded, typed reads

def _saved_step(tmp_path):
    """One rank's complete checkpoint of step 2 on a local and a global tier, and its file's key."""
    from emulator.checkpoint import layout
    from emulator.checkpoint.checkpointer import Checkpointer
    from emulator.config import load_config
    from emulator.rank.comm import SoloComm
    from rundesign import rank_state
    cfg = load_config("llama3-8b", ["run.scale=0.0002", "parallelism.ranks=1"])
    state = rank_state(cfg, 0)
    local, glob = DirTier(tmp_path / "local"), DirTier(tmp_path / "global")
    rec = Checkpointer(state, local, glob, SoloComm(), keep=2).checkpoint(2, "sync")
    assert rec.local_complete and rec.global_complete, rec.error
    return state, local, glob, layout.rank_file_key(2, 0, state.coords.dp, 0)


def _load_within(restorer, seconds: float):
    import threading
    done = []
    thread = threading.Thread(target=lambda: done.append(restorer.load()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert done, f"the restore was still reading after {seconds} s"
    return done[0]


@pytest.mark.parametrize("plant", ["dev-zero-link", "fifo"])
def test_a_restore_never_waits_on_a_file_that_is_not_regular(tmp_path, plant):
    """6: a manifest's entry pointing at /dev/zero (through a link) or at a FIFO is refused at
    once, and the restore falls back to the global tier."""
    from emulator.checkpoint.restore import Restorer
    from emulator.rank.comm import SoloComm
    state, local, glob, key = _saved_step(tmp_path)
    path = local.root / key
    path.unlink()
    os.symlink("/dev/zero", path) if plant == "dev-zero-link" else os.mkfifo(path)
    rec = _load_within(Restorer(state, [("local", local), ("global", glob)], SoloComm()), 60)
    assert rec.ok and rec.tier == "global" and rec.step == 2, rec
    assert any("local@2: unreadable" in f for f in rec.fallbacks), rec.fallbacks


class CountingReader:
    """A tier's reader that counts the reads made through it."""

    def __init__(self, fh):
        self.fh, self.reads = fh, 0

    def read(self, n=-1):
        self.reads += 1
        return self.fh.read(n)

    def readinto(self, buf):
        self.reads += 1
        return self.fh.readinto(buf)

    def __getattr__(self, name):
        return getattr(self.fh, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.fh.close()


def test_a_restore_compares_the_size_before_reading_and_reads_no_more_than_the_manifest_says(tmp_path):
    from emulator.checkpoint.restore import Restorer
    from emulator.rank.comm import SoloComm
    state, local, glob, key = _saved_step(tmp_path)
    with open(local.root / key, "ab") as fh:
        fh.write(b"\0" * 4096)  # longer than its manifest says
    readers = []
    real = local.open_read
    local.open_read = lambda k: readers.append(CountingReader(real(k))) or readers[-1]
    rec = Restorer(state, [("local", local), ("global", glob)], SoloComm()).load()
    assert rec.ok and rec.tier == "global"
    assert any("local@2: size" in f and "!= manifest" in f for f in rec.fallbacks), rec.fallbacks
    assert readers and all(r.reads == 0 for r in readers)  # refused on its size alone


def test_a_bounded_reader_stops_at_its_limit_and_gives_up_after_its_time():
    import io
    from emulator.checkpoint.integrity import BoundedReader, crc_of_stream

    class Endless(io.RawIOBase):
        def readinto(self, buf):
            buf[:] = b"\0" * len(buf)
            return len(buf)
    body = BoundedReader(Endless(), 10 << 20)
    assert crc_of_stream(body)[1] == 10 << 20 and body.longer()
    now = [0.0]
    slow = BoundedReader(Endless(), 1 << 30, timeout_s=5, what="step_00000002/x.pt", clock=lambda: now[0])
    slow.read(1 << 20)
    now[0] = 6.0
    with pytest.raises(TimeoutError, match=r"read of step_00000002/x.pt gave up after 5 s \(checkpoint.read_timeout_s\)"):
        slow.read(1 << 20)


def test_the_drains_read_back_reads_no_more_than_the_file_it_copied(tmp_path):
    from emulator.checkpoint.drainer import Drainer
    from emulator.checkpoint.layout import FileEntry
    glob = DirTier(tmp_path / "global")
    path = tmp_path / "global" / "step_00000001"
    path.mkdir()
    (path / "a.pt").symlink_to("/dev/zero")
    drainer = Drainer(DirTier(tmp_path / "local"), glob)
    with pytest.raises(TierError, match="is a link; refused"):
        drainer._read_back(FileEntry("step_00000001/a.pt", 0, 1 << 20, "0"))
    (path / "a.pt").unlink()
    (path / "a.pt").write_bytes(b"x" * 3000)
    assert drainer._read_back(FileEntry("step_00000001/a.pt", 0, 1000, "0")) == ("", 3000)  # before reading


# --------------------------------------------------------------------------- 9: steps of any width

def test_steps_past_eight_digits_are_listed_kept_and_deleted_like_any_other(tmp_path):
    from emulator.checkpoint import layout
    tier = DirTier(tmp_path / "t")
    for step in (99999999, 100000000, 100000001):
        m = layout.Manifest(step=step, files=[])
        asyncio.run(tier.put(layout.rank_file_key(step, 0, 0, 0), b"x"))
        asyncio.run(layout.write_manifest(tier, m))
    asyncio.run(tier.put("step_5/junk", b"not a step's canonical folder"))
    assert layout.step_dir(100000000) == "step_100000000"
    assert asyncio.run(layout.list_steps(tier)) == ([99999999, 100000000, 100000001],) * 2
    assert asyncio.run(layout.apply_retention(tier, 2)) == [99999999]
    assert asyncio.run(layout.valid_steps(tier))[0] == [100000000, 100000001]


def test_a_run_whose_load_failed_is_a_failed_run(tmp_path, monkeypatch, capsys):
    """9: the report says so, and the exit status: 1 (the design missed; without --fail-on-miss too)."""
    import json
    import emulator.launch.runner as runner
    from emulator.cli import main

    def fake_run(cfg, **kwargs):
        out = Path(cfg.run.out)
        out.mkdir(parents=True)
        (out / "report.txt").write_text("loads: 1 ...\n  LOAD FAILED: no checkpoint is loadable on every rank\n")
        (out / "results.json").write_text(json.dumps({"load": {
            "loads": 1, "ok": False, "errors": ["no checkpoint is loadable on every rank (0 candidate step(s) tried)"]}}))
        return out
    monkeypatch.setattr(runner, "execute_run", fake_run)
    rc = main(["run", "--quiet", "--out", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert rc == 1 and "LOAD FAILED" in captured.out
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ckpt-emu: the design missed its goals: a load failed: no checkpoint"), err


# --------------------------------------------------------------------------- 12: the page cache

from pagecache import _cached_file, cached_fraction  # noqa: E402 - shared with tests/system/


def test_by_default_a_load_drops_only_the_checkpoint_files_pages(tmp_path):
    """12: before, every load synced and dropped the whole host's page cache (as root)."""
    from emulator.checkpoint.restore import drop_cached_pages
    from emulator.config import load_config
    tier = DirTier(tmp_path / "tier")
    write(tier, "step_00000001/rank0.pt", os.urandom(8 << 20))
    asyncio.run(tier.put("step_00000001/manifest.json", b"{}"))
    ckpt = tier.root / "step_00000001" / "rank0.pt"
    ckpt.read_bytes()
    bystander = _cached_file(tmp_path / "another-jobs-file")
    assert cached_fraction(bystander) > 0.9 and cached_fraction(ckpt) > 0.9
    scope = load_config(None).checkpoint.page_cache_scope
    assert asyncio.run(drop_cached_pages(scope, [tier]))
    assert cached_fraction(bystander) > 0.9, "another process's cached pages were dropped"
    assert cached_fraction(ckpt) < 0.1, "the checkpoint file's pages are still cached"


def test_the_report_says_which_pages_were_dropped():
    from emulator.results.report import _page_cache_words
    files = _page_cache_words({"page_cache_dropped": True, "page_cache_scope": "files"})
    host = _page_cache_words({"page_cache_dropped": True, "page_cache_scope": "host"})
    assert "checkpoint files' cached pages dropped" in files and "other processes' cache left alone" in files
    assert "dropped host-wide" in host and "page_cache_scope: host" in host
    assert "NOT dropped" in _page_cache_words({"page_cache_dropped": False, "page_cache_scope": "files"})


# --------------------------------------------------------------------------- 11, 13: why a run failed, in one line

_TORCHRUN_SUMMARY = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
emulator.rank FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-26_07:24:41
  host      : vm
  rank      : 3 (local_rank: 3)
  exitcode  : -9 (pid: 7160)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 7160
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 7159)  (SIGTERM)
"""


def test_a_rank_killed_for_memory_is_named_as_such():
    from emulator.launch.failure import first_error, oom_kills
    lines = ["[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer",
             *_TORCHRUN_SUMMARY.splitlines()]
    assert first_error(lines, oom_killed=True).startswith("rank 3 killed by the kernel for lack of memory")
    # no OOM kill: the signal that ended rank 3 (gloo's closed connection of rank 0 followed from it)
    assert first_error(lines, oom_killed=False).startswith("rank 3 killed by signal SIGKILL (9): not by the run itself")
    assert isinstance(oom_kills(), int)


def test_two_ranks_errors_glued_onto_one_line_are_reported_apart():
    from emulator.launch.failure import first_error, warnings
    glued = "ckpt-emu: error: rank 1: the real reasonckpt-emu: error: rank 0: what followed from it"
    assert first_error([glued]) == "rank 1: the real reason"
    assert warnings(["ckpt-emu: warning: one thingckpt-emu: warning: another"]) == \
        ["ckpt-emu: warning: one thing", "ckpt-emu: warning: another"]


def test_a_socket_gaierror_is_reported_as_what_it_is_not_as_the_peers_connection_closed():
    from emulator.launch.failure import first_error
    lines = ["[rank1]: RuntimeError: [pair.cc:534] Connection closed by peer [127.0.0.1]:45678",
             "[rank0]: Traceback (most recent call last):",
             "[rank0]: socket.gaierror: [Errno -2] Name or service not known"]
    assert first_error(lines) == "rank 0 failed: socket.gaierror: [Errno -2] Name or service not known"


def test_a_rank_writes_an_error_as_one_whole_line_in_one_write(monkeypatch):
    from emulator.errors import say
    writes = []
    monkeypatch.setattr(os, "write", lambda fd, data: writes.append((fd, data)) or len(data))
    say("ckpt-emu: error: rank 3: first part\nsecond part")
    assert writes == [(2, b"ckpt-emu: error: rank 3: first part second part\n")]


# --------------------------------------------------------------------------- 10: YAML aliases

def test_a_small_config_of_aliases_is_refused_before_it_expands(tmp_path):
    """10: 1.2 KB of aliases expanded to over 2 GiB (safe_load shares references; a message's repr
    expanded them again). Refused while parsing, in bounded memory."""
    import tracemalloc
    from emulator.config import load_config
    from emulator.errors import ConfigError
    levels = ["a0: &a0 [" + ", ".join(["x"] * 9) + "]"]
    levels += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(levels) + "\nmodel: *a9\n")  # 9^10 items if expanded
    assert bomb.stat().st_size < 1300
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError, match=r"YAML aliases are not allowed \(\*a0 at line 2\)"):
            load_config(str(bomb))
        assert tracemalloc.get_traced_memory()[1] < 20 << 20
    finally:
        tracemalloc.stop()


def test_retention_deletes_only_the_runs_own_files(machine):
    from emulator.checkpoint.layout import delete_checkpoint
    shared, _ = machine
    tier = DirTier(_sticky_folder(shared, "pfs2") / "t")
    write(tier, "step_00000004/rank0.pt", b"mine")
    for folder in (tier.root, tier.root / "step_00000004"):
        os.chmod(folder, 0o1777)
    from planting import as_other_user
    as_other_user(lambda p: open(p, "w").write("theirs"), str(tier.root / "step_00000004" / "rank1.pt"))
    _closed(tier.root / "step_00000004")
    asyncio.run(delete_checkpoint(tier, 4))
    assert not (tier.root / "step_00000004" / "rank0.pt").exists()
    assert (tier.root / "step_00000004" / "rank1.pt").read_text() == "theirs"


# --------------------------------------------------------------------------- 13: a full results disk

@pytest.fixture
def tiny_disk(tmp_path):
    """A 4 MiB tmpfs (root only; skipped where mounting is not permitted), filled up."""
    import subprocess
    disk = tmp_path / "tiny"
    disk.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)],
                                           capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs is not permitted here")
    try:
        with open(disk / "filler", "wb") as fh:
            try:
                while True:
                    fh.write(b"\0" * (1 << 20))
                    fh.flush()
            except OSError:
                pass
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def test_a_full_results_disk_is_one_line_before_the_run(tiny_disk, tmp_path, capsys):
    from emulator.cli import main
    rc = main(["run", "--quiet", "--out", str(tiny_disk / "out"), "--set", f"tiers.local.path={tmp_path}/l/node{{node}}",
               "--set", f"tiers.global.path={tmp_path}/g"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "MiB free, needs at least 64 MiB" in err[0], err
    assert sorted(p.name for p in tiny_disk.iterdir()) == ["filler"]


def test_a_results_disk_that_fills_as_the_run_starts_is_one_line(tiny_disk):
    from emulator.errors import UserError
    from emulator.launch.launcher import prepare_out
    (tiny_disk / "out").mkdir()
    with pytest.raises(UserError, match=r"cannot write there \(No space left on device\)"):
        prepare_out(tiny_disk / "out", {"run": {"out": "x" * (1 << 20)}}, {})
