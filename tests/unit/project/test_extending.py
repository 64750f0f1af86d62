"""docs/extending.md, checked by doing it: the example backend and fault kind in
tests/support/example_backend.py use only the documented steps."""
from __future__ import annotations

import asyncio
import io
import os

import pytest
from emu import small_config
from example_backend import EveryNthFails, FlatDirTier

from tiers.directory import DirTier
from tiers.testing import TierContract



class TestExampleBackend(TierContract):
    @pytest.fixture
    def tier(self, tmp_path):
        return FlatDirTier(tmp_path / "flat")


def test_a_config_names_the_example_backend_by_module_and_class(tmp_path):
    from emulator.config import load_config
    cfg = load_config(str(small_config(tmp_path)), ["tiers.global={backend: 'example_backend:FlatDirTier', "
                                                     f"folder: '{tmp_path}/flat'}}"])
    assert cfg.tiers.global_.options.folder == f"{tmp_path}/flat"
    from emulator.errors import ConfigError
    with pytest.raises(ConfigError, match=r"^tiers.global.folder: a flatdir tier needs a folder$"):
        load_config(str(small_config(tmp_path)), ["tiers.global={backend: 'example_backend:FlatDirTier'}"])


def test_the_example_fault_kind_is_retried_by_the_drainer(tmp_path):
    from emulator.checkpoint.drainer import Drainer
    from emulator.checkpoint.integrity import crc_of_stream
    from emulator.checkpoint.layout import FileEntry
    from emulator.checkpoint.retry import RetryPolicy
    local, glob = DirTier(tmp_path / "local"), EveryNthFails(DirTier(tmp_path / "global"), n=3)
    entries = []
    for i in range(3):
        data = os.urandom(1000)
        asyncio.run(local.put(f"s/f{i}", data))
        entries.append(FileEntry(f"s/f{i}", i, 1000, crc_of_stream(io.BytesIO(data))[0]))
    result = asyncio.run(Drainer(local, glob, concurrency=1, policy=RetryPolicy(retries=3, backoff_s=0.01))
                         .drain(entries))
    assert result.ok and result.retries == 2 and glob.requests == 8  # copy + verify per attempt
    with pytest.raises(Exception, match="every-nth fault"):  # the sync doors fail too
        for _ in range(3):
            glob.open_read("s/f0").close()


def test_every_metrics_method_has_a_null_twin():
    """Step 2 of "A metric": NullMetrics needs no second definition."""
    from emulator.metrics import Metrics, NullMetrics
    public = {n for n, v in vars(Metrics).items() if callable(v) and not n.startswith("_")}
    assert public and all(callable(getattr(NullMetrics(), n)) for n in public)


def test_a_metric_added_to_a_table_is_exposed(monkeypatch):
    from prometheus_client import generate_latest

    import emulator.metrics as metrics
    monkeypatch.setitem(metrics._COUNTERS, "example_events", (("mode",), "Events of the extending example."))
    m = metrics.Metrics()
    m._c["example_events"].labels(mode="sync").inc(3)
    text = generate_latest(m.registry).decode()
    assert 'ckpt_emu_example_events_total{mode="sync"} 3.0' in text
    assert "# HELP ckpt_emu_example_events_total Events of the extending example." in text
