"""`ckpt-emu simulate` in this process: the sweep's outputs, and read rates calibrated as write rates
are. Its checks against real runs are in tests/system/run/test_simulate_e2e.py, against the closed
forms and Llama 3's field data in tests/system/simulation/test_simulate_long.py.
"""
import json

import pytest
from designs import LLAMA3


# --------------------------------------------------------------------------- outputs and bad input

def _main(args, capsys):
    from emulator.cli import main
    rc = main([str(a) for a in args])
    return rc, capsys.readouterr()


def test_sweep_writes_a_heatmap_and_json(tmp_path, capsys):
    import yaml
    cfg = tmp_path / "llama3.yaml"
    cfg.write_text(yaml.safe_dump(LLAMA3))
    rc, out = _main(["simulate", cfg, "--nodes", 2048, "--days", 5, "--out", tmp_path / "o",
                     "--sweep", "interval=5m,10m,20m", "--sweep", "global_bandwidth=200GiB/s,1000GiB/s"], capsys)
    assert rc == 0, out.err
    assert (tmp_path / "o" / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "o" / "simulate.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    sw = json.loads((tmp_path / "o" / "sweep.json").read_text())["sweep"]
    for mode, m in sw["modes"].items():
        grid = m["goodput"]
        assert len(grid) == 2 and all(len(row) == 3 for row in grid)
        best = max(max(row) for row in grid)
        assert m["best"]["goodput"] == best
        # more global bandwidth never hurts: the 1000 GiB/s row is at least the 200 GiB/s row
        assert all(b >= a - 1e-9 for a, b in zip(grid[0], grid[1]))
    assert "best sync" in out.out and "sweep plot" in out.out


# --------------------------------------------------------------------------- design rates after --calibrate


def test_read_rates_are_calibrated_as_write_rates_are(tmp_path):
    """One emulated node of a 2,048-node job restores from a job-wide global tier (800 GiB/s configured)
    at what its host reads, 1 GiB/s: the calibration must not take that for the whole job's aggregate
    (5.3 TB at 1 GiB/s: 1.5 hours for every node to restore), but, as for writes, for the node's own cap
    under the configured aggregate."""
    import yaml
    from tune_fakes import L405_SUBSET, fake_results

    from emulator.config import load_config
    from emulator.design import resolve
    from emulator.design.costs import restore_loads, restore_seconds
    from emulator.design.links import fair_finish
    from emulator.simulation.calibrate import read_calibration
    def _fake_results(cfg, **kw):  # a run at 6 GiB/s local, 2 GiB/s to global
        return fake_results(cfg, local_bps=6 * 2 ** 30, global_bps=2 * 2 ** 30, **kw)
    path = tmp_path / "l405.yaml"
    path.write_text(yaml.safe_dump(L405_SUBSET))
    cfg = load_config(str(path))
    node_bytes = sum(r["records"][0]["file_bytes"] for r in _fake_results(cfg)["per_rank"])
    host_gib_s = 1.0
    # its two requests paced at the time factor, as its bytes (docs/time-dilation.md)
    res = _fake_results(cfg, restores={"global": node_bytes / (host_gib_s * 2 ** 30) + 2 * 0.001 * cfg.time_factor})
    (tmp_path / "results.json").write_text(json.dumps(res))
    cal = read_calibration(str(tmp_path / "results.json"), "sync")
    d = resolve(cfg, nodes=2048, accelerators_per_node=8, calibration=cal)
    largest = d.job.heaviest.node_bytes  # a first DP replica's node: 29.9 GiB
    # the node's cap under the configured aggregate; every node at once: each its max-min fair share
    read = d.link("global").read
    assert (read.aggregate_bps, read.node_bps) == (pytest.approx(800 * 2 ** 30), pytest.approx(host_gib_s * 2 ** 30))
    storm, alone = restore_seconds(d, "global"), restore_seconds(d, "global", alone=True)
    loads = restore_loads(d)  # what each node reads back: every rank its held state
    assert storm == pytest.approx(max(fair_finish(read, loads)) + 2 * 0.001, rel=1e-6)
    assert alone < storm < d.job.checkpoint_bytes / (host_gib_s * 2 ** 30) / 10
    assert alone == pytest.approx(largest / (host_gib_s * 2 ** 30), rel=0.05)  # one alone
    assert d.sources["global_read"] == "measured" and any(n.startswith("global restore:") for n in cal.notes)
