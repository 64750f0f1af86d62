"""The default tiers' per-user folder taken first by another user (issue 54, 7): any user could make
``/dev/shm/ckpt-emu-<uid>`` before its owner and so block every run of theirs. A single node's run
now keeps its tiers in a new private folder beside it, says so in one warning line, and removes it
when it ends; a multi-node job's nodes must agree on their folders and are refused as before.
``CKPT_EMU_TIERS_DIR`` points the per-user folder into the test's own shared folder (the machine's
/dev/shm one is every test's)."""
from __future__ import annotations

import json
import os

import pytest
from planting import machine, plant_folder, plant_link, snapshot  # noqa: F401 - a fixture

from emulator.cli import main


class Ranks:
    """torchrun replaced by ranks that write nothing (the launcher's side is what is looked at)."""

    started: list = []

    def __init__(self, cmd, **kw):
        Ranks.started.append(cmd)
        self.returncode, self.pid = 0, os.getpid()

    def poll(self):
        return self.returncode


@pytest.fixture
def taken(machine, monkeypatch, tmp_path):
    """(the per-user folder, another user's, with their link inside; the root-only folders)."""
    from emulator.launch import launcher
    shared, victims = machine
    folder = shared / "ckpt-emu-x"
    plant_folder(folder)
    plant_link(folder / "nvme", victims / "tree")
    monkeypatch.setenv("CKPT_EMU_TIERS_DIR", str(folder))
    monkeypatch.setattr(launcher.subprocess, "Popen", Ranks)
    Ranks.started = []
    return folder, victims


def _run(tmp_path, folder, *extra) -> list[str]:
    return ["run", "--quiet", "--out", str(tmp_path / "out"), "--set", f"tiers.local.path={folder}/nvme/node{{node}}",
            "--set", f"tiers.global.path={folder}/pfs", *extra]


def test_a_single_nodes_run_keeps_its_tiers_in_a_private_folder_and_removes_it(taken, tmp_path, capsys):
    folder, victims = taken
    before = snapshot(victims) | snapshot(folder)
    assert main(_run(tmp_path, folder)) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"ckpt-emu: warning: {folder} belongs to another user (uid 65534): "
                                               f"this run keeps its tiers in {folder}-"), err
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    private = cfg["tiers"]["global"]["path"].removesuffix("/pfs")
    assert private.startswith(f"{folder}-") and len(private) == len(str(folder)) + 13
    assert cfg["tiers"]["local"]["path"] == f"{private}/nvme/node{{node}}"
    assert Ranks.started and not os.path.exists(private)  # made for the run, removed after it
    assert snapshot(victims) | snapshot(folder) == before


def test_kept_tiers_keep_their_private_folder(taken, tmp_path, capsys):
    folder, _ = taken
    assert main(_run(tmp_path, folder, "--keep-tiers")) == 0
    assert "(kept when it ends)" in capsys.readouterr().err
    private = json.loads((tmp_path / "out" / "config.json").read_text())["tiers"]["global"]["path"][:-len("/pfs")]
    st = os.stat(private)
    assert st.st_uid == os.geteuid() and oct(st.st_mode & 0o777) == "0o700"
    os.rmdir(private)


def test_a_multi_node_job_is_refused_as_before(taken, tmp_path, capsys):
    folder, victims = taken
    before = snapshot(victims)
    rc = main(_run(tmp_path, folder, "--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:29500", "--set", "design.job.nodes=2"))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "belongs to another user (uid 65534)" in err[0], err
    assert not Ranks.started and snapshot(victims) == before and not (tmp_path / "out").exists()


def test_the_shipped_configs_tiers_dir_paths_move_to_the_private_folder_too(taken, tmp_path, capsys):
    """The shipped configs name their tiers ``{tiers_dir}/...``: a squatted per-user folder moves them
    as it moves paths written out (the default's own run, not only a --set one)."""
    folder, _ = taken
    assert main(["run", "--quiet", "--out", str(tmp_path / "out")]) == 0
    assert "this run keeps its tiers in" in capsys.readouterr().err
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert cfg["tiers"]["global"]["path"].startswith(f"{folder}-"), cfg["tiers"]
