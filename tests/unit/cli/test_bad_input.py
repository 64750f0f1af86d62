"""Bad input is always one line (issues 37, 54): every case across the subcommands, the config's
sections and keys, and the units ends with exactly one line ``ckpt-emu: error: ...`` naming the
problem, exit status 2, and nothing created or changed anywhere the command could write (its
folder, HOME, the default locations, /dev/shm). The corpus is tests/unit/cli/bad_inputs.py;
tests/unit/cli/test_bad_input_fuzz.py keeps the promise for inputs nobody wrote by hand.

In process (``emulator.cli.main``: no subprocess per case, the corpus stays quick), in one folder
that is the working directory and HOME; the cases name files in it as ``TMP/...``.
"""
from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from bad_inputs import _FILES, CASES, _tiers
from emu import refused
from writeaudit import WriteAudit

from emulator.cli import main


@pytest.fixture(scope="module")
def workspace():
    """A working folder and HOME holding the cases' files, one for the module: a case writes
    nothing, and each case compares what is there before and after it (the second user can reach
    it: it plants a folder and a link of its own there); yields it."""
    base = Path(tempfile.mkdtemp(prefix="ckpt-emu-bad-input-", dir="/tmp"))
    ws = base / "ws"
    ws.mkdir()
    for name, text in _FILES.items():
        (ws / name).write_text(text)
    (ws / "binary.yaml").write_bytes(b"\xff\xfe\x00model: 1\n")
    (ws / "huge.yaml").write_text("#" * (2 << 20) + "\n")
    (ws / "folder.yaml").mkdir()
    os.mkfifo(ws / "fifo.yaml")
    (ws / "emptydir").mkdir()
    (ws / "project").mkdir()
    (ws / "project" / "data").mkdir()
    (ws / "project" / "notes.txt").write_text("someone's notes")
    (ws / "open").mkdir()
    os.chmod(ws / "open", 0o777)
    if os.geteuid() == 0:
        from planting import plant_folder, plant_link
        os.chmod(base, 0o755)
        os.chmod(ws, 0o1777)
        plant_folder(ws / "other-users", 0o755)
        plant_link(ws / "their-link", Path("/tmp"))
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ws)
        mp.setenv("HOME", str(ws))
        try:
            yield ws
        finally:
            shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def busy(workspace):
    """TMP/busy: a folder another run holds (its owner lock taken here)."""
    from tiers.locking import Holder, claim_dir
    (workspace / "busy").mkdir()
    claim = claim_dir(workspace / "busy", Holder(job="the-other-run"), what="dir tier")
    yield claim
    claim.release()


@pytest.fixture(scope="module")
def busy_port():
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


def _tree(root: Path) -> dict:
    """Every name under ``root`` (links not followed) with its kind, size and mtime."""
    out = {}
    if not root.exists():
        return out
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            st = os.lstat(os.path.join(dirpath, name))
            out[os.path.join(dirpath, name)] = (stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns)
    return out


def _writes(audit) -> list[tuple[str, str]]:
    """What a case wrote anywhere (/dev/shm, HOME, the default folders included), seen by the write
    audit in this process (other processes' writes on a shared machine are not its): Python's own
    bytecode cache aside."""
    return [(event, path) for event, path in audit.writes if "__pycache__" not in path]


def _case_id(argv: list[str]) -> str:
    return " ".join(argv).replace(" ".join(_tiers()), "TIERS")[:80].replace("\0", "\\0") or "(none)"


@pytest.mark.parametrize("argv, expected", CASES, ids=[_case_id(a) for a, _ in CASES])
def test_bad_input_is_one_line_exit_2_and_nothing_written(argv, expected, workspace, busy, busy_port, capsys):
    if ("other-users" in " ".join(argv) or "their-link" in " ".join(argv)) and os.geteuid() != 0:
        pytest.skip("planting as a second user needs root")
    ws = str(workspace)
    argv = [a.replace("TMP", ws).replace("BUSY_PORT", str(busy_port))
            .replace("RANKS_OVER_CAP", str(8 * (os.cpu_count() or 1) + 1)) for a in argv]
    expected = expected.replace("TMP", ws)
    before = _tree(workspace)
    with WriteAudit(Path("/")) as audit:
        rc = main(argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, (rc, err)
    assert lines[0].startswith("ckpt-emu: error: ") and expected in lines[0], lines[0]
    assert len(lines[0]) <= 1100, len(lines[0])
    assert not _writes(audit) and _tree(workspace) == before, _writes(audit) or "something was written"


SUBCOMMANDS = ("run", "sizes", "plan", "simulate", "tune", "compare")
#: the config's sections: a case sets a key of each (--set, or a file)
SECTIONS = ("model", "parallelism", "training", "checkpoint", "state", "drain", "tiers", "run", "metrics", "cost",
            "limits", "failures", "design")


def test_the_corpus_is_large_and_covers_every_subcommand_section_and_unit():
    used = {a[0] if a else "" for a, _ in CASES}
    assert len(CASES) >= 250, len(CASES)
    assert set(SUBCOMMANDS) <= used
    text = [" ".join(a) for a, _ in CASES]
    for section in SECTIONS:
        assert any(f"{section}." in t or f"{section}=" in t for t in text), section
    for unit in ("GB/s", "Gb/s", "GB", "m", "h", "s"):  # rates, sizes and times, well and badly written
        assert any(unit in t for t in text), unit
    from emulator.config.schema import Config
    from dataclasses import fields
    assert {f.name.rstrip("_") for f in fields(Config)} <= set(SECTIONS), "a new section: add its cases"


def test_a_tiny_scale_is_accepted(capsys):
    """YAML 1.1 reads 1e-05 as text: ``--scale 0.00001`` was refused ("expected a number, got '1e-05'")."""
    from emulator.config import load_config
    assert main(["sizes", "llama3-8b", "--scale", "0.00001"]) == 0
    assert load_config("llama3-8b", ["run.scale=1e-05"]).run.scale == 1e-05
    assert load_config("llama3-8b", ["run.scale=2.5E-3"]).run.scale == 0.0025


@pytest.mark.parametrize("command", [["run"], ["sizes"], ["simulate"]])
def test_a_config_name_too_long_for_a_file_is_one_line(tmp_path, capsys, command):
    """The twin of plan's --size=999...9: a config named past the file-name limit raised ENAMETOOLONG
    while the loader looked for the file, an internal error with a traceback."""
    out = [] if command == ["sizes"] else ["--out", tmp_path / "out"]
    line = refused(capsys, *command, "a" * 400, *out)
    assert "unknown preset" in line and not (tmp_path / "out").exists()
