"""Per-test durations as data: ``pytest --durations-json FILE`` writes every test's seconds (setup,
call and teardown summed), outcome, markers, the xdist worker that ran it and when it ended (seconds
into the session: a part's tail, one worker busy, shows as the others' last ends) to FILE when the
session ends; .ci/test keeps one file per part of the suite in ckpt-emu-data/ci/ (docs/testing.md).
With xdist the controller writes it, from the reports its workers send.

    python3 tests/support/timings.py ckpt-emu-data/ci/*.json [--top 20]

prints the slowest tests of those files as the Markdown table docs/testing.md shows; ``--tail`` prints
instead when each worker of each file ended its last test (a part's tail: the others idle).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

OPTION = "--durations-json"


def add_option(parser) -> None:
    parser.addoption(OPTION, metavar="FILE", default=None,
                     help="write every test's duration (setup + call + teardown), outcome and markers to FILE")


class Recorder:
    """A pytest plugin: sums each test's phases from the reports (on the controller with xdist)."""

    def __init__(self, path: str):
        self.path = Path(path)
        self.tests = defaultdict(lambda: {"seconds": 0.0, "outcome": "passed", "markers": []})
        self.start = time.monotonic()

    def pytest_runtest_logreport(self, report) -> None:
        entry = self.tests[report.nodeid]
        entry["seconds"] += report.duration
        if report.failed or (report.skipped and entry["outcome"] == "passed"):
            entry["outcome"] = report.outcome
        if report.when == "call" or not entry["markers"]:
            entry["markers"] = sorted(k for k in report.keywords if k in MARKERS)
        node = getattr(report, "node", None)  # the worker that sent it (xdist's controller sets it)
        entry["worker"] = getattr(getattr(node, "gateway", None), "id", "main")
        entry["ended_s"] = round(time.monotonic() - self.start, 2)

    def pytest_sessionfinish(self, session) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tests = dict(sorted(self.tests.items(), key=lambda kv: -kv[1]["seconds"]))
        self.path.write_text(json.dumps({"tests": tests, "seconds": sum(t["seconds"] for t in tests.values())},
                                        indent=1) + "\n")


#: the markers worth keeping with a duration (the tier and how .ci/test schedules it)
MARKERS = ("quick", "system", "calm", "alone", "large")


def configure(config) -> None:
    path = config.getoption(OPTION)
    if path and not hasattr(config, "workerinput"):  # the controller (or a run without xdist)
        config.pluginmanager.register(Recorder(path), "ckpt-emu-durations")


def slowest(files, top: int = 20) -> list[tuple[str, float, str]]:
    """(test, seconds, where) of the ``top`` slowest tests in the duration files ``files``."""
    rows = []
    for f in files:
        for test, t in json.loads(Path(f).read_text())["tests"].items():
            rows.append((test, t["seconds"], Path(f).stem))
    return sorted(rows, key=lambda r: -r[1])[:top]


def last_ends(path) -> dict:
    """{worker: when its last test ended, seconds into the session} of one durations file."""
    ends: dict = {}
    for t in json.loads(Path(path).read_text())["tests"].values():
        if "ended_s" in t:
            ends[t["worker"]] = max(ends.get(t["worker"], 0.0), t["ended_s"])
    return dict(sorted(ends.items()))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="the slowest tests of .ci/test's duration files, as Markdown")
    p.add_argument("files", nargs="+")
    p.add_argument("--top", type=int, default=20)
    p.add_argument("--tail", action="store_true", help="when each worker ended its last test, per file")
    args = p.parse_args(argv)
    if args.tail:
        for f in args.files:
            print(Path(f).stem + ": " + ", ".join(f"{w} {s:.0f} s" for w, s in last_ends(f).items()))
        return 0
    print("| # | Test | Part | Seconds |\n|---|---|---|---|")
    for i, (test, seconds, part) in enumerate(slowest(args.files, args.top), 1):
        print(f"| {i} | `{test}` | {part} | {seconds:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
