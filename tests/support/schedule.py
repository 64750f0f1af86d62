"""The order .ci/test hands test files to its workers: the longest first, so that no long file starts
last and keeps one worker busy alone at the end (pytest-xdist's ``--dist loadfile`` sends whole files;
with ``--no-loadscope-reorder`` in the order its workers collected them, which conftest.py sorts
with this module: otherwise it sends the files with the most tests first). Only the order depends on
these figures; no test reads them.

Seconds per file, measured on the 2-core development machine (pytest-xdist, 2 workers); a file not
listed counts by its tests (a system test a few seconds, a quick one next to nothing).
"""
from __future__ import annotations

SECONDS = {
    "system/storage/test_large_objects.py": 345,
    "system/run/test_levels_e2e.py": 263,
    "system/run/test_agreement_e2e.py": 260,
    "system/simulation/test_agreement_sweep.py": 236,
    "system/run/test_scale.py": 222,
    "system/s3/test_s3_limits_server.py": 212,
    "system/metrics/test_alerts_live.py": 176,
    "system/run/test_simulate_e2e.py": 150,
    "system/s3/test_s3_rgw.py": 148,
    "system/simulation/test_interval_agreement.py": 148,
    "system/run/test_dilation_e2e.py": 140,
    "system/metrics/test_metrics_tiers_live.py": 140,
    "system/s3/test_s3_e2e.py": 131,
    "system/run/test_mlperf_e2e.py": 120,
    "system/run/test_design_e2e.py": 90,
    "system/run/test_faults_e2e.py": 85,
    "system/crash/test_crash_campaign.py": 83,
    "system/storage/test_full_scale.py": 79,
    "system/s3/test_s3_requests.py": 74,
    "system/run/test_progress_e2e.py": 69,
    "system/run/test_shared_machine_e2e.py": 69,
    "system/run/test_run_e2e.py": 66,
    "system/run/test_ownership.py": 53,
    "system/simulation/test_agreement.py": 39,
    "system/s3/test_tiers_s3.py": 30,
    "system/run/test_emulated_e2e.py": 21,
    "system/s3/test_retries.py": 10,
}
#: a test of a file not listed: (system, quick)
PER_TEST = {"system": 5.0, "quick": 0.1}


def longest_first(items: list, tests_dir) -> list:
    """``items`` regrouped by file, the files in decreasing expected seconds, each file's tests in
    their own order (a module's fixtures are set up once, on one worker); ``tests_dir``: tests/."""
    files: dict = {}
    for item in items:
        files.setdefault(item.path, []).append(item)

    def seconds(path) -> float:
        rel = path.resolve().relative_to(tests_dir).as_posix()
        if rel in SECONDS:
            return SECONDS[rel]
        return sum(PER_TEST["system" if it.get_closest_marker("system") else "quick"] for it in files[path])

    order = sorted(files, key=seconds, reverse=True)  # stable: ties keep collection order
    return [item for path in order for item in files[path]]
