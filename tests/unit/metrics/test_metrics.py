"""emulator.metrics: values after calls (a registry per test, no global state), naming,
`promtool check metrics`, and the multiprocess node endpoint fed by two real processes."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from dashboards import ABSENT_UNTIL_MEASURED, queried_names
from prom import ROOT, http_get, require
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from emulator import metrics as M
from emulator.metrics import Metrics

ALLOWED_LABELS = {"mode", "tier", "phase", "backend", "op", "kind", "failure_class", "le",
                  "preset", "scale", "ranks", "nodes", "modes", "version"}  # the last six: ckpt_emu_info only


@pytest.fixture
def reg():
    return CollectorRegistry()


@pytest.fixture
def m(reg):
    before = time.time()
    metrics = Metrics(reg, tick_s=0.02)
    metrics.created = (before, time.time())  # when it was made: its start time lies between
    yield metrics
    metrics.close()


def val(reg, name, **labels):
    return reg.get_sample_value(name, labels)


def exercise(m: Metrics) -> None:
    """Every call the emulator makes, once."""
    m.set_info(preset="llama3-8b", scale=0.001, ranks=8, nodes=1, modes=["sync", "async"], version="1.0")
    for mode in ("sync", "async"):
        m.set_interval(mode, 60)
        m.observe_step(mode, 0.5)
        m.add_training_seconds(mode, 0.6)
        m.observe_stall(mode, 0.2)
        m.add_stall_seconds(mode, 0.2)
        m.set_drain_overlap(mode, 0.05)
        m.set_throughput("save", mode, 2e9)
    m.deadline_missed("async")
    for phase in ("snapshot", "d2h", "local_write", "drain", "load"):
        m.observe_phase(phase, "global" if phase == "drain" else "local", 0.1, backend="dir")
    m.add_bytes("write", "local", 1000, backend="dir")
    m.add_bytes("write", "global", 1000, backend="s3")
    m.add_bytes("read", "local", 1000, backend="dir")
    m.drain_started(1000)
    m.drain_progress(1000)
    m.drain_finished(0.01)
    m.checkpoint_complete("local", 12, time.time())
    m.checkpoint_complete("global", 12, time.time())
    m.set_throughput("load", "async", 3e9)
    m.count_fault("checksum_mismatch")
    for tier in M.TIERS:
        m.set_tier_interval(tier, 60)
        m.observe_tier_lag(tier, 0.5)
    for phase, tier in (("replicate", "peer"), ("persist", "local"), ("fetch", "peer")):
        m.observe_phase(phase, tier, 0.1, backend="memory")
    m.observe_recovery("node", 30.0, 45.0)


# --------------------------------------------------------------------------- values

def test_private_registries_do_not_share_state():
    r1, r2 = CollectorRegistry(), CollectorRegistry()
    a, _ = Metrics(r1), Metrics(r2)  # the second only registers its metrics on r2
    a.observe_stall("sync", 1.0)
    assert val(r1, "ckpt_emu_checkpoint_stall_seconds_count", mode="sync") == 1
    assert val(r2, "ckpt_emu_checkpoint_stall_seconds_count", mode="sync") == 0  # created, nothing observed
    assert Metrics().registry is not Metrics().registry


def test_stall_histogram_and_overhead_counters(m, reg):
    for mode in M.MODES:  # created at 0 at start, so rate() sees the first increment
        assert val(reg, "ckpt_emu_stall_seconds_total", mode=mode) == 0
        assert val(reg, "ckpt_emu_training_seconds_total", mode=mode) == 0
    assert val(reg, "ckpt_emu_drain_overlap_ratio", mode="sync") is None  # not started: no overlap to speak of
    before = time.time()
    m.set_interval("sync", 30)
    after = time.time()
    assert val(reg, "ckpt_emu_checkpoint_interval_seconds", mode="sync") == 30
    assert val(reg, "ckpt_emu_drain_overlap_ratio", mode="sync") == 0  # started, no drain yet
    assert before <= val(reg, "ckpt_emu_mode_start_time_seconds", mode="sync") <= after  # the moment it started
    assert val(reg, "ckpt_emu_mode_start_time_seconds", mode="async") is None
    m.observe_stall("sync", 0.3)
    m.observe_stall("sync", 4.0)
    m.add_stall_seconds("sync", 4.3)
    m.add_training_seconds("sync", 10.0)
    m.add_training_seconds("sync", 10.0)
    assert val(reg, "ckpt_emu_checkpoint_stall_seconds_count", mode="sync") == 2
    assert val(reg, "ckpt_emu_checkpoint_stall_seconds_sum", mode="sync") == pytest.approx(4.3)
    assert val(reg, "ckpt_emu_checkpoint_stall_seconds_bucket", mode="sync", le="0.5") == 1
    assert val(reg, "ckpt_emu_checkpoint_stall_seconds_bucket", mode="sync", le="5.0") == 2
    assert val(reg, "ckpt_emu_checkpoint_stall_seconds_bucket", mode="sync", le="+Inf") == 2
    assert val(reg, "ckpt_emu_stall_seconds_total", mode="sync") == pytest.approx(4.3)
    assert val(reg, "ckpt_emu_training_seconds_total", mode="sync") == 20
    assert val(reg, "ckpt_emu_stall_seconds_total", mode="async") == 0  # async never started


def test_phases_bytes_steps(m, reg):
    m.observe_phase("local_write", "local", 0.2, backend="dir")
    m.observe_phase("drain", "global", 3.0, backend="s3")
    m.observe_step("async", 0.5)
    m.add_bytes("write", "local", 100, backend="dir")
    m.add_bytes("write", "local", 50, backend="dir")
    m.add_bytes("write", "global", 150, backend="s3")
    m.add_bytes("read", "global", 70, backend="s3")
    assert val(reg, "ckpt_emu_phase_duration_seconds_count", phase="local_write", tier="local", backend="dir") == 1
    assert val(reg, "ckpt_emu_phase_duration_seconds_sum", phase="drain", tier="global", backend="s3") == 3.0
    assert val(reg, "ckpt_emu_step_duration_seconds_count", mode="async") == 1
    assert val(reg, "ckpt_emu_written_bytes_total", tier="local", backend="dir") == 150
    assert val(reg, "ckpt_emu_written_bytes_total", tier="global", backend="s3") == 150
    assert val(reg, "ckpt_emu_read_bytes_total", tier="global", backend="s3") == 70


def test_drain_gauges_backlog_and_failures(m, reg):
    m.drain_started(1000)
    assert val(reg, "ckpt_emu_drains_in_flight") == 1
    assert val(reg, "ckpt_emu_drain_backlog_bytes") == 1000
    m.drain_progress(400)
    assert val(reg, "ckpt_emu_drain_backlog_bytes") == 600
    m.drain_finished(1.0)
    assert val(reg, "ckpt_emu_drains_in_flight") == 0
    assert val(reg, "ckpt_emu_drain_backlog_bytes") == 0
    # abandoned: the unreported rest leaves the backlog, the failure is counted
    m.drain_started(500)
    m.drain_progress(100)
    m.drain_finished(0.5, ok=False)
    assert val(reg, "ckpt_emu_drain_backlog_bytes") == 0
    assert val(reg, "ckpt_emu_faults_total", kind="drain_failed") == 1


def test_drain_busy_seconds_accrue_while_draining(m, reg, monkeypatch):
    """On a fake clock: busy time grows while a drain is in flight (by the ticker, not only when the
    drain ends), counts overlapping drains once, and stops growing when none is in flight."""
    now = [0.0]  # one clock for the test's thread and the ticker's
    monkeypatch.setattr(M, "time", SimpleNamespace(**{**vars(time), "monotonic": lambda: now[0]}))
    busy = lambda: val(reg, "ckpt_emu_drain_busy_seconds_total")  # noqa: E731
    assert busy() == 0
    m.drain_started(10)
    now[0] += 0.3
    # the ticker thread (every 0.02 s of real time) accrues it during the drain
    wait_until(lambda: busy() == pytest.approx(0.3), "busy time must grow during a drain, not only at its end")
    m.drain_started(10)  # a second drain in flight at the same time counts once
    now[0] += 0.2
    m.drain_finished(0.5)
    m.drain_finished(0.2)
    assert busy() == pytest.approx(0.5)
    now[0] += 0.1
    time.sleep(0.1)  # five ticks of the ticker, if it still ran
    assert busy() == pytest.approx(0.5)  # idle: no growth
    m.drain_finished(2.0)  # a finished drain reported without a start adds its duration
    assert busy() == pytest.approx(2.5)


def wait_until(ok, message: str, timeout: float = 30.0) -> None:
    """Poll ``ok`` (a real thread has to get to it); fail with ``message`` if it never holds."""
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, message
        time.sleep(0.01)


def test_ticker_sleeps_when_idle_and_close_is_idempotent(reg):
    m = Metrics(reg, tick_s=0.01)
    assert m._ticker is None  # no thread until the first drain
    m.drain_started(1)
    m.drain_finished(0.0)
    assert m._ticker.is_alive()
    m.close()
    m.close()
    assert not m._ticker.is_alive()
    m.drain_started(1)  # after close: still counted, at progress and finish
    time.sleep(0.05)
    m.drain_finished(0.0)
    assert val(reg, "ckpt_emu_drain_busy_seconds_total") >= 0.05


def test_deadline_faults_completion_overlap_throughput_info(m, reg):
    for mode in ("sync", "async"):  # created at 0 so increase() sees the first miss
        assert val(reg, "ckpt_emu_drain_deadline_misses_total", mode=mode) == 0
    for kind in M.FAULT_KINDS:
        assert val(reg, "ckpt_emu_faults_total", kind=kind) == 0
    m.deadline_missed("async")
    assert val(reg, "ckpt_emu_drain_deadline_misses_total", mode="async") == 1
    m.count_fault("drain_abandoned")
    assert val(reg, "ckpt_emu_faults_total", kind="drain_abandoned") == 1
    m.checkpoint_complete("global", 40, 1_700_000_000.5)
    m.checkpoint_complete("global", 48, 1_700_000_060.5)
    assert val(reg, "ckpt_emu_last_complete_checkpoint_timestamp_seconds", tier="global") == 1_700_000_060.5
    assert val(reg, "ckpt_emu_last_complete_checkpoint_step", tier="global") == 48
    assert val(reg, "ckpt_emu_checkpoints_completed_total", tier="global") == 2
    assert val(reg, "ckpt_emu_checkpoints_completed_total", tier="local") is None  # never announced
    m.set_drain_overlap("sync", 1.7)
    assert val(reg, "ckpt_emu_drain_overlap_ratio", mode="sync") == 1.7  # not capped: above 1, drains lag
    m.set_drain_overlap("sync", 0.08)
    assert val(reg, "ckpt_emu_drain_overlap_ratio", mode="sync") == 0.08
    m.set_throughput("save", "sync", 1.5e9)
    m.set_throughput("load", "async", 2.5e9)
    assert val(reg, "ckpt_emu_throughput_bytes_per_second", op="save", mode="sync") == 1.5e9
    assert val(reg, "ckpt_emu_throughput_bytes_per_second", op="load", mode="async") == 2.5e9
    m.set_info(preset="llama3-70b", scale=0.01, ranks=64, nodes=8, modes=["async"], version="0.3")
    assert val(reg, "ckpt_emu_info", preset="llama3-70b", scale="0.01", ranks="64", nodes="8", modes="async",
               version="0.3") == 1
    started = val(reg, "ckpt_emu_start_time_seconds")
    assert m.created[0] <= started <= m.created[1]  # the moment the metrics started


@pytest.mark.parametrize("call", [
    lambda m: m.observe_stall("fast", 1),
    lambda m: m.observe_phase("upload", "global", 1, backend="dir"),
    lambda m: m.observe_phase("drain", "nvme", 1, backend="dir"),
    lambda m: m.add_bytes("write", "local", 1, backend="FTP server"),
    lambda m: m.add_bytes("copy", "local", 1, backend="dir"),
    lambda m: m.set_throughput("restore", "sync", 1),
    lambda m: m.count_fault("gremlins"),
    lambda m: m.set_interval("both", 1),
])
def test_unknown_label_values_fail_at_once(m, call):
    with pytest.raises(ValueError, match="metrics:"):
        call(m)


def test_every_fault_kind_the_code_counts_is_accepted(m):
    """Tally forwards only kinds it finds in FAULT_KINDS: a new kind must be added there."""
    used = set()
    for path in (ROOT / "emulator").rglob("*.py"):
        used |= set(re.findall(r'(?:tally\.count|count_fault)\(\s*"(\w+)"', path.read_text()))
    assert used, "found no fault counting at all: did the call sites change?"
    assert used <= set(M.FAULT_KINDS), used - set(M.FAULT_KINDS)
    for kind in used:
        m.count_fault(kind)


def test_multiprocess_needs_the_directory_before_import(monkeypatch, tmp_path):
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    with pytest.raises(RuntimeError, match="PROMETHEUS_MULTIPROC_DIR"):
        Metrics(multiprocess=True)  # prometheus_client was imported without it in this process


def test_tiers_announced_create_their_bytes_and_phases(reg):
    """The phases a run of that layout has, on the tier each goes to, with nothing observed."""
    def phases(r):
        return {(s.labels["phase"], s.labels["tier"], s.labels["backend"])
                for f in families(r) if f.name == "ckpt_emu_phase_duration_seconds"
                for s in f.samples if s.name.endswith("_count")}

    def written(r):
        return {(tier, backend) for tier in M.TIERS for backend in ("dir", "s3")
                if val(r, "ckpt_emu_written_bytes_total", tier=tier, backend=backend) == 0}
    Metrics(reg).set_tiers(local="dir", global_="s3")
    assert phases(reg) == {("snapshot", "local", "dir"), ("local_write", "local", "dir"), ("load", "local", "dir"),
                           ("drain", "global", "s3"), ("load", "global", "s3")}
    assert written(reg) == {("local", "dir"), ("global", "s3")}
    assert val(reg, "ckpt_emu_read_bytes_total", tier="global", backend="s3") == 0
    direct = CollectorRegistry()  # no local tier: ranks write to the global tier, nothing drains
    Metrics(direct).set_tiers(local=None, global_="s3")
    assert phases(direct) == {("snapshot", "global", "s3"), ("local_write", "global", "s3"), ("load", "global", "s3")}
    assert written(direct) == {("global", "s3")}
    with pytest.raises(ValueError, match="backend"):
        Metrics().set_tiers(local="Local Disk", global_="s3")


# --------------------------------------------------------------------------- naming

def families(reg):
    return list(text_string_to_metric_families(generate_latest(reg).decode()))


def test_naming_conventions_and_no_step_label(m, reg):
    exercise(m)
    # the text format shows a counter's or histogram's _created series as a gauge family of its own
    fams = [f for f in families(reg) if not f.name.endswith("_created")]
    names = {f.name for f in fams}
    assert len(names) >= 15
    for f in fams:
        assert f.name.startswith("ckpt_emu_"), f.name
        assert re.fullmatch(r"[a-z][a-z0-9_]*", f.name), f.name
        assert f.type in ("counter", "gauge", "histogram"), (f.name, f.type)  # never a summary
        assert f.documentation.strip(), f.name
        for s in f.samples:
            assert set(s.labels) <= ALLOWED_LABELS, (s.name, s.labels)
            assert "step" not in s.labels
            if f.type == "counter":
                assert s.name.endswith("_total"), s.name
            else:
                assert not s.name.endswith("_total"), s.name
        if f.type == "histogram" or "seconds" in f.name:
            assert re.search(r"_seconds(_total)?$", f.name), f.name  # base unit, no ms
        if "bytes" in f.name:
            assert re.search(r"_bytes(_total|_per_second)?$", f.name), f.name
        if f.name.endswith("_ratio"):
            assert all(0 <= s.value <= 1 for s in f.samples)
    for wanted in ("ckpt_emu_checkpoint_stall_seconds", "ckpt_emu_phase_duration_seconds", "ckpt_emu_written_bytes",
                   "ckpt_emu_read_bytes", "ckpt_emu_drains_in_flight", "ckpt_emu_drain_backlog_bytes",
                   "ckpt_emu_drain_overlap_ratio", "ckpt_emu_drain_busy_seconds", "ckpt_emu_drain_deadline_misses",
                   "ckpt_emu_last_complete_checkpoint_timestamp_seconds", "ckpt_emu_step_duration_seconds",
                   "ckpt_emu_training_seconds", "ckpt_emu_stall_seconds", "ckpt_emu_info"):
        assert wanted in names, wanted


def test_promtool_check_metrics(m, reg):
    exercise(m)
    text = generate_latest(reg).decode()
    r = subprocess.run([require("promtool"), "check", "metrics"], input=text, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


# --------------------------------------------------------------------------- multiprocess

CHILD = textwrap.dedent("""
    import os, sys, time
    from emulator import metrics
    role, value = sys.argv[1], int(sys.argv[2])
    m = metrics.Metrics(multiprocess=True)
    m.set_info(preset="llama3-8b", scale=0.001, ranks=2, nodes=1, modes=["sync"], version="t")
    m.set_interval("sync", 10)
    m.observe_stall("sync", 0.1 * value)
    m.add_stall_seconds("sync", 0.1 * value)
    m.add_training_seconds("sync", 10)
    m.add_bytes("write", "local", 100 * value, backend="dir")
    m.drain_started(1000 * value)
    m.checkpoint_complete("local", 10, 1_700_000_000 + value)
    m.set_tier_interval("peer", 2.0 * value)
    m.observe_tier_lag("peer", 0.1 / value)
    if role == "leader":
        m.set_throughput("save", "sync", 1e9)
        server = metrics.serve_node("127.0.0.1", 0)
        print("ready", server.port, flush=True)
    else:
        print("ready", 0, flush=True)
    sys.stdin.readline()  # stay alive (live gauges count) until told to go
    m.close()
