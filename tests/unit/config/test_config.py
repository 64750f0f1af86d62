"""Config validation: every bad input is one clear line naming the key, exit status 2, nothing written."""

import pytest

from emulator.cli import main
from emulator.config import Config, load_config
from emulator.errors import ConfigError

BAD = [
    # (file content or None, extra CLI args, expected fragment of the message)
    ("model: {num_layerz: 3}\n", [], "model.num_layerz: unknown key"),
    ("bogus_section: {}\n", [], "bogus_section: unknown key"),
    ("checkpoint: {interval_steps: -5}\n", [], "checkpoint.interval_steps: must be >= 1"),
    ("checkpoint: {interval_steps: five}\n", [], "checkpoint.interval_steps: expected an integer"),
    ("checkpoint: {modes: [sync, later]}\n", [], "checkpoint.modes: unknown mode 'later'"),
    ("checkpoint: {keep: 0}\n", [], "checkpoint.keep: must be >= 1"),
    ("run: {scale: 0}\n", [], "run.scale: must be in (0, 1]"),
    ("run: {scale: 1.5}\n", [], "run.scale: must be in (0, 1]"),
    ("parallelism: {ranks: 9}\n", [], "parallelism.ranks: 9 ranks requested but this layout has only 8"),
    ("parallelism: {zero_stage: 4}\n", [], "parallelism.zero_stage: must be 0, 1, 2 or 3"),
    ("training: {compute: gpu}\n", [], "training.compute: must be 'sleep' or 'cpu'"),
    ("training: {step_seconds: -1}\n", [], "training.step_seconds: must be >= 0"),
    ("tiers: {global: {backend: tape, path: /x}}\n", [], "tiers.global.backend: unknown backend 'tape'"),
    ("tiers: {global: {backend: dir}}\n", [], "tiers.global.path: a dir tier needs a path"),
    ("tiers: {global: {backend: s3}}\n", [], "tiers.global.bucket: an s3 tier needs a bucket"),
    ("tiers: {global: {backend: dir, path: /x, emulate: {write_gib_s: -1}}}\n", [],
     "tiers.global.emulate.write_gib_s: must be > 0"),
    ("tiers: {global: {backend: dir, path: /x, emulate: {shared_by: planet}}}\n", [],
     "tiers.global.emulate.shared_by"),
    ("metrics: {port: 70000}\n", [], "metrics.port: must be a TCP port"),
    (None, ["--set", "metrics.final_scrape_timeout_s=-1"], "metrics.final_scrape_timeout_s: must be 0 or more"),
    ("state: {device: tpu}\n", [], "state.device: must be auto, cpu or cuda"),
    ("state: {pinned_budget_gib: 0}\n", [], "state.pinned_budget_gib: must be >= 0.002 GiB"),
    (None, ["--set", "state.pinned_budget_gib=lots"], "state.pinned_budget_gib: expected a number"),
    ("model: [1, 2]\n", [], "model: expected a mapping"),
    ("a: b: c\n", [], "not valid YAML"),
    ("- just\n- a list\n", [], "the top level must be a mapping"),
    ("extends: no-such-preset\n", [], "unknown preset 'no-such-preset'"),
    (None, ["--set", "checkpoint.interval_steps=0"], "checkpoint.interval_steps: must be >= 1"),
    (None, ["--set", "nodots"], "expected KEY=VALUE"),
    (None, ["--set", "run.scale=2"], "run.scale: must be in (0, 1]"),
    (None, ["--scale", "0"], "run.scale: must be in (0, 1]"),
    (None, ["--duration", "soon"], "--duration: 'soon' is not a time"),
    (None, ["--duration", "0s"], "--duration: '0s' must be a finite time > 0"),
]


@pytest.mark.parametrize("content,args,message", BAD)
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, content, args, message):
    src = []
    if content is not None:
        path = tmp_path / "bad.yaml"
        path.write_text(content)
        src = [str(path)]
    out = tmp_path / "out"
    rc = main(["run", *src, "--out", str(out), "--quiet", *args])
    err = capsys.readouterr().err
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ckpt-emu: error: "), err
    assert message in lines[0]
    assert not out.exists()  # nothing written


def test_missing_config_file_and_preset(capsys):
    assert main(["sizes", "/no/such/file.yaml"]) == 2
    assert "config file not found" in capsys.readouterr().err
    assert main(["sizes", "llama9-999b"]) == 2
    assert "unknown preset 'llama9-999b'" in capsys.readouterr().err


def test_unwritable_directory_tier(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")  # works as root too, unlike permission bits
    rc = main(["run", "--quiet", "--out", str(tmp_path / "out"), "--set", f"tiers.global.path={blocker}/global",
               "--set", f"tiers.local.path={tmp_path}/nvme/node{{node}}"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("ckpt-emu: error: tiers.global: cannot create directory tier"), err
    assert not (tmp_path / "out").exists() and not (tmp_path / "nvme").exists()  # nothing written


def test_too_small_disk_is_refused(tmp_path, capsys):
    rc = main(["run", "llama3-1t-subset", "--quiet", "--set", "checkpoint.keep=50", "--out", str(tmp_path / "out"),
               "--set", f"tiers.local.path={tmp_path}/l", "--set", f"tiers.global.path={tmp_path}/g"])
    err = capsys.readouterr().err
    assert rc == 2 and "tiers.local:" in err and "GiB free, needs about" in err


def test_overrides_and_extends():
    cfg = load_config("llama3-405b-subset", ["checkpoint.modes=[async]", "run.scale=0.01"])
    assert cfg.parallelism.subset and cfg.parallelism.active_ranks == 8
    assert cfg.checkpoint.modes == ("async",) and cfg.run.scale == 0.01
    assert cfg.model.num_layers == 126


def test_default_config_is_valid_and_roundtrips():
    cfg = load_config(None)
    assert cfg.parallelism.active_ranks == 8 and cfg.tiers.local is not None
    from emulator.config import from_mapping
    assert from_mapping(cfg.to_dict()) == cfg


def test_direct_construction_validates():
    with pytest.raises(ConfigError):
        Config().__class__(run=type(Config().run)(scale=2.0))


def test_a_folder_named_like_a_preset_does_not_shadow_it(tmp_path, monkeypatch):
    """`ckpt-emu run` in a folder holding a subfolder `default` (or `llama3-8b`) still runs the
    embedded preset: only a file is a config path."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "default").mkdir()
    (tmp_path / "llama3-8b").mkdir()
    assert load_config() == load_config("default")
    assert load_config("llama3-8b").model.name == "llama3-8b"
