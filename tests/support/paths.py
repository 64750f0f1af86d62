"""Where things are: the checkout the tests run from, and this folder of shared helpers (put on a
run's PYTHONPATH where its ranks import a helper, e.g. ``example_backend:FlatDirTier``)."""
from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
ROOT = SUPPORT.parent.parent
