"""The scripts run as root: each writes only in a folder it made itself or one of the user's own
that nobody else may write (scripts/private-folder.sh; issue 54, 3: ``rgw-server.sh start DIR``
wrote ceph.conf, the keyring, pid files and logs into a DIR another user made first, through
their links, and the daemons read that ceph.conf as root). Starting a cluster is the system
tier's (tests/system/s3/test_rgw_server_script.py); here the folder checks, ``stop`` and
``gpu-wheels.sh``, which refuse before they touch anything."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from paths import ROOT
from planting import grant_write, machine, plant_folder, plant_link, snapshot  # noqa: F401 - a fixture

SCRIPTS = ROOT / "scripts"


def _folder(kind: str, path: Path, script: str = "check.sh") -> subprocess.CompletedProcess:
    """``private_folder PATH`` (or ``own_folder``) as the script named ``script`` would call it."""
    return subprocess.run(["bash", "-c", f'. "{SCRIPTS}/private-folder.sh"; {kind}_folder "$1"', script, str(path)],
                          capture_output=True, text=True, timeout=60)


def _refused(proc, says: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and proc.stdout == "" and len(lines) == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert lines[0].startswith(("check: ", "rgw-server: ")) and says in lines[0], lines[0]


@pytest.mark.parametrize("kind", ["private", "own"])
def test_a_folder_another_user_made_first_or_linked_is_refused(machine, kind):
    shared, victims = machine
    plant_folder(shared / "rgw")
    plant_link(shared / "rgw-link", victims / "tree")
    before = snapshot(victims) | snapshot(shared)
    _refused(_folder(kind, shared / "rgw"), "rgw: belongs to another user (uid 65534)")
    _refused(_folder(kind, shared / "rgw-link"), "is not a folder (a link or a file)")
    _refused(_folder(kind, shared / "rgw-link" / "deep"), "rgw-link is a link another user owns (uid 65534)")
    _refused(_folder(kind, shared), "")  # a shared folder itself: sticky, others write
    assert snapshot(victims) | snapshot(shared) == before


def test_a_folder_on_a_way_others_may_write_is_refused(machine):
    shared, _ = machine
    (shared.parent / "open").mkdir(mode=0o777)
    os.chmod(shared.parent / "open", 0o777)
    _refused(_folder("private", shared.parent / "open" / "rgw"), "open is writable by other users without the sticky bit")
    (shared.parent / "acl").mkdir(mode=0o755)
    grant_write(shared.parent / "acl")
    _refused(_folder("private", shared.parent / "acl" / "rgw"), "acl is writable by other users without the sticky bit")
    assert not (shared.parent / "open" / "rgw").exists() and not (shared.parent / "acl" / "rgw").exists()


def test_a_new_folder_is_made_private_and_an_empty_private_one_is_taken(tmp_path):
    made = _folder("private", tmp_path / "new")
    assert made.returncode == 0 and made.stdout.strip() == str(tmp_path / "new"), made.stderr
    assert oct((tmp_path / "new").stat().st_mode & 0o777) == "0o700"
    again = _folder("private", tmp_path / "new")  # empty, mode 0700, mine: as mktemp -d makes it
    assert again.returncode == 0
    (tmp_path / "new" / "ceph.conf").write_text("x")
    _refused(_folder("private", tmp_path / "new"), "is not an empty folder only you may enter")
    os.chmod(tmp_path / "new", 0o755)
    assert _folder("own", tmp_path / "new").returncode == 0  # own: not empty, not private, but nobody else writes


def test_rgw_server_stop_refuses_another_users_folder_before_reading_it(machine):
    """``stop DIR`` reads DIR/pids and signals what it names: never in a folder another user made."""
    shared, _ = machine
    plant_folder(shared / "rgw")
    proc = subprocess.run(["bash", str(SCRIPTS / "rgw-server.sh"), "stop", str(shared / "rgw")],
                          capture_output=True, text=True, timeout=60)
    _refused(proc, "belongs to another user")
    assert subprocess.run(["bash", str(SCRIPTS / "rgw-server.sh"), "stop", str(shared / "none")],
                          capture_output=True, timeout=60).returncode == 0  # nothing there: nothing to stop


def test_gpu_wheels_refuses_a_folder_another_user_made_before_pip_writes_there(machine):
    shared, victims = machine
    plant_folder(shared / "wheels")
    plant_link(shared / "wheels" / "boto3-1.0-py3-none-any.whl", victims / "secret")
    before = snapshot(victims)
    proc = subprocess.run(["sh", str(SCRIPTS / "gpu-wheels.sh"), str(shared / "wheels")],
                          capture_output=True, text=True, timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1 and lines[0].startswith("gpu-wheels: "), proc.stderr
    assert "belongs to another user (uid 65534)" in lines[0] and snapshot(victims) == before


def test_every_script_that_writes_checks_its_folder():
    """Each script under scripts/ that takes a folder sources the check (mutate.sh: its own tests)."""
    for script in ("rgw-server.sh", "gpu-wheels.sh"):
        text = (SCRIPTS / script).read_text()
        assert "private-folder.sh" in text and ("private_folder" in text or "own_folder" in text), script