""")


def _start_child(role: str, value: int, mp_dir: Path) -> tuple[subprocess.Popen, int]:
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(mp_dir), PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", CHILD, role, str(value)], cwd=ROOT, env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    line = proc.stdout.readline().split()
    if not line or line[0] != "ready":
        proc.kill()
        raise AssertionError(f"{role} did not start: {proc.stderr.read()}")
    return proc, int(line[1])


def _scrape(port: int) -> tuple[str, dict]:
    text = http_get(f"http://127.0.0.1:{port}/metrics")
    samples = {}
    for f in text_string_to_metric_families(text):
        for s in f.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return text, samples


def test_one_node_endpoint_aggregates_two_real_processes(tmp_path):
    mp_dir = tmp_path / "node0"
    mp_dir.mkdir(parents=True)
    (mp_dir / "counter_999999.db").write_bytes(b"garbage from an earlier run")
    M.prepare_multiprocess_dir(mp_dir)
    assert list(mp_dir.iterdir()) == []
    leader, port = _start_child("leader", 1, mp_dir)
    follower, _ = _start_child("follower", 2, mp_dir)
    try:
        text, s = _scrape(port)
        assert s[("ckpt_emu_written_bytes_total", (("backend", "dir"), ("tier", "local")))] == 300  # summed
        assert s[("ckpt_emu_checkpoint_stall_seconds_count", (("mode", "sync"),))] == 2
        assert s[("ckpt_emu_training_seconds_total", (("mode", "sync"),))] == 20
        assert s[("ckpt_emu_drains_in_flight", ())] == 2  # livesum over live processes
        assert s[("ckpt_emu_drain_backlog_bytes", ())] == 3000
        assert s[("ckpt_emu_last_complete_checkpoint_timestamp_seconds", (("tier", "local"),))] == 1_700_000_002
        assert s[("ckpt_emu_checkpoint_interval_seconds", (("mode", "sync"),))] == 10  # max, not a sum
        assert s[("ckpt_emu_tier_interval_seconds", (("tier", "peer"),))] == 4.0  # max: the larger announcement
        assert s[("ckpt_emu_last_tier_durability_lag_seconds", (("tier", "peer"),))] == 0.05  # the follower's, later: not the max
        assert s[("ckpt_emu_tier_durability_lag_seconds_count", (("tier", "peer"),))] == 2  # summed
        assert s[("ckpt_emu_throughput_bytes_per_second", (("mode", "sync"), ("op", "save")))] == 1e9
        assert sum(1 for (n, _) in s if n == "ckpt_emu_info") == 1
        assert not any(dict(labels).get("pid") for _, labels in s), "a per-process series leaked"
        r = subprocess.run([require("promtool"), "check", "metrics"], input=text, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr

        # the follower exits: its counters stay, its live gauges leave the sums
        follower.communicate("\n", timeout=30)
        M.mark_process_dead(follower.pid, path=mp_dir)
        _, s = _scrape(port)
        assert s[("ckpt_emu_written_bytes_total", (("backend", "dir"), ("tier", "local")))] == 300
        assert s[("ckpt_emu_drains_in_flight", ())] == 1
        assert s[("ckpt_emu_drain_backlog_bytes", ())] == 1000
    finally:
        for p in (leader, follower):
            if p.poll() is None:
                p.communicate("\n", timeout=30)


# --------------------------------------------------------------------------- the final scrape

@pytest.fixture
def node_server(tmp_path):
    server = M.serve_node("127.0.0.1", 0, path=tmp_path)
    yield server
    server.close()


def test_wait_for_scrape_is_false_when_no_scrape_comes(node_server):
    assert node_server.wait_for_scrape(time.monotonic(), 0.2) is False
    assert node_server.wait_for_scrape(time.monotonic(), 0) is False


def test_a_scrape_that_started_before_since_does_not_count(node_server):
    _scrape(node_server.port)
    since = time.monotonic()
    assert node_server.wait_for_scrape(since, 0.2) is False
    _scrape(node_server.port)
    assert node_server.wait_for_scrape(since, 30) is True
    assert node_server.scrapes == 2


def test_wait_for_scrape_returns_once_a_later_scrape_completed(node_server):
    import threading
    since, answer = time.monotonic(), []
    waiter = threading.Thread(target=lambda: answer.append(node_server.wait_for_scrape(since, 60)))
    waiter.start()
    _scrape(node_server.port)
    waiter.join(60)
    assert answer == [True]  # the scrape ended the wait: a timeout answers False


# --------------------------------------------------------------------------- before the first checkpoint

BASELINE_CHILD = textwrap.dedent("""
    import sys
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector
    from emulator import metrics
    m = metrics.Metrics(multiprocess=True)  # what a rank does at start (emulator/rank/run.py)
    m.set_info(preset="llama3-8b", scale=0.001, ranks=1, nodes=1, modes=["sync", "async"], version="t")
    m.set_tiers(local="dir", global_="s3")
    for tier, seconds in (("memory", 1.0), ("peer", 2.0), ("local", 4.0), ("global", 8.0)):
        m.set_tier_interval(tier, seconds)  # each configured tier, at start
    m.set_interval("none", 0.0)  # the baseline mode starts: steps, no checkpoint
    for _ in range(3):
        m.observe_step("none", 0.25)
        m.add_training_seconds("none", 0.25)
    registry = CollectorRegistry()
    MultiProcessCollector(registry)
    sys.stdout.write(generate_latest(registry).decode())
    m.close()
