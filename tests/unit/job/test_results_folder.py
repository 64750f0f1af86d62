"""Results are never lost: a run into a results folder that holds a finished run's results is
refused (one line, exit 2, nothing written) unless --force; a folder a failed or killed run left
is reused; an MLPerf read phase keeps its write phase's results. In-process, nothing launched."""
from __future__ import annotations

import json

import pytest

from emulator.cli import main
from emulator.config import load_config
from emulator.errors import UserError
from emulator.job import outdir
from emulator.launch.launcher import prepare_out
from emulator.launch.runner import check_results_folder


def _cfg(out, *sets):
    return load_config(None, [f"run.out={out}", *sets])


@pytest.mark.parametrize("finished", [outdir.RESULTS, outdir.REPORT, outdir.TIMELINE, "dlio"])
def test_a_finished_runs_results_are_refused_without_force(tmp_path, finished):
    out = tmp_path / "out"
    (out / finished).parent.mkdir(parents=True)
    (out / finished).mkdir() if finished == "dlio" else (out / finished).write_text("kept")
    with pytest.raises(UserError, match=rf"results folder {out} holds a finished run's results \({finished}\): "
                                        "give another --out, or --force to replace them"):
        check_results_folder(_cfg(out), force=False)
    assert check_results_folder(_cfg(out), force=True) is False


def test_a_new_folder_or_one_a_failed_run_left_is_used(tmp_path):
    assert check_results_folder(_cfg(tmp_path / "new"), force=False) is False
    failed = tmp_path / "failed"
    failed.mkdir()
    for name in (outdir.CONFIG, outdir.LOG, outdir.STATUS):
        (failed / name).write_text("{}")
    assert check_results_folder(_cfg(failed), force=False) is False


def test_a_killed_runs_partial_outputs_are_removed_and_nothing_else(tmp_path):
    """A run killed while rank 0 replaced progress.json left ``.progress.json.<12 hex>.partial`` in
    the results folder; the next run there removes such partials of the tool's outputs, and leaves
    another name, a partial of a file that is not one of its outputs, and a link at a partial's name."""
    out = tmp_path / "out"
    out.mkdir()
    ours = [f".{name}.0123456789ab.partial" for name in (outdir.PROGRESS, outdir.STATUS, outdir.CONFIG)]
    theirs = [".notes.txt.0123456789ab.partial", ".progress.json.partial", "progress.json.0123456789ab.partial"]
    for name in ours + theirs:
        (out / name).write_text("{")
    (tmp_path / "target").write_text("kept")
    (out / f".{outdir.RESULTS}.ba9876543210.partial").symlink_to(tmp_path / "target")
    prepare_out(out, _cfg(out).to_dict(), {})
    left = {p.name for p in out.iterdir()}
    assert not left & set(ours), left
    assert set(theirs) | {f".{outdir.RESULTS}.ba9876543210.partial"} <= left, left
    assert (tmp_path / "target").read_text() == "kept"


def test_the_cli_refuses_before_writing_anything(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / outdir.RESULTS).write_text('{"first": "run"}')
    before = sorted(p.name for p in out.rglob("*"))
    assert main(["run", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"ckpt-emu: error: results folder {out} holds"), err
    assert sorted(p.name for p in out.rglob("*")) == before
    assert json.loads((out / outdir.RESULTS).read_text()) == {"first": "run"}


def test_an_mlperf_read_phase_keeps_its_write_phases_results(tmp_path):
    out = tmp_path / "out"
    (out / outdir.dlio_folder("write")).mkdir(parents=True)
    (out / outdir.RESULTS).write_text(json.dumps({"protocol": "mlperf", "phase": "write"}))
    (out / outdir.REPORT).write_text("the write phase\n")
    read = _cfg(out, "checkpoint.protocol=mlperf", "checkpoint.phase=read")
    assert check_results_folder(read, force=False) is True
    prepare_out(out, read.to_dict(), {}, keep_write_phase=True)
    assert json.loads((out / "results-write.json").read_text())["phase"] == "write"
    assert (out / "report-write.txt").read_text() == "the write phase\n"
    assert not (out / outdir.RESULTS).exists()
    (out / outdir.RESULTS).write_text(json.dumps({"protocol": "mlperf", "phase": "read"}))
    with pytest.raises(UserError, match="--force"):  # a second read phase replaces the first's only when asked
        check_results_folder(read, force=False)


def test_tune_checks_both_folders_before_it_runs(tmp_path, monkeypatch, capsys):
    import emulator.launch.runner as runner
    monkeypatch.setattr(runner, "execute_run", lambda *a, **k: pytest.fail("tune launched a run"))
    (tmp_path / "tune-confirm").mkdir()
    (tmp_path / "tune-confirm" / outdir.RESULTS).write_text("{}")
    assert main(["tune", "--accelerators", "1024", "--out", str(tmp_path)]) == 2
    assert "tune-confirm holds a finished run's results" in capsys.readouterr().err
