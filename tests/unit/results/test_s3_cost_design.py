"""A run's S3 requests and cost at full size are the design's: the global rung's every-N-th
checkpoint and keep at the design's interval, verified where a node tier drained the checkpoint.

The run took the config's base interval and ``checkpoint.keep``: design-memory-nvme-s3 uploads
every 30th checkpoint and its cost read 1,440 uploads a day instead of 48.
"""
from __future__ import annotations

import pytest

from rundesign import run_design
from emulator.config import load_config
from emulator.results.requests import full_size
from emulator.simulation import s3cost
from emulator.sizing import checkpoint_size

MIB = 1 << 20


def _full(name: str, *sets: str):
    cfg = load_config(name, list(sets))
    return cfg, full_size(cfg, run_design(cfg))


def _layout(cfg) -> tuple[int, int, int]:
    size = checkpoint_size(cfg.model, cfg.parallelism)
    files = len(size.ranks)
    return files, -(-size.run_bytes // files), size.run_bytes


def test_the_cost_is_the_global_tiers_own_interval_and_keep():
    cfg, full = _full("design-memory-nvme-s3", "tiers.global.keep=3")
    files, file_bytes, run_bytes = _layout(cfg)
    cost = full["cost"]
    assert cost["interval_s"] == 300 * 6  # tiers.global.interval_steps x training.step_seconds
    assert cost["checkpoints_per_day"] == pytest.approx(86400 / 1800)
    assert full["checkpoint"] == s3cost.checkpoint_requests(files, file_bytes, 16 * MIB, verify="checksum", keep=3)
    assert full["checkpoint"]["GET"] - s3cost.checkpoint_requests(
        files, file_bytes, 16 * MIB, verify="checksum", keep=1)["GET"] == 2  # retention reads keep + 1 manifests
    assert cost["storage_per_day_usd"] == pytest.approx(
        3 * run_bytes / s3cost.GB * cfg.cost.gb_month / s3cost.DAYS_PER_MONTH)


def test_checkpoints_no_node_tier_takes_are_uploaded_unverified():
    """design-nvme-s3 with its NVMe every 2nd checkpoint: every other upload is the rank's own write
    to S3 (nothing drained, nothing read back): the mean of the two."""
    cfg, full = _full("design-nvme-s3", "tiers.local.interval_steps=16")
    files, file_bytes, _ = _layout(cfg)
    drained = s3cost.checkpoint_requests(files, file_bytes, 16 * MIB, verify="checksum", keep=cfg.checkpoint.keep)
    direct = s3cost.checkpoint_requests(files, file_bytes, 16 * MIB, verify="none", keep=cfg.checkpoint.keep)
    assert full["checkpoint"] == {k: (drained.get(k, 0) + direct.get(k, 0)) / 2 for k in drained}
    assert full["checkpoint"]["HEAD"] < drained["HEAD"]
    assert full["cost"]["interval_s"] == 8 * 62.5


def test_a_design_that_drains_every_upload_counts_whole_requests():
    cfg, full = _full("design-nvme-s3")
    files, file_bytes, _ = _layout(cfg)
    assert full["checkpoint"] == s3cost.checkpoint_requests(files, file_bytes, 16 * MIB, verify="checksum",
                                                             keep=cfg.checkpoint.keep)
    assert all(isinstance(v, int) for v in full["checkpoint"].values())


def test_a_global_tier_every_nth_checkpoint_costs_one_nth_a_day():
    """The same design with its S3 copy every 4th checkpoint: the same requests per upload, a
    quarter of the uploads, of the requests' cost a day, and the same bytes stored."""
    _, every = _full("design-nvme-s3")
    _, fourth = _full("design-nvme-s3", "tiers.global.interval_steps=32")
    assert fourth["checkpoint"] == every["checkpoint"]
    assert fourth["cost"]["checkpoints_per_day"] == pytest.approx(every["cost"]["checkpoints_per_day"] / 4)
    assert fourth["cost"]["requests_per_day_usd"] == pytest.approx(every["cost"]["requests_per_day_usd"] / 4)
    assert fourth["cost"]["storage_per_day_usd"] == pytest.approx(every["cost"]["storage_per_day_usd"])
