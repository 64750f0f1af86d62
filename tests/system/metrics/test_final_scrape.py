"""The final scrape: after a run the node leader keeps its metrics endpoint up until one scrape
that began after the run's last values were written has been answered (or
``metrics.final_scrape_timeout_s``), so a Prometheus scraping every 15 s still gets the final
figures. The user's case, through the CLI: the test scrapes only once the run says it is done."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

from emu import free_port, small_config
from prom import ROOT, http_get
from prometheus_client.parser import text_string_to_metric_families

from emulator.job import outdir

TIMEOUT_S = 60  # large: a run that waited for it fails the ratios below
SAVES = 3


def _start(tmp_path, *args, **sections):
    port = free_port()
    cfg = small_config(tmp_path, ranks=2, checkpoint={"modes": ["async"], "saves": SAVES, "loads": 1},
                       metrics={"final_scrape_timeout_s": TIMEOUT_S}, **sections)
    proc = subprocess.Popen([sys.executable, "-m", "emulator.cli", "run", str(cfg), "--quiet",
                             "--metrics-port", str(port), *args],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, port, tmp_path / "out"


def _wait_for(proc, done, what: str, limit: float = 300) -> None:
    deadline = time.monotonic() + limit
    while not done():
        assert time.monotonic() < deadline, f"{what}: not in {limit} s"
        if proc.poll() is not None:
            return
        time.sleep(0.2)


def _seconds_to_exit(proc, until) -> tuple[float, str]:
    """``until()`` (it returns once what the test waits for happened), then the seconds the run
    took to exit after it, and the run's stderr; the run must succeed."""
    try:
        until()
        mark = time.monotonic()
        proc.wait(timeout=TIMEOUT_S)
        waited = time.monotonic() - mark
    finally:
        if proc.poll() is None:
            proc.kill()
    _, err = proc.communicate()
    assert proc.returncode == 0, err
    return waited, err


def _log(out) -> str:
    path = out / outdir.LOG
    return path.read_text(errors="replace") if path.exists() else ""


def _samples(text: str) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_the_final_values_are_served_until_a_late_scrape_then_the_run_exits(tmp_path):
    proc, port, out = _start(tmp_path)
    scraped = []

    def late_scrape():  # once the run is over (its results written) and says it holds
        _wait_for(proc, lambda: (out / outdir.RESULTS).exists() and "holding metrics" in _log(out), "the hold")
        scraped.append(http_get(f"http://127.0.0.1:{port}/metrics", timeout=30))

    waited, err = _seconds_to_exit(proc, late_scrape)
    s = _samples(scraped[0])
    assert s[("ckpt_emu_checkpoints_completed_total", (("tier", "global"),))] == SAVES
    assert s[("ckpt_emu_last_complete_checkpoint_step", (("tier", "global"),))] == SAVES * 2  # interval_steps 2
    assert waited < TIMEOUT_S / 2, f"the run held {waited:.1f} s after its final scrape"
    assert "no scrape" not in err


def test_a_zero_timeout_exits_at_once(tmp_path):
    proc, port, out = _start(tmp_path, "--set", "metrics.final_scrape_timeout_s=0")
    waited, _ = _seconds_to_exit(proc, lambda: _wait_for(proc, lambda: (out / outdir.RESULTS).exists(), "results"))
    assert waited < TIMEOUT_S / 2
    assert "holding metrics" not in _log(out)


def test_without_a_scrape_the_hold_ends_at_its_timeout_and_says_so(tmp_path):
    proc, port, out = _start(tmp_path, "--set", "metrics.final_scrape_timeout_s=1")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "holding metrics" in _log(out)
    assert "no scrape of the final metrics" in err and "metrics.final_scrape_timeout_s" in err


def test_a_run_stopped_early_does_not_hold(tmp_path):
    """Ctrl-C (the stop file): the user wants the run over; no scrape comes here."""
    proc, port, out = _start(tmp_path, "--duration", f"{10 * TIMEOUT_S}s")

    def stop_after_a_checkpoint():
        _wait_for(proc, lambda: (out / outdir.LOG).exists() and "ckpt_emu_checkpoints_completed_total{tier=\"global\"} 1"
                  in _try_scrape(port), "a first checkpoint")
        (out / outdir.STOP).touch()

    waited, _ = _seconds_to_exit(proc, stop_after_a_checkpoint)
    assert waited < TIMEOUT_S / 2
    assert "holding metrics" not in _log(out)


def test_ctrl_c_ends_the_hold(tmp_path):
    proc, port, out = _start(tmp_path)

    def interrupt_the_hold():
        _wait_for(proc, lambda: "holding metrics" in _log(out), "the hold")
        assert proc.poll() is None, "the run did not hold"
        proc.send_signal(signal.SIGINT)  # what the CLI does with it: the stop file

    waited, _ = _seconds_to_exit(proc, interrupt_the_hold)
    assert waited < TIMEOUT_S / 2


def _try_scrape(port: int) -> str:
    try:
        return http_get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    except OSError:
        return ""
