"""``ckpt-emu compare``: runs side by side, ours (results.json) and DLIO's (summary.json)."""
from __future__ import annotations

import json

from emulator.mlperf.compare import compare


def add_compare_parser(sub) -> None:
    p = sub.add_parser("compare", help="runs side by side: ours (results.json) and DLIO's (summary.json)",
                       examples=("ckpt-emu compare runs/8b-nvme runs/8b-pfs dlio-output/",))
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="a results folder (ours or DLIO's), its results.json/summary.json, or a folder of DLIO runs")
    p.add_argument("--json", action="store_true", help="the runs' rows as JSON")
    p.set_defaults(func=cmd_compare)


def cmd_compare(args) -> int:
    runs, text = compare(args.paths)
    if args.json:
        print(json.dumps([{"label": r.label, "kind": r.kind, **r.rows} for r in runs], indent=1))
    else:
        print(text, end="")
    return 0
