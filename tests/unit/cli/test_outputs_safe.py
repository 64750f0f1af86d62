"""Every file the CLI writes goes through the one safe reach and write (tiers/safepath.py,
tiers/fileops.py), never a library's own open (issue 54).

``WriteAudit`` (tests/support/writeaudit.py, a ``sys.addaudithook`` hook) sees every open for
writing, every mkdir, rename, replace and unlink under the folders a command was given, and names
any that did not come from those two modules: a project module's own ``open``/``Path.write_text``,
or a library (matplotlib's ``savefig(path)``) called with a path. Each command is walked with its outputs and its default
folders; the ranks' writers are walked in process (tests/system/run/test_outputs_safe_e2e.py
audits a real run's every process).

Reproductions (issue 54): 1, ``simulate --out`` wrote its pictures and sweep JSON through links
another user planted, in a named folder and in the default ``./ckpt-emu-data/simulate``; 4,
``plan --plot PATH`` checked PATH's folder, then matplotlib followed a link at PATH.
"""
from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest
from paths import ROOT
from planting import machine, plant_folder, plant_link, snapshot  # noqa: F401 - a fixture
from writeaudit import WriteAudit

from emulator.cli import main

# --------------------------------------------------------------------------- the walk

@pytest.fixture
def place(tmp_path, monkeypatch):
    """The command's working folder (its default outputs land there)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _walk(capsys, root: Path, *argv) -> tuple[int, WriteAudit]:
    with WriteAudit(root) as audit:
        rc = main([str(a) for a in argv])
    capsys.readouterr()
    return rc, audit


PLAN = ["plan", "--accelerators", "1000", "--size", "100GB", "--bandwidth", "10GB/s", "--sweep"]
COMMANDS = {
    "plan --plot": [*PLAN, "--plot", "PLACE/plots/plan.png"],
    "plan (default plot)": PLAN,
    "simulate --out": ["simulate", "--days", "0.5", "--sweep", "interval=10m,20m", "--quiet", "--out", "PLACE/sim"],
    "simulate (default out)": ["simulate", "--days", "0.5", "--sweep", "interval=10m,20m", "--quiet"],
    "sizes": ["sizes", "llama3-8b"],
}


@pytest.mark.parametrize("name", COMMANDS)
def test_each_command_writes_only_through_the_safe_modules(capsys, place, name):
    argv = [a.replace("PLACE", str(place)) for a in COMMANDS[name]]
    rc, audit = _walk(capsys, place, *argv)
    assert rc == 0
    assert not audit.stray, audit.stray
    made = sorted(str(p.relative_to(place)) for p in place.rglob("*") if p.is_file())
    assert bool(made) == (name != "sizes") and (audit.seen > 0) == bool(made), (made, audit.seen)


def test_the_audit_names_a_write_made_another_way(place):
    """The walk can fail: a project module's own open, and matplotlib handed a path by one."""
    fake = "emulator/cli/" + "not_a_module" + ".py"  # no such module: spelt apart (tests/unit/project/test_links.py)
    stray = compile("def stray(path, fig):\n    open(path, 'w').close()\n    fig.savefig(path + '.png')\n",
                    str(ROOT / fake), "exec")
    space: dict = {}
    exec(stray, space)
    from matplotlib.figure import Figure
    with WriteAudit(place) as audit:
        space["stray"](str(place / "x"), Figure())
    whos = [who for _, _, who in audit.stray]
    assert any(w.startswith(f"{fake}:2") for w in whos), whos
    assert any("-packages/" in w and f"called from {fake}:3" in w for w in whos), whos


