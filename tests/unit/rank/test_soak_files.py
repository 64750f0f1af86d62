"""What a soak counts as a tier's files: what the tier holds at rest, not the checkpoint in flight."""
from __future__ import annotations

from emulator.checkpoint.layout import MANIFEST, step_dir
from emulator.rank.soak import tier_files
from tiers.directory import DirTier


def _write(root, key: str) -> None:
    path = root / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")


def test_a_checkpoint_in_flight_is_not_counted_but_garbage_and_strays_are(tmp_path):
    for k in ("a.pt", "b.pt", MANIFEST):
        _write(tmp_path, f"{step_dir(16)}/{k}")  # complete: retention keeps it
    for k in ("a.pt", "b.pt"):
        _write(tmp_path, f"{step_dir(24)}/{k}")  # in flight: newer than the newest complete one
    _write(tmp_path, f"{step_dir(8)}/a.pt")  # an older step that never completed: garbage, a leak's sign
    _write(tmp_path, "stray.tmp")  # outside every step folder: counted
    assert tier_files([("global", DirTier(str(tmp_path)))]) == {"global": 5}


def test_a_tier_with_nothing_complete_yet_holds_only_checkpoints_in_flight(tmp_path):
    _write(tmp_path, f"{step_dir(8)}/a.pt")
    _write(tmp_path, f"{step_dir(16)}/a.pt")
    assert tier_files([("local", DirTier(str(tmp_path))), ("memory", None)]) == {"local": 0}
