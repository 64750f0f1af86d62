"""Two tiers, one suite (docs/testing.md): every test under tests/unit/ is marked ``quick`` and runs
under a guard (support/quickguard.py) that fails it if it starts torchrun or a server; every test under
tests/system/ is marked ``system``. The shared helpers are in tests/support/."""
import sys
from collections import Counter
from pathlib import Path

import pytest

# pytest keeps a test module's rewritten asserts in __pycache__ only where bytecode may be written:
# under PYTHONDONTWRITEBYTECODE (this machine's and CI's) every worker of every run rewrote every test
# module again: the quick tier's collection took 16.5 s a worker, 11 s with them kept (docs/testing.md)
sys.dont_write_bytecode = False
TESTS = Path(__file__).parent
# the helpers every tier of tests shares (tests/support/), imported as plain modules: `from emu import ...`
sys.path.insert(0, str(TESTS / "support"))

import quickguard  # noqa: E402
import tierdir  # noqa: E402
import timings  # noqa: E402
from rgwserver import rgw_server  # noqa: E402,F401 - one RGW for the whole session

#: the first folder under tests/ -> the marker of every test in it
TIERS = {"unit": "quick", "system": "system"}
#: files an xdist worker hands out first: the longest (three whole runs of the default, 3 min) was
#: the parallel part's tail when xdist handed it out last (one test: files with more went first).
#: The kill campaign and the alert rule handed out beside it, as well, overloaded the start: the
#: scale test's dilated runs ran a phase past its pace (docs/testing.md)
#: Then the one that waits on Prometheus' alert evaluations (2 min, little CPU): among the
#: one-test files it started in the last 3 minutes and ended the part, one worker busy
FIRST = ("tests/system/run/test_scale.py", "tests/system/metrics/test_metrics_tiers_live.py")
#: one-test files that mostly wait (a 60-second soak): handed out before the other one-test files,
#: not in path order, which left them for last, with one worker busy and the 2 cores 70 % idle
WAITING_FIRST = ("tests/system/run/test_progress_e2e.py",)


def tier(path: Path) -> str:
    """The tier of the test file at ``path``; a file outside tests/unit/ and tests/system/ is an error."""
    top = Path(path).resolve().relative_to(TESTS.resolve()).parts[0]
    if top not in TIERS:
        raise pytest.UsageError(f"{path}: a test file belongs under tests/unit/ or tests/system/ (docs/testing.md)")
    return TIERS[top]


def _hand_out_order(items) -> None:
    """xdist's own order of files (the most tests first, its --loadscope-reorder), but FIRST before
    them all and WAITING_FIRST before the files with as many tests: .ci/test turns xdist's reorder
    off, so it hands the files out in this order."""
    tests = Counter(item.path for item in items)
    root = TESTS.resolve().parent

    def order(item):
        name = Path(item.path).resolve().relative_to(root).as_posix()
        return FIRST.index(name) if name in FIRST else len(FIRST), -tests[item.path], name not in WAITING_FIRST
    items.sort(key=order)


def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):  # an xdist worker's collection: the order files are handed out in
        _hand_out_order(items)
    for item in items:
        item.add_marker(tier(item.path))
        # an S3 test marked rgw_xfail is expected to fail against RGW, and must still pass against moto
        mark = item.get_closest_marker("rgw_xfail")
        params = getattr(item, "callspec", None)
        if mark and params and params.params.get("s3_server") == "rgw":
            reason = mark.kwargs.get("reason") or mark.args[0]
            item.add_marker(pytest.mark.xfail(strict=True, reason=f"on RGW: {reason}"))


def pytest_addoption(parser):
    timings.add_option(parser)  # --durations-json FILE: every test's seconds (.ci/test keeps them)


def pytest_configure(config):
    """This process's default tier folder for the session (tests/support/tierdir.py): what the
    fixtures shared by several tests see; each test gets its own (``own_tiers_dir``)."""
    config._ckpt_emu_tiers_dir = tierdir.start_session()
    timings.configure(config)


def pytest_unconfigure(config):
    folder = getattr(config, "_ckpt_emu_tiers_dir", None)
    if folder is not None:
        tierdir.end_session(folder)


@pytest.fixture(autouse=True)
def own_tiers_dir(monkeypatch):
    """Every test's default tier folder (``{tiers_dir}`` of the shipped configs) is its own: two
    suites, or a suite and a run of the same user's, never meet in /dev/shm/ckpt-emu-<uid>."""
    with tierdir.own(monkeypatch) as folder:
        yield folder


@pytest.fixture(autouse=True)
def torch_save_config_restored():
    """torch's process-wide ``serialization.config.save.compute_crc32`` as it was before the test: a
    rank's or the bench's setup sets it (off by default), and a restore reads a file by its writer's
    layout only with it off, so a test that set it must not decide how a later one restores."""
    import torch.utils.serialization as ser
    before = ser.config.save.compute_crc32
    yield
    ser.config.save.compute_crc32 = before


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if item.get_closest_marker("quick"):
        quickguard.check_needs(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A quick test that starts torchrun, a run or a server fails, naming what it started; its
    fixtures (module-scoped ones too) are set up and torn down under the guard."""
    if not item.get_closest_marker("quick"):
        yield
        return
    with pytest.MonkeyPatch.context() as mp, quickguard.guarding(mp) as refused:
        item._quick_refused, item._quick_reported = refused, 0
        yield
        del item._quick_refused


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A quick test whose process or a child of it started what the quick tier may not fails,
    even where the code under test swallowed the guard's error."""
    report = (yield).get_result()
    refused = getattr(item, "_quick_refused", None)
    if refused is None:
        return
    seen = refused()
    new, item._quick_reported = seen[item._quick_reported:], len(seen)
    if new and report.passed:
        report.outcome = "failed"
        report.longrepr = "\n".join(dict.fromkeys(quickguard.message(what) for what in new))
