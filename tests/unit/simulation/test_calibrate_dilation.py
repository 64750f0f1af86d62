"""A dilated run as a calibration, and ``simulate --as-run`` of one (issue 33 on issue 32's model).

A run at run.dilation D paces every designed transfer at its rate / D and every request latency at
the time factor k = scale x D (docs/time-dilation.md): what it measured on a paced link is the
design's rate / D (the snapshot too: the design's rate, stated or assumed), and what it measured on
an unpaced one is this host's. Hand-written results.json (tests/support/level_results.py); no emulation runs.
"""
from __future__ import annotations

import pytest
import yaml

from emulator.config import load_config
from emulator.design import resolve
from emulator.errors import UserError
from emulator.simulation.calibrate import read_calibration
from level_results import NODE, level_config, level_results


def test_a_dilated_run_calibrates_its_paced_rates_times_the_dilation(tmp_path):
    cfg_path = level_config(tmp_path)
    plain = read_calibration(str(level_results(tmp_path, cfg_path)), "async")
    (tmp_path / "d").mkdir()
    dilated = read_calibration(str(level_results(tmp_path / "d", cfg_path, dilation=4)), "async")
    assert dilated.copy_bps == pytest.approx({t: 4 * v for t, v in plain.copy_bps.items()})
    assert dilated.read_bps == pytest.approx({t: 4 * v for t, v in plain.read_bps.items()})
    assert dilated.snapshot_bps == pytest.approx(4 * plain.snapshot_bps)  # paced at the design's rate / D
    assert (dilated.fixed_pre_s, dilated.fixed_post_s) == (plain.fixed_pre_s, plain.fixed_post_s)  # once


def _with_latency(tmp_path, dilation):
    path = level_config(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["design"]["global"]["latency_ms"] = 5
    data["run"].update({"scale": 0.01, "dilation": dilation})
    path.write_text(yaml.safe_dump(data))
    return load_config(str(path))


def test_as_run_paces_a_dilated_run_as_it_ran(tmp_path):
    """The run's own bytes at the design's rates / D, each request at the latency x scale x D."""
    undilated, dilated = _with_latency(tmp_path, 1), _with_latency(tmp_path, 4)
    one, four = resolve(undilated, as_run=True), resolve(dilated, as_run=True)
    for name in ("memory", "local", "global"):
        assert four.link(name).write.node_bps == pytest.approx(one.link(name).write.node_bps / 4), name
        assert four.link(name).drain.node_bps == pytest.approx(one.link(name).drain.node_bps / 4), name
    assert four.link("peer").write.node_bps == pytest.approx(one.link("peer").write.node_bps / 4)
    assert four.link("global").latency_s == pytest.approx(0.005 * 0.01 * 4)
    assert one.link("global").latency_s == pytest.approx(0.005 * 0.01)
    assert four.job == one.job  # the same bytes


def test_as_run_of_an_auto_dilated_run_needs_its_factor(tmp_path):
    with pytest.raises(UserError, match="run.dilation"):
        resolve(_with_latency(tmp_path, "auto"), as_run=True)


def test_a_peer_fetch_the_run_timed_calibrates_the_peer_read(tmp_path):
    """A node's recovery fetched its copy back from its peer: that fetch, timed alone, is the peer
    read; the peer copies of the checkpoints shared the host with the other tiers' stages (a run of
    tests/system/run/test_levels_e2e.py: copies at 81 % of the paced NIC, its fetch at 97 %)."""
    cfg_path = level_config(tmp_path)
    copies = read_calibration(str(level_results(tmp_path, cfg_path)), "async")
    assert copies.read_bps["peer"] == copies.copy_bps["peer"]  # no fetch timed: the copies' rate
    (tmp_path / "f").mkdir()
    fetched = read_calibration(str(level_results(tmp_path / "f", cfg_path, node_fetch_s=0.05)), "async")
    assert fetched.read_bps["peer"] == pytest.approx(NODE / 0.05)
    assert fetched.copy_bps["peer"] == copies.copy_bps["peer"]
    assert any(n.startswith("peer fetch: 50.0 ms measured") for n in fetched.notes), fetched.notes
    (tmp_path / "d").mkdir()
    dilated = read_calibration(str(level_results(tmp_path / "d", cfg_path, node_fetch_s=0.05, dilation=4)), "async")
    assert dilated.read_bps["peer"] == pytest.approx(4 * NODE / 0.05)


def test_a_paced_snapshot_calibrates_its_rate_from_its_paced_time(tmp_path):
    """A run whose snapshot was paced (the design's rate, / D): its rate comes from the paced time, and
    what the host added (a swap, a paced wait's late wake-up) is not spread over the bytes. From the
    whole stall, a 2-rank test run's async overhead was predicted at 2.2 times what it measured."""
    import json
    path = level_results(tmp_path, level_config(tmp_path), dilation=4)
    raw = json.loads(path.read_text())
    for rank in raw["per_rank"]:
        for rec in rank["records"]:
            rec["paced"] = {"snapshot": rec["snapshot_s"] / 2}  # the host took as long again
    path.write_text(json.dumps(raw))
    file_bytes = raw["per_rank"][0]["records"][0]["file_bytes"]
    paced = raw["per_rank"][0]["records"][0]["snapshot_s"] / 2
    cal = read_calibration(str(path), "async")
    assert cal.snapshot_bps == pytest.approx(file_bytes / paced * 4)
