"""What ships is what is tested: the wheel built from this checkout, installed into a fresh virtual
environment outside it, holds every module and the presets, imports, and runs the commands that
need no torchrun. The wheel installs the product only: tiers, emulator and the preset YAMLs (no
generic top-level names such as ``configs`` or ``bench`` that could collide in a user's environment)."""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
from paths import ROOT



def _clean_copy(dest: Path) -> Path:
    """The files git would commit, copied: a build/ folder left by an earlier build in the checkout
    would otherwise put files into the wheel that its package list leaves out."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    src = _clean_copy(tmp_path_factory.mktemp("src"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(out), str(src)], check=True, capture_output=True)
    (whl,) = out.glob("ckpt_emu-*.whl")
    return whl


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh venv outside the checkout with the wheel installed; its dependencies (torch and the
    rest) come from this interpreter's site-packages, the product only from the wheel."""
    env_dir = tmp_path_factory.mktemp("venv") / "env"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps",
                    "--no-index", str(wheel)], check=True, capture_output=True)
    return env_dir


def _outside(env_dir: Path, *argv, cwd: Path) -> subprocess.CompletedProcess:
    """A command run as a user without the checkout would: from elsewhere, no PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{env['PATH']}"
    return subprocess.run(list(map(str, argv)), capture_output=True, text=True, cwd=cwd, env=env, timeout=600)


def _module_names(root: Path) -> list[str]:
    names = []
    for top in ("emulator", "tiers"):
        for p in sorted((root / top).rglob("*.py")):
            parts = p.relative_to(root).with_suffix("").parts
            if parts[-1] != "__main__":  # a script: importing it runs it
                names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_wheel_holds_every_package_the_presets_and_the_compiled_copy(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"tiers", "emulator"}
    in_checkout = {p.relative_to(ROOT).as_posix() for d in ("emulator", "tiers") for p in (ROOT / d).rglob("*.py")}
    assert in_checkout <= set(names), sorted(in_checkout - set(names))
    presets = {Path(n).name for n in names if n.startswith("emulator/presets/")}
    shipped = {p.name for p in (ROOT / "configs").glob("*.yaml")}
    assert shipped and shipped <= presets
    if platform.machine() == "x86_64":  # the memory tier's fused copy, compiled (optional elsewhere)
        assert any(n.startswith("tiers/_copycrc.") and n.endswith(".so") for n in names), names


def test_every_module_imports_from_the_installed_wheel(installed, tmp_path):
    modules = _module_names(ROOT)
    code = ("import importlib, sys\n"
            f"mods = {modules!r}\n"
            "for m in mods:\n"
            "    mod = importlib.import_module(m)\n"
            "    assert 'site-packages' in (mod.__file__ or ''), (m, mod.__file__)\n"
            "import emulator.presets as p; print(len(mods), list(p.__path__)[0])\n")
    r = _outside(installed, installed / "bin" / "python", "-c", code, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    count, presets = r.stdout.split()
    assert int(count) == len(modules) and str(installed) in presets


def test_the_installed_commands_run_the_embedded_default(installed, tmp_path):
    cli = installed / "bin" / "ckpt-emu"
    sizes = _outside(installed, cli, "sizes", cwd=tmp_path)
    assert sizes.returncode == 0 and "checkpoint" in sizes.stdout, sizes.stderr
    plan = _outside(installed, cli, "plan", "--accelerators", "1024", "--size", "default", cwd=tmp_path)
    assert plan.returncode == 0 and "cluster MTTF" in plan.stdout, plan.stderr
    sim = _outside(installed, cli, "simulate", "--days", "1", "--out", tmp_path / "sim", cwd=tmp_path)
    assert sim.returncode == 0 and "goodput" in sim.stdout, sim.stderr
