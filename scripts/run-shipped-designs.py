#!/usr/bin/env python3
"""Run every shipped design (configs/design-*.yaml and the embedded default) for real, one after
another, and print each one's wall time, scale and dilation: what docs/time-dilation.md's table quotes.

    python scripts/run-shipped-designs.py [--work DIR] [--only NAME ...]

Each run gets its own tier folders and results folder under DIR (default: a new folder in $TMPDIR;
tiers in host memory under /dev/shm), so nothing of another run's is touched. design-memory-peer-pfs
runs as two agents of 4 ranks each (its peer needs a second node). The S3 designs go to a
single-node Ceph RGW that scripts/rgw-server.sh starts for them and stops at the end (skipped, with
the reason, where Ceph is not installed). Every design keeps its own run.wall_target: the wall time
printed is the whole run's, its start, probe, loads and report included.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from emulator.config import load_config  # noqa: E402
from emulator.design import ladder  # noqa: E402

#: designs whose peer tier needs two agents on this machine: (nodes, ranks per node)
AGENTS = {"design-memory-peer-pfs": (2, 4)}


def shipped() -> list[str]:
    return ["default"] + sorted(p.stem for p in (ROOT / "configs").glob("design-*.yaml"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tier_sets(name: str, work: Path, shm: Path, s3: dict | None) -> list[str] | None:
    """The --set overrides that give design ``name`` folders of its own (None: it needs S3 and there
    is none)."""
    cfg = load_config(name)
    sets = []
    for tier in ladder.file_tiers():
        entry = cfg.tiers.entry(tier)
        if entry is None:
            continue
        key = "global" if tier == "global" else tier
        if entry.backend == "dir":
            base = shm if entry.options.path.startswith(("/dev/shm", "{tiers_dir}")) else work / "disk"
            sets.append(f"tiers.{key}.path={base}/{name}/{tier}" + ("" if tier == "global" else "/node{node}"))
        elif entry.backend == "s3":
            if s3 is None:
                return None
            sets += [f"tiers.{key}.endpoint_url={s3['endpoint']}", f"tiers.{key}.bucket={s3['bucket']}",
                     f"tiers.{key}.prefix=shipped/{name}"]
    nodes, per_node = AGENTS.get(name, (1, None))
    if per_node is not None:
        sets.append(f"parallelism.ranks={nodes * per_node}")
    return sets


def run_design(name: str, work: Path, sets: list[str], env: dict) -> dict:
    """Run design ``name`` (its agents at once); its wall time and what its results.json says."""
    nodes, per_node = AGENTS.get(name, (1, None))
    args = [sys.executable, "-m", "emulator.cli", "run", name, "--quiet"] + [a for s in sets for a in ("--set", s)]
    outs = [work / "results" / (name + (f"-node{i}" if nodes > 1 else "")) for i in range(nodes)]
    if nodes > 1:
        endpoint = f"127.0.0.1:{free_port()}"
        args += ["--nnodes", str(nodes), "--nproc-per-node", str(per_node), "--rdzv-endpoint", endpoint]
    start = time.monotonic()
    procs = [subprocess.Popen(args + ["--out", str(out)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for out in outs]
    logs = [p.communicate()[0] for p in procs]
    wall = time.monotonic() - start
    rcs = [p.returncode for p in procs]
    for out, log in zip(outs, logs):
        (work / f"{out.name}.log").write_text(log)
    row = {"design": name, "agents": nodes, "rc": max(rcs, key=abs), "wall_s": round(wall, 1)}
    results = next((o / "results.json" for o in outs if (o / "results.json").exists()), None)  # rank 0's node
    if results is not None:
        r = json.loads(results.read_text())
        fit = r.get("scale_fit") or {}
        row.update(scale=r["scale"], run_scale=fit.get("run_scale", r["scale"]), dilation=r["dilation"]["factor"],
                   training_s=round(sum(m.get("training_wall_s", 0) for m in r["modes"].values())
                                    + (r.get("baseline") or {}).get("training_wall_s", 0), 1),
                   floor=fit.get("floor", False))
    return row


def start_rgw(work: Path) -> tuple[dict | None, Path | None]:
    if shutil.which("radosgw") is None:
        print("no radosgw here: the S3 designs are skipped (scripts/rgw-server.sh)", file=sys.stderr)
        return None, None
    folder = work / "rgw"
    text = subprocess.run(["bash", str(ROOT / "scripts/rgw-server.sh"), "start", str(folder)], check=True,
                          capture_output=True, text=True).stdout
    found = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    import boto3
    s3 = boto3.client("s3", endpoint_url=found["endpoint"], aws_access_key_id=found["access_key"],
                      aws_secret_access_key=found["secret_key"], region_name="us-east-1")
    s3.create_bucket(Bucket="shipped")
    return {**found, "bucket": "shipped"}, folder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", help="folder for the runs' disk tiers, results and logs (default: a new one)")
    parser.add_argument("--only", nargs="*", help="these designs only (default: every shipped one)")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="shipped-designs."))
    work.mkdir(parents=True, exist_ok=True)
    shm = Path(tempfile.mkdtemp(prefix="shipped-designs.", dir="/dev/shm"))
    names = args.only or shipped()
    needs_s3 = any(load_config(n).tiers.global_.backend == "s3" for n in names)
    s3, rgw = start_rgw(work) if needs_s3 else (None, None)
    env = dict(os.environ)
    if s3 is not None:
        env.update(AWS_ACCESS_KEY_ID=s3["access_key"], AWS_SECRET_ACCESS_KEY=s3["secret_key"],
                   AWS_DEFAULT_REGION="us-east-1", AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)
    rows = []
    try:
        for name in names:
            sets = tier_sets(name, work, shm, s3)
            if sets is None:
                print(f"{name}: skipped (needs S3)", flush=True)
                continue
            row = run_design(name, work, sets, env)
            rows.append(row)
            print(json.dumps(row), flush=True)
            shutil.rmtree(shm / name, ignore_errors=True)
            shutil.rmtree(work / "disk" / name, ignore_errors=True)
    finally:
        shutil.rmtree(shm, ignore_errors=True)
        if rgw is not None:
            subprocess.run(["bash", str(ROOT / "scripts/rgw-server.sh"), "stop", str(rgw)], check=False)
    (work / "walls.json").write_text(json.dumps(rows, indent=1))
    print(f"load average at the end: {os.getloadavg()}; rows in {work / 'walls.json'}")
    return 0 if all(r["rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
