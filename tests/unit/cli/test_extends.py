"""``extends:`` reads config files only, and no error quotes what a file holds (issue 54, 5):
``extends: /etc/shadow`` printed root's shadow line in its one-line error (an unknown key). A file
it names must end in .yaml or .yml and be a regular file, and a YAML file that is no config (its top
level holds keys that are no section) is refused without quoting them."""
from __future__ import annotations

import os
import threading

import pytest
from emu import refused

from emulator.config import load_config

SECRET = "root:$6$hunter2-not-a-config$abcdefghijklmnop:20228:0:99999:7:::"


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shadow = tmp_path / "shadow"
    shadow.write_text(SECRET + "\n")
    os.chmod(shadow, 0o600)
    (tmp_path / "secret.yaml").write_text(f"password: {SECRET!r}\n")
    (tmp_path / "secret-values.yaml").write_text(f"{SECRET!r}: 1\n")
    return tmp_path


def _config(folder, text: str, name: str = "run.yaml") -> str:
    (folder / name).write_text(text)
    return str(folder / name)


@pytest.mark.parametrize("target, says", [
    ("shadow", "extends names a file that is no config file (a config file's name ends in .yaml or .yml)"),
    ("/etc/passwd", "extends names a file that is no config file"),
    ("secret.yaml", "not a ckpt-emu config (1 top-level key(s) that are no section of one"),
    ("secret-values.yaml", "not a ckpt-emu config"),
])
def test_extends_refuses_a_file_that_is_no_config_and_quotes_nothing_of_it(files, capsys, target, says):
    cfg = _config(files, f"extends: {files / target if target == 'shadow' else target}\n")
    line = refused(capsys, "sizes", cfg)
    assert says in line, line
    for part in ("hunter2", "root:$6", "password", "20228"):
        assert part not in line, line


def test_extends_reads_a_yaml_config_beside_the_file(files):
    (files / "sub").mkdir()
    (files / "sub" / "base.yml").write_text("extends: llama3-8b\ncheckpoint: {saves: 7}\n")
    cfg = _config(files / "sub", "extends: base.yml\ncheckpoint: {keep: 3}\n", "run.yaml")
    loaded = load_config(cfg)
    assert loaded.checkpoint.saves == 7 and loaded.checkpoint.keep == 3


def test_extends_never_waits_on_a_fifo_or_reads_a_folder(files, capsys):
    os.mkfifo(files / "pipe.yaml")
    (files / "folder.yaml").mkdir()
    done = []
    thread = threading.Thread(target=lambda: done.append(refused(capsys, "sizes", _config(files, "extends: pipe.yaml\n"))),
                              daemon=True)
    thread.start()
    thread.join(30)
    assert done and "pipe.yaml" in done[0], done  # refused at once (a FIFO is no regular file), never read
    assert "config file not found" in refused(capsys, "sizes", _config(files, "extends: folder.yaml\n"))