""")

def test_every_queried_family_is_exported_during_the_baseline(tmp_path):
    """A rank that has only trained baseline steps: every family the dashboard or the rules read
    is on the endpoint (counters at 0, histograms with no observation, the mode's overlap at 0),
    except those whose 0 would be false, which must stay absent."""
    mp_dir = tmp_path / "node0"
    M.prepare_multiprocess_dir(mp_dir)
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(mp_dir), PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", BASELINE_CHILD], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    series = {}
    for f in text_string_to_metric_families(r.stdout):
        for s in f.samples:
            series.setdefault(s.name, []).append(s.labels)

    wanted = queried_names() - set(ABSENT_UNTIL_MEASURED)
    assert "ckpt_emu_checkpoint_stall_seconds_bucket" in wanted, "the dashboard's queries were not found"
    missing, early = sorted(wanted - set(series)), sorted(set(ABSENT_UNTIL_MEASURED) & set(series))
    assert not missing, f"queried but not exported before the first checkpoint: {missing}"
    assert not early, f"exported before there is a true value: {early}"

    def modes(name, **labels):
        return {s["mode"] for s in series.get(name, []) if labels.items() <= s.items()}
    for name in ("ckpt_emu_stall_seconds_total", "ckpt_emu_training_seconds_total",
                 "ckpt_emu_drain_deadline_misses_total", "ckpt_emu_checkpoint_stall_seconds_count",
                 "ckpt_emu_durability_lag_seconds_count", "ckpt_emu_step_duration_seconds_count"):
        assert modes(name) == set(M.MODES), name
    assert modes("ckpt_emu_checkpoint_stall_seconds_bucket", le="+Inf") == set(M.MODES)
    assert modes("ckpt_emu_drain_overlap_ratio") == {"none"}  # the mode that started: no drain yet, truly 0
    assert modes("ckpt_emu_mode_start_time_seconds") == {"none"}  # the age rule ignores it: no checkpointing mode yet
    assert {(s["tier"], s["backend"]) for s in series["ckpt_emu_written_bytes_total"]} == {("local", "dir"),
                                                                                         ("global", "s3")}

    text = r.stdout
    for line in text.splitlines():  # nothing but the baseline's steps has a value yet
        if line.startswith("ckpt_emu_") and not line.startswith(("ckpt_emu_info", "ckpt_emu_start_time_seconds",
                                                                  "ckpt_emu_tier_interval_seconds")) \
                and 'mode="none"' not in line:
            assert float(line.rsplit(" ", 1)[1]) == 0, line
    check = subprocess.run([require("promtool"), "check", "metrics"], input=text, capture_output=True, text=True,
                           timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
