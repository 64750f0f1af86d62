"""Packages are found, not listed: every package under emulator/ and tiers/, plus the presets
(configs/, installed as emulator.presets). Everything else is in pyproject.toml."""
from setuptools import find_packages, setup

setup(packages=find_packages(include=["emulator", "emulator.*", "tiers", "tiers.*"]) + ["emulator.presets"])