def _rank_results():
    spec = importlib.util.spec_from_file_location(
        "full_size_ratios", ROOT / "tests" / "unit" / "results" / "test_full_size_ratios.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._config(), [module._rank(r) for r in (0, 1)]


def test_the_ranks_working_files_are_written_only_through_the_safe_modules(place):
    """What a rank writes as it goes (the trained mark) and at the start (the spool and metrics
    folders); its results, report and timeline: the run below."""
    from emulator.job.outdir import OutDir
    from emulator.metrics import prepare_multiprocess_dir
    from emulator.rank.training import TrainedMark
    from tiers.safepath import fresh_folder
    out = OutDir(place / "out")
    with WriteAudit(place) as audit:
        mark = TrainedMark(out.trained(0))
        mark.mark(3)
        mark.close()
        fresh_folder(out.spool(0))
        prepare_multiprocess_dir(out.root / ".metrics" / "node0")
    assert not audit.stray, audit.stray
    assert audit.seen >= 3 and TrainedMark.read(out.trained(0)) == 3


def test_a_run_and_its_launcher_write_only_through_the_safe_modules(capsys, place, monkeypatch):
    """The CLI's side of ``run`` (the results folder, its working folders, config.json, torchrun.log),
    torchrun replaced by ranks that write their results through the real writer."""
    import subprocess

    from emulator.config import load_config
    from emulator.launch import launcher
    from emulator.results.report import write_outputs
    from rundesign import run_of
    cfg_ranks = _rank_results()

    class Ranks:
        def __init__(self, cmd, **kw):
            config = cmd[cmd.index("--config") + 1]
            out = Path(config).parent
            cfg = cfg_ranks[0].with_overrides(f"run.out={out}")
            write_outputs(cfg, *run_of(cfg), cfg_ranks[1], out)
            self.returncode, self.pid = 0, os.getpid()

        def poll(self):
            return self.returncode
    monkeypatch.setattr(launcher.subprocess, "Popen", Ranks)
    assert launcher.subprocess is subprocess
    tiers = ["--set", f"tiers.local.path={place}/nvme/node{{node}}", "--set", f"tiers.global.path={place}/pfs"]
    rc, audit = _walk(capsys, place, "run", "--quiet", "--out", place / "out", *tiers)
    assert rc == 0 and not audit.stray, audit.stray
    assert {p.name for p in (place / "out").iterdir()} >= {"config.json", "torchrun.log", "results.json",
                                                          "report.txt", "timeline.png"}
    assert load_config(None).run.out  # the default is untouched


# --------------------------------------------------------------------------- 1 and 4: planted links

def _open_folder(base: Path, name: str) -> Path:
    folder = base / name
    folder.mkdir()
    os.chmod(folder, 0o1777)
    return folder


SIMULATE = ["simulate", "--days", "0.5", "--sweep", "interval=10m,20m", "--quiet"]


def test_simulate_into_a_shared_folder_with_planted_links_changes_nothing_outside(machine, capsys):
    """1: links at simulate.png, sweep.png and sweep.json (and its old temporary name) in a folder
    others can write: the folder is refused (one line, exit 2) and the link targets are unchanged."""
    shared, victims = machine
    out = _open_folder(shared, "sim")
    for name in ("simulate.png", "sweep.png", "sweep.json", "sweep.json.tmp"):
        plant_link(out / name, victims / "secret")
    before = snapshot(victims)
    rc = main([*SIMULATE, "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "is writable by other users (mode 1777, sticky)" in err[0], err
    assert snapshot(victims) == before


def test_a_plot_planted_as_a_link_in_a_shared_folder_is_replaced_never_written_through(machine, capsys):
    """4: ``plan --plot /shared/plan.png`` with another user's link there: the link is replaced by
    the picture (the folder may be shared: the file is renamed into it), its target unchanged."""
    shared, victims = machine
    plant_link(shared / "plan.png", victims / "secret")
    before = snapshot(victims)
    assert main([*PLAN, "--plot", str(shared / "plan.png")]) == 0
    capsys.readouterr()
    assert snapshot(victims) == before
    plot = shared / "plan.png"
    assert not plot.is_symlink() and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_sweep_json_is_whole_or_absent(capsys, place):
    """sweep.json is renamed into place: no temporary name is left beside it."""
    assert main([*SIMULATE, "--out", str(place / "sim")]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in (place / "sim").iterdir()) == ["simulate.png", "sweep.json", "sweep.png"]
    assert json.loads((place / "sim" / "sweep.json").read_text())["sweep"]


# --------------------------------------------------------------------------- bench

def test_the_benchmarks_work_only_in_a_private_folder_of_their_own(machine):
    """bench --workdir: another user's folder, a shared one, or a link of theirs is refused (the
    benchmarks write and delete by name there); without it, a new private folder. The GPU bench's
    default was a fixed name in /tmp, emptied with rmtree as root."""
    from bench.common import work_folder
    from bench.gpu import main as gpu_main
    shared, victims = machine
    plant_folder(shared / "theirs")
    plant_link(shared / "link", victims / "tree")
    for given in (shared / "theirs", shared, shared / "link" / "work"):
        with pytest.raises(SystemExit, match="--workdir"):
            work_folder(str(given), "x-")
    made, fresh = work_folder(None, "ckpt-emu-test-")
    try:
        assert fresh and oct(made.stat().st_mode & 0o777) == "0o700"
    finally:
        made.rmdir()
    assert "/tmp/ckpt-emu-bench-gpu" not in Path(gpu_main.__code__.co_filename).read_text()


@pytest.mark.parametrize("argv", [SIMULATE, PLAN, ["run", "--quiet"]], ids=["simulate", "plan --sweep", "run"])
def test_started_in_a_shared_folder_the_default_outputs_never_go_through_another_users_folder(
        machine, capsys, monkeypatch, argv):
    """1 (simulate), and the default plot and results folder: started in a shared folder where another
    user made ./ckpt-emu-data first, with links at the names the commands write (simulate.png,
    sweep.png, sweep.json.tmp in ./ckpt-emu-data/simulate, plan-sweep.png, results): refused in one
    line, nothing outside changed."""
    shared, victims = machine
    data = shared / "ckpt-emu-data"
    plant_folder(data)
    plant_folder(data / "simulate")
    for name in ("simulate/simulate.png", "simulate/sweep.png", "simulate/sweep.json.tmp", "plan-sweep.png"):
        plant_link(data / name, victims / "secret")
    plant_link(data / "results", victims / "tree")
    monkeypatch.chdir(shared)
    before = snapshot(victims)
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "ckpt-emu-data belongs to another user (uid 65534)" in err[0], err
    assert snapshot(victims) == before
