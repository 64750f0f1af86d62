"""Run one benchmark in this (fresh) process: ``python -m bench.worker NAME PARAMS_JSON RESULT_PATH``.

A process per benchmark gives each one the same start: no memory held by the
previous one, no torch.distributed group left initialised, its own moto server.
The result ({key: result}) is written as JSON to RESULT_PATH.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from tiers.safepath import write_file

from .common import Params


def registry() -> dict:
    from .benches import BENCHES
    from .dcp import bench_dcp_save
    from .memory_tiers import bench_memory_tiers
    from .mlperf_read import bench_mlperf_read
    from .mlperf_write import bench_mlperf_write
    from .realrun import REAL_BENCHES
    from .rgw import bench_s3_rgw
    from .stall import bench_async_stall
    return {**BENCHES, "mlperf_write": bench_mlperf_write, "mlperf_read": bench_mlperf_read,
            "async_stall": bench_async_stall, "s3_rgw": bench_s3_rgw,
            "memory_tiers": bench_memory_tiers, "dcp_save": bench_dcp_save, **REAL_BENCHES}


def run(name: str, params: Params) -> dict:
    from .benches import clean
    wd = Path(params.workdir) / name
    clean(wd)
    wd.mkdir(parents=True)
    load0 = loadavg()
    try:
        res = registry()[name](params, wd)
    finally:
        clean(wd)
    for r in res.values():  # other tenants' load: a noisy sample shows here
        r["loadavg_1min"] = [load0, loadavg()]
    return res


def loadavg() -> float:
    try:
        return float(open("/proc/loadavg").read().split()[0])
    except (OSError, ValueError, IndexError):
        return float("nan")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    name, params_json, out = argv
    res = run(name, Params.from_json(params_json))
    write_file(out, json.dumps(res), what="bench result")  # renamed into place (tiers.safepath)
    return 0


if __name__ == "__main__":
    sys.exit(main())
