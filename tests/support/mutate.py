"""Mutation testing by a fixed catalogue (tests/support/mutations.py): does the quick tier catch
realistic bugs in the modules it claims to hold true?

Each mutation is one realistic bug (a min for a max, a skipped fsync, a removed ownership check), an
exact snippet of one file and what replaces it. For each, a copy of the checkout gets the mutation
and the quick tests of its module's folders run there, stopping at the first failure (pytest -x):
a failure kills the mutation, a pass lets it survive. Survivors are printed, with the score.

    bash scripts/mutate.sh                 # every mutation (docs/testing.md: the time it takes)
    bash scripts/mutate.sh ID [ID ...]     # those named (e.g. to see a new test kill its mutation)
    bash scripts/mutate.sh --list          # the catalogue
    bash scripts/mutate.sh --jobs 2        # two mutations at a time, each in its own copy

Exit status: 0 when every mutation was killed, 1 when one survived, 2 for bad input (an unknown
id, a snippet no longer in its file: the catalogue must follow the code).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutations import MUTATIONS, Mutation  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
#: one mutation's tests at most this long (a mutation that makes a test hang is killed by it)
TIMEOUT_S = 600


def stale(mutation: Mutation, root: Path = ROOT) -> str | None:
    """Why ``mutation`` cannot be applied to the checkout at ``root`` (None: it can)."""
    text = (root / mutation.path).read_text()
    count = text.count(mutation.old)
    return None if count == 1 else f"{mutation.id}: its snippet is in {mutation.path} {count} times, not once"


def copy_checkout(dest: Path) -> None:
    """The checkout's files (tracked, and new ones git does not ignore) and its built extension."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    names += [str(p.relative_to(ROOT)) for p in (ROOT / "tiers").glob("_copycrc*.so")]
    for name in filter(None, names):
        src, dst = ROOT / name, dest / name
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    # compiled once (a mutated file, newer than its bytecode, is compiled again at each import):
    # every pytest run would otherwise compile the whole product and the tests again
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", "emulator", "tiers", "tests", "bench"],
                   cwd=dest, check=True, stdout=subprocess.DEVNULL)


def run_tests(copy: Path, tests: tuple) -> tuple[bool, str, float]:
    """(passed, the first failure or why it stopped, seconds) of the quick tests ``tests`` in ``copy``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (str(copy), os.environ.get("PYTHONPATH")))),
               PYTHONDONTWRITEBYTECODE="1")
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "quick", "-rf",
           "--no-header", "-W", "ignore", *tests]
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {TIMEOUT_S} s", time.monotonic() - t0
    out = proc.stdout + proc.stderr
    failed = next((line.split(" ", 1)[1].split(" - ")[0] for line in out.splitlines()
                   if line.startswith(("FAILED ", "ERROR "))), "")
    if proc.returncode == 0:
        return True, "", time.monotonic() - t0
    last = out.strip().splitlines()[-1] if out.strip() else f"exit {proc.returncode}"
    return False, failed or last, time.monotonic() - t0


def try_mutation(mutation: Mutation, copy: Path) -> tuple[bool, str, float]:
    """Apply ``mutation`` in ``copy``, run its tests, put the file back: (survived, killer, seconds)."""
    path = copy / mutation.path
    original = path.read_text()
    path.write_text(original.replace(mutation.old, mutation.new, 1))
    try:
        passed, why, seconds = run_tests(copy, mutation.tests)
    finally:
        path.write_text(original)
    return passed, why, seconds


def _parse(argv):
    p = argparse.ArgumentParser(prog="scripts/mutate.sh", description=__doc__.split("\n\n")[0])
    p.add_argument("ids", nargs="*", help="mutations to try (default: all)")
    p.add_argument("--list", action="store_true", help="print the catalogue and exit")
    p.add_argument("--jobs", type=int, default=1, help="mutations at a time, each in its own copy (default 1)")
    p.add_argument("--baseline", action="store_true",
                   help="first run every folder's tests unmutated (they must pass: a failing test kills nothing)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = _parse(argv)
    by_id = {m.id: m for m in MUTATIONS}
    unknown = [i for i in args.ids if i not in by_id]
    if unknown or args.jobs < 1:
        print(f"mutate: error: {'unknown mutation(s): ' + ', '.join(unknown) if unknown else '--jobs: must be >= 1'}",
              file=sys.stderr)
        return 2
    chosen = [by_id[i] for i in args.ids] or list(MUTATIONS)
    if args.list:
        for m in chosen:
            print(f"{m.id:28} {m.path}: {m.why}")
        return 0
    problems = [p for p in map(stale, chosen) if p]
    if problems:
        print("mutate: error: " + "; ".join(problems), file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="ckpt-emu-mutate-") as tmp:
        copies = [Path(tmp) / f"copy{j}" for j in range(min(args.jobs, len(chosen)))]
        for copy in copies:
            copy_checkout(copy)
        if args.baseline and not _baseline(copies[0], chosen):
            return 2
        return _report(chosen, _run_all(chosen, copies))


def _baseline(copy: Path, chosen: list) -> bool:
    folders = tuple(dict.fromkeys(t for m in chosen for t in m.tests))
    passed, why, seconds = run_tests(copy, folders)
    print(f"baseline: {'passed' if passed else 'FAILED ' + why} ({seconds:.0f} s)", flush=True)
    return passed


def _run_all(chosen: list, copies: list) -> dict:
    free, results = list(copies), {}

    def one(m):
        copy = free.pop()
        try:
            survived, why, seconds = try_mutation(m, copy)
        finally:
            free.append(copy)
        results[m.id] = (survived, why)
        verdict = "SURVIVED" if survived else "killed  "
        print(f"{verdict} {m.id:28} {seconds:5.0f} s  {why if not survived else m.why}", flush=True)
    with ThreadPoolExecutor(len(copies)) as pool:
        list(pool.map(one, chosen))
    return results


def _report(chosen: list, results: dict) -> int:
    survivors = [m for m in chosen if results[m.id][0]]
    areas = {}
    for m in chosen:
        killed, total = areas.get(m.area, (0, 0))
        areas[m.area] = (killed + (not results[m.id][0]), total + 1)
    print()
    for area, (killed, total) in areas.items():
        print(f"{area:22} {killed}/{total} killed ({100 * killed / total:.0f} %)")
    killed = len(chosen) - len(survivors)
    print(f"{'all':22} {killed}/{len(chosen)} killed ({100 * killed / len(chosen):.0f} %)")
    if survivors:
        print("\nsurvivors:")
        for m in survivors:
            print(f"  {m.id}: {m.path}: {m.why}")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
