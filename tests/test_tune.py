"""`ckpt-emu tune` end to end on a small config: measure, plan, confirm by emulation."""
import json

from emu import ckpt_emu, small_config


def test_tune_end_to_end(tmp_path):
    """About 30 s here; no absolute time is asserted (shared, noisy machines)."""
    cfg = small_config(tmp_path, ranks=2)
    proc = ckpt_emu("tune", cfg, "--accelerators", "16000", "--confirm-seconds", "6", "--json", check=True)
    r = json.loads(proc.stdout)
    m, rec, c = r["measured"], r["recommended"], r["confirmation"]
    assert m["sync_stall_s"] > m["async_stall_s"] > 0 and m["drain_s"] > 0
    assert rec["mode"] == "async" and rec["goodput"] >= rec["goodput_other_mode"]
    # the confirmation ran at the (compressed) recommended interval and every drain beat the next checkpoint
    assert 0 < c["compression"] <= 1
    assert abs(c["interval_s"] - rec["interval_s"] * c["compression"]) <= 0.05 + 1e-9
    assert c["checkpoints"] == 3 and c["drains_beat_next_checkpoint"]
    # measured overhead and overlap are of the predicted order (same measured costs, noisy machine)
    assert c["measured_overhead"] < 5 * c["predicted_overhead"] + 0.01
    assert c["measured_overlap"] < 5 * c["predicted_overlap"] + 0.01
    assert r["global_bandwidth"]["headroom"] > 1


def test_tune_rejects_bad_target(tmp_path, capsys):
    from emulator.cli import main
    assert main(["tune", str(small_config(tmp_path)), "--accelerators", "0"]) == 2
    assert "--accelerators: must be >= 1" in capsys.readouterr().err
