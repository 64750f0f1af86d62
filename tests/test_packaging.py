"""The wheel installs the product only: tiers, emulator and the preset YAMLs (no generic
top-level names such as ``configs`` or ``bench`` that could collide in a user's environment)."""
from __future__ import annotations

import platform
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_holds_the_product_and_the_presets(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("ckpt_emu-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"tiers", "emulator"}
    presets = {Path(n).name for n in names if n.startswith("emulator/presets/")}
    shipped = {p.name for p in (ROOT / "configs").glob("*.yaml")}
    assert shipped and shipped <= presets
    if platform.machine() == "x86_64":  # the memory tier's fused copy, compiled (optional elsewhere)
        assert any(n.startswith("tiers/_copycrc.") and n.endswith(".so") for n in names), names
