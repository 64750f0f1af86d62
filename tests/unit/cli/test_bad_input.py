"""Bad input is always one line (issue 37): every case across the subcommands and the config ends
with exactly one line ``ckpt-emu: error: ...`` naming the problem, exit status 2, and nothing
created or changed anywhere the command could write (its folder, HOME, the default locations).

In process (``emulator.cli.main``), in a fresh folder that is the working directory and HOME; the
cases name files in it as ``TMP/...`` (written by ``_workspace``).
"""
from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from emulator.cli import main
from emu import refused

SETS = "--set"


def _q(*args) -> list[str]:
    return ["run", "--quiet", *args]


def _tiers(tmp_word: str = "TMP") -> list[str]:
    """Tiers and results under the case's folder, so a case that gets past them writes only there."""
    return ["--out", f"{tmp_word}/out", SETS, f"tiers.local.path={tmp_word}/nvme/node{{node}}",
            SETS, f"tiers.global.path={tmp_word}/pfs"]


#: (argv, a fragment of the one line it must print)
CASES = [
    # ---- run: node counts, sizes, flags
    (_q("--nnodes", "0"), "--nnodes 0: must be 1 or more"),
    (_q("--nnodes", "-1"), "--nnodes -1: must be 1 or more"),
    (_q("--nproc-per-node", "0"), "--nproc-per-node 0: must be 1 or more"),
    (_q("--nproc-per-node", "-3"), "--nproc-per-node -3: must be 1 or more"),
    (_q("--nproc-per-node", "3"), "1 node(s) x 3 ranks per node != 8 ranks"),
    (_q("--nnodes", "x"), "argument --nnodes: invalid int value"),
    (_q("--scale", "0"), "run.scale: must be in (0, 1]"),
    (_q("--scale", "1.5"), "run.scale: must be in (0, 1]"),
    (_q("--scale", "-0.1"), "run.scale: must be in (0, 1], got -0.1"),
    (_q("--scale", "nan"), "argument --scale: expected a finite number, got 'nan'"),
    (_q("--scale", "inf"), "argument --scale: expected a finite number, got 'inf'"),
    (_q("--scale", "abc"), "argument --scale: expected a number, got 'abc'"),
    (_q("--duration", "0"), "--duration: '0' must be a finite time > 0"),
    (_q("--duration", "forever"), "--duration: 'forever' is not a time"),
    (_q("--duration", "inf"), "--duration: 'inf' must be a finite time > 0"),
    (_q("--bogus"), "unrecognized arguments: --bogus"),
    (_q("--phase", "write"), "checkpoint.phase: write and read phases exist only with checkpoint.protocol: mlperf"),
    (_q("--phase", "sideways"), "argument --phase: invalid choice"),
    (_q("--kill", "x"), "argument --kill: 'x': use RANK:CHECKPOINT:PHASE"),
    (_q("--kill", "9:1:staging"), "failures.kill[0].rank: rank 9 does not exist"),
    (_q("--kill", "1:1:nowhere"), "phase"),
    (_q("--lose-nodes", "1:5"), "failures.lose_nodes.nodes: node 5 does not exist"),
    (_q("--lose-local-after", "-1"), "failures.lose_local_after: must be >= 1"),
    (_q("--node-rank", "3"), "--node-rank 3: needs --nnodes > 1"),
    (_q("--nnodes", "2"), "--nnodes > 1 needs --rdzv-endpoint HOST:PORT"),
    (_q("--nnodes", "2", "--rdzv-endpoint", "nohost"), "--rdzv-endpoint 'nohost': expected HOST:PORT"),
    (_q("--nnodes", "2", "--rdzv-endpoint", "host:99999"), "expected HOST:PORT with a port from 1 to 65535"),
    (_q("--nnodes", "2", "--rdzv-endpoint", "host:0"), "expected HOST:PORT with a port from 1 to 65535"),
    (_q("--nnodes", "2", "--rdzv-endpoint", "no.such.host.invalid:29500"), "cannot resolve 'no.such.host.invalid'"),
    (_q("--metrics-port", "0"), "metrics.port: must be a TCP port (1-65535)"),
    (_q("--metrics-port", "70000"), "metrics.port: must be a TCP port (1-65535)"),
    (_q("--metrics-port", "9100", "--metrics-addr", "no.such.host.invalid", *_tiers()),
     "metrics.addr 'no.such.host.invalid': cannot resolve"),
    (_q("--metrics-port", "9100", "--metrics-addr", "192.0.2.123", *_tiers()),
     "metrics.addr '192.0.2.123': not an address of this host"),
    (_q("--metrics-port", "BUSY_PORT", *_tiers()), "in use on 127.0.0.1"),
    # ---- run: --set and values
    (_q(SETS, "training.step_seconds=.inf"), "training.step_seconds: expected a finite number, got inf"),
    (_q(SETS, "training.step_seconds=.nan"), "training.step_seconds: expected a finite number, got nan"),
    (_q(SETS, "training.step_seconds=-1"), "training.step_seconds: must be >= 0"),
    (_q(SETS, "tiers.global.emulate.write_gib_s=.inf"), "write_gib_s: expected a finite number, got inf"),
    (_q(SETS, "tiers.local.emulate.read_gib_s=0"), "read_gib_s: must be > 0"),
    (_q(SETS, "run.scale=[1,2,3]"), "run.scale: expected a number, got [1, 2, 3]"),
    (_q(SETS, "run.scale=" + "[" + ",".join(["1"] * 5000) + "]"), "run.scale: expected a number, got <a list of 5000 items>"),
    (_q(SETS, "run.out=" + "x" * 5000, SETS, "run.scale=2"), "run.scale: must be in (0, 1]"),
    (_q(SETS, "run.scale"), "--set 'run.scale': expected KEY=VALUE"),
    (_q(SETS, "=3"), "--set '=3': bad key ''"),
    (_q(SETS, "a..b=3"), "bad key 'a..b'"),
    (_q(SETS, "nosuch.key=1"), "nosuch: unknown key (known keys here:"),
    (_q(SETS, "checkpoint.nosuch=1"), "checkpoint.nosuch: unknown key"),
    (_q(SETS, "model=[&a [1,2], *a]"), "YAML aliases are not allowed"),
    (_q(SETS, "model=" + "[" * 3000 + "]" * 3000), "nested too deeply to read"),
    (_q(SETS, "checkpoint.saves=ten"), "checkpoint.saves: expected an integer, got 'ten'"),
    (_q(SETS, "checkpoint.saves=99999999999999999999999"), "is out of range"),
    (_q(SETS, "checkpoint.keep=0"), "checkpoint.keep: must be >= 1"),
    (_q(SETS, "checkpoint.modes=[sync, sync]"), "checkpoint.modes: lists a mode twice"),
    (_q(SETS, "checkpoint.modes=[]"), "checkpoint.modes: must name at least one mode"),
    (_q(SETS, "checkpoint.page_cache_scope=all"), "checkpoint.page_cache_scope: must be 'files'"),
    (_q(SETS, "checkpoint.read_timeout_s=0"), "checkpoint.read_timeout_s: must be more than 0"),
    (_q(SETS, "checkpoint.drop_page_cache=maybe"), "checkpoint.drop_page_cache: expected true or false"),
    (_q(SETS, "run.threads_per_rank=1000000"), "run.threads_per_rank: 1000000 is more than limits.threads_per_rank"),
    (_q(SETS, "run.threads_per_rank=0"), "run.threads_per_rank: must be >= 1"),
    (_q(SETS, "tiers.global.emulate.latency_ms=1e9"), "latency_ms: 1e+09 ms per request is more than limits.latency_ms"),
    (_q(SETS, "tiers.global.emulate.jitter_ms=1e7"), "jitter_ms: 1e+07 ms per request is more than limits.latency_ms"),
    (_q(SETS, "limits.ranks_per_cpu=0"), "limits.ranks_per_cpu: must be > 0"),
    (_q(SETS, "limits.sweep_points=0"), "limits.sweep_points: must be >= 1"),
    (["run", "llama3-1t", "--quiet", SETS, "parallelism.ranks=2000"], "parallelism.ranks: 2000 ranks requested"),
    (["run", "llama3-1t", "--quiet", SETS, "parallelism.ranks=RANKS_OVER_CAP"], "more than limits.ranks_per_cpu"),
    (_q(SETS, "parallelism.tp=0"), "parallelism.tp: must be >= 1"),
    (_q(SETS, "parallelism.zero_stage=5"), "parallelism.zero_stage: must be 0, 1, 2 or 3"),
    (_q(SETS, "state.device=tpu"), "state.device: must be auto, cpu or cuda"),
    (_q(SETS, "state.dedup_ratio=.inf"), "state.dedup_ratio: expected a finite number"),
    (_q(SETS, "drain.concurrency=0"), "drain.concurrency: must be between 1 and 256"),
    (_q(SETS, "tiers.local.backend=nosuch"), "tiers.local.backend: unknown backend 'nosuch'"),
    (_q(SETS, "tiers.local=5"), "tiers.local: expected a mapping, got int"),
    (_q(SETS, "tiers.local.path=null"), "tiers.local.path: a dir tier needs a path"),
    (_q(SETS, "tiers.local.allow_foreign=yes please"), "tiers.local.allow_foreign: expected true or false"),
    (_q(SETS, "metrics.final_scrape_timeout_s=.inf"), "metrics.final_scrape_timeout_s: expected a finite number"),
    (_q(SETS, "cost.put_per_1000=-1"), "cost.put_per_1000: must be a price"),
    # ---- run: folders (nothing may be written, not even the results folder)
    (_q("--out", "TMP/afile"), "/afile is not a directory"),
    (_q("--out", "TMP/afile/below"), "/afile is not a directory"),
    (_q(*_tiers(), SETS, "tiers.local.path=TMP/same", SETS, "tiers.global.path=TMP/same"),
     "tiers.local.path and tiers.global.path are the same folder"),
    (_q(*_tiers(), SETS, "tiers.local.path=TMP/a", SETS, "tiers.global.path=TMP/a/b"),
     "tiers.global.path (TMP/a/b) is inside tiers.local.path (TMP/a)"),
    (_q(*_tiers(), "--out", "TMP/pfs"), "run.out and tiers.global.path are the same folder"),
    (_q(*_tiers(), "--out", "TMP/pfs/results"), "run.out (TMP/pfs/results) is inside tiers.global.path"),
    (_q(*_tiers(), SETS, "tiers.memory.path=TMP/nvme/node{node}"),
     "tiers.memory.path and tiers.local.path are the same folder"),
    (_q(*_tiers(), SETS, "tiers.local.path=TMP/afile/node{node}"), "tiers.local: cannot create directory tier at"),
    (_q(*_tiers(), SETS, "tiers.global.path=TMP/busy"), "tiers.global: dir tier TMP/busy is in use by another run: pid"),
    (_q(*_tiers(), "--out", "TMP/busy"), "results folder TMP/busy is in use by another run: pid"),
    (_q(*_tiers(), SETS, "tiers.global.path=TMP/project"), "holds 2 name(s) this tool did not make ('data', 'notes.txt')"),
    (_q(*_tiers(), SETS, "tiers.global.path=TMP/open"), "TMP/open is writable by other users without the sticky bit"),
    (_q(*_tiers(), "--out", "TMP/open/results"), "TMP/open is writable by other users without the sticky bit"),
    (_q(*_tiers(), SETS, "tiers.global.path=TMP/other-users"), "TMP/other-users belongs to another user (uid 65534)"),
    (_q(*_tiers(), "--out", "TMP/other-users/results"), "TMP/other-users belongs to another user (uid 65534)"),
    (_q(*_tiers(), SETS, "tiers.global.path=TMP/their-link/pfs"), "TMP/their-link is a link owned by another user"),
    # ---- the config file itself
    (["run", "TMP/bad.yaml"], "TMP/bad.yaml: not valid YAML at line 2"),
    (["run", "TMP/nope.yaml"], "config file not found: TMP/nope.yaml"),
    (["run", "nope-preset"], "unknown preset 'nope-preset'"),
    (["run", "TMP/aliases.yaml"], "TMP/aliases.yaml: YAML aliases are not allowed (*a at line 2)"),
    (["run", "TMP/toplist.yaml"], "the top level must be a mapping of sections"),
    (["run", "TMP/unknown.yaml"], "trainig: unknown key"),
    (["run", "TMP/wrongtype.yaml"], "checkpoint.saves: expected an integer, got 'ten'"),
    (["run", "TMP/inf.yaml"], "training.step_seconds: expected a finite number, got inf"),
    (["run", "TMP/loop.yaml"], "'extends' loops back to itself"),
    (["run", "TMP/extends5.yaml"], "extends must be a file or preset name"),
    (["run", "TMP/extendsnope.yaml"], "unknown preset 'nope-preset'"),
    (["run", "TMP/binary.yaml"], "TMP/binary.yaml: not a text file (UTF-8)"),
    (["run", "TMP/huge.yaml"], "more than a config may hold"),
    (["run", "TMP/deep.yaml"], "TMP/deep.yaml: nested too deeply to read"),
    (["run", "TMP/folder.yaml"], "config file not found: TMP/folder.yaml"),
    (["run", "TMP/fifo.yaml"], "config file not found: TMP/fifo.yaml"),
    (["run", "TMP/designbad.yaml"], "design.node.local"),
    (["run", "TMP/designinf.yaml"], "design.global.latency_ms: must be a finite number of milliseconds"),
    (["run", "TMP/killbad.yaml"], "failures.kill[0].rank: rank 99 does not exist"),
    # ---- sizes
    (["sizes", "nope"], "unknown preset 'nope'"),
    (["sizes", "TMP/bad.yaml"], "not valid YAML at line 2"),
    (["sizes", "llama3-8b", "--scale", "2"], "run.scale: must be in (0, 1]"),
    (["sizes", "llama3-8b", SETS, "model.hidden_size=-1"], "model.hidden_size: must be > 0"),
    (["sizes", "llama3-8b", SETS, "model.num_layers=1e400"], "model.num_layers: expected an integer, got inf"),
    (["sizes", "llama3-8b", "--bogus"], "unrecognized arguments: --bogus"),
    (["sizes", "TMP/aliases.yaml"], "YAML aliases are not allowed"),
    # ---- plan
    (["plan"], "plan: give a CONFIG, or --accelerators N"),
    (["plan", "--accelerators", "0"], "--accelerators: must be >= 1, got 0"),
    (["plan", "--accelerators", "x"], "--accelerators: expected a whole number, got 'x'"),
    (["plan", "--accelerators", "nan"], "--accelerators: expected a whole number, got 'nan'"),
    (["plan", "--accelerators", "1000", "--mttf-hours", "nan"], "--mttf-hours: must be a finite number > 0, got 'nan'"),
    (["plan", "--accelerators", "1000", "--mttf-hours", "inf"], "--mttf-hours: must be a finite number > 0, got 'inf'"),
    (["plan", "--accelerators", "1000", "--mttf-hours", "-1"], "--mttf-hours: must be a finite number > 0, got '-1'"),
    (["plan", "--accelerators", "1000", "--size", "nope"], "--size: 'nope' is neither a size"),
    (["plan", "--accelerators", "1000", "--size", "infGB"], "--size: 'infGB' is neither a size"),
    (["plan", "--accelerators", "1000", "--bandwidth", "0GB/s"], "--bandwidth: '0GB/s' must be a finite rate > 0"),
    (["plan", "--accelerators", "1000", "--bandwidth", "nanGB/s"], "--bandwidth: 'nanGB/s' is not a rate with a unit"),
    (["plan", "--accelerators", "1000", "--overhead-budget", "2"], "--overhead-budget: must be <= 1, got 2"),
    (["plan", "--accelerators", "1000", "--overlap-target", "nan"], "--overlap-target: must be a finite number"),
    (["plan", "--accelerators", "1000", "--restart-seconds", "-1"], "--restart-seconds: '-1' must be a finite time >= 0"),
    (["plan", "--accelerators", "1000", "--checkpoints-per-failure", "0"], "--checkpoints-per-failure: must be a finite number > 0, got '0'"),
    (["plan", "TMP/bad.yaml"], "TMP/bad.yaml: not valid YAML at line 2"),
    (["plan", "--accelerators", "1000", "--config", "TMP/bad.yaml"], "--config: a plan: section is no longer read"),
    (["plan", "TMP/nope.yaml"], "config file not found: TMP/nope.yaml"),
    (["plan", "TMP/aliases.yaml"], "YAML aliases are not allowed"),
    (["plan", "--accelerators", "1000", "--sweep", "--plot", "TMP/afile/x.png"], "--plot TMP/afile/x.png: cannot write"),
    # ---- simulate
    (["simulate", "--nodes", "0"], "--nodes: must be >= 1, got 0"),
    (["simulate", "--nodes", "x"], "--nodes: expected a whole number, got 'x'"),
    (["simulate", "--nodes", "4", "--days", "0"], "--days: must be > 0, got 0"),
    (["simulate", "--nodes", "4", "--days", "nan"], "--days: must be finite, got 'nan'"),
    (["simulate", "--nodes", "4", "--days", "inf"], "--days: must be finite, got 'inf'"),
    (["simulate", "--nodes", "4", "--mttf-hours", "nan"], "--mttf-hours: must be finite, got 'nan'"),
    (["simulate", "--nodes", "4", "--mttf-hours", "0"], "--mttf-hours: must be > 0, got 0"),
    (["simulate", "--nodes", "4", "--interval", "0"], "--interval: '0' must be a finite time > 0"),
    (["simulate", "--nodes", "4", "--interval", "nan"], "--interval: 'nan' must be a finite time > 0"),
    (["simulate", "--nodes", "4", "--sweep", "interval=1m..60m:100000000"],
     "--sweep: 100000000 points, more than limits.sweep_points (10000)"),
    (["simulate", "--nodes", "4", "--sweep", "interval=1m..60m:100", "--sweep", "global_bandwidth=1GB/s..100GB/s:200"],
     "--sweep: 20000 points, more than limits.sweep_points (10000)"),
    (["simulate", "--nodes", "4", SETS, "limits.sweep_points=5", "--sweep", "interval=1m..60m:6"],
     "--sweep: 6 points, more than limits.sweep_points (5)"),
    (["simulate", "--nodes", "4", "--sweep", "bogus=1"], "--sweep: unknown key 'bogus'"),
    (["simulate", "--nodes", "4", "--sweep", "interval=0"], "--sweep interval: '0' must be > 0"),
    (["simulate", "--nodes", "4", "--sweep", "global_gib_s=1"], "--sweep: global_gib_s is now global_bandwidth"),
    (["simulate", "--nodes", "4", "--sweep", "global_bandwidth=nanGB/s"], "--sweep global_bandwidth: 'nanGB/s' is not a rate with a unit"),
    (["simulate", "--nodes", "4", "--sweep", "interval=1m..60m:x"], "the point count after ':' must be a whole number"),
    (["simulate", "--nodes", "4", "--calibrate", "TMP/nope.json"], "--calibrate TMP/nope.json: cannot read"),
    (["simulate", "--nodes", "4", "--calibrate", "TMP/bad.yaml"], "--calibrate TMP/bad.yaml: not a JSON file"),
    (["simulate", "--nodes", "4", "--failures", "TMP/nope.csv"], "--failures TMP/nope.csv: cannot read"),
    (["simulate", "--nodes", "4", "--failures", "TMP/fifo.yaml"], "--failures TMP/fifo.yaml: cannot read: not a regular"),
    (["simulate", "--nodes", "4", "--calibrate", "TMP/fifo.yaml"], "--calibrate TMP/fifo.yaml: cannot read: not a regular"),
    (["plan", "TMP/fifo.yaml"], "config file not found: TMP/fifo.yaml"),
    (["simulate", "--nodes", "4", "--node-loss-fraction", "2"], "--node-loss-fraction: must be <= 1, got 2"),
    (["simulate", "--nodes", "4", "--node-loss-fraction", "nan"], "--node-loss-fraction: must be finite"),
    (["simulate", "--nodes", "4", "--restart-seconds", "-1"], "--restart-seconds: each failure class has its own recovery"),
    (["simulate", "--nodes", "4", "--restart", "node=-1"], "--restart"),
    (["simulate", "--nodes", "4", "--global-gib-s", "0"], "--global-gib-s: now --global-bandwidth"),
    (["simulate", "--nodes", "4", "--global-bandwidth", "0GB/s"], "--global-bandwidth: '0GB/s' must be a finite rate > 0"),
    (["simulate", "--nodes", "4", "--global-bandwidth", "infGB/s"], "--global-bandwidth: 'infGB/s'"),
    (["simulate", "--nodes", "4", "--seed", "x"], "--seed: expected a whole number, got 'x'"),
    (["simulate", "--nodes", "4", "--out", "TMP/afile"], "--out TMP/afile: cannot create"),
    (["simulate", "--nodes", "4", SETS, "training.step_seconds=.inf"], "training.step_seconds: expected a finite number"),
    (["simulate", "--nodes", "4", "--accelerators-per-node", "0"], "--accelerators-per-node: must be >= 1, got 0"),
    (["simulate", "TMP/aliases.yaml", "--nodes", "4"], "YAML aliases are not allowed"),
    # ---- tune (refused before a minute of measuring)
    (["tune"], "the following arguments are required: --accelerators"),
    (["tune", "--accelerators", "0"], "--accelerators: must be >= 1"),
    (["tune", "--accelerators", "8", "--mttf-hours", "nan"], "argument --mttf-hours: expected a finite number, got 'nan'"),
    (["tune", "--accelerators", "8", "--mttf-hours", "inf"], "argument --mttf-hours: expected a finite number, got 'inf'"),
    (["tune", "--accelerators", "8", "--mttf-hours", "0"], "--mttf-hours: must be a number of hours > 0, got 0"),
    (["tune", "--accelerators", "8", "--confirm-seconds", "0"], "--confirm-seconds must be > 0"),
    (["tune", "--accelerators", "8", "--confirm-seconds", "nan"], "argument --confirm-seconds: expected a finite number"),
    (["tune", "--accelerators", "8", "--measure-checkpoints", "0"], "--measure-checkpoints >= 1"),
    (["tune", "--accelerators", "8", "--nodes", "0"], "--nodes: must be >= 1, got 0"),
    (["tune", "--accelerators", "8", "--out", "TMP/afile"], "/afile is not a directory"),
    (["tune", "--accelerators", "8", SETS, "training.step_seconds=0"], "training.step_seconds: tune needs emulated compute"),
    (["tune", "--accelerators", "8", "--scale", "nan"], "argument --scale: expected a finite number, got 'nan'"),
    (["tune", "TMP/aliases.yaml", "--accelerators", "8"], "YAML aliases are not allowed"),
    # ---- compare
    (["compare"], "the following arguments are required: PATH"),
    (["compare", "TMP/nope"], "compare: TMP/nope: no such file or folder"),
    (["compare", "TMP/bad.yaml"], "compare: TMP/bad.yaml: not valid JSON"),
    (["compare", "TMP/emptydir"], "no results.json (ours) or summary.json (DLIO) in or below it"),
    # ---- no subcommand (`ckpt-emu` alone lists the commands: tests/unit/cli/test_cli_conventions.py)
    (["nosuch"], "argument COMMAND: invalid choice: 'nosuch'"),
]

_FILES = {
    "bad.yaml": "model: [\n",
    "aliases.yaml": "a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                    "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n",
    "toplist.yaml": "- 1\n- 2\n",
    "unknown.yaml": "extends: llama3-8b\ntrainig: {step_seconds: 1}\n",
    "wrongtype.yaml": "extends: llama3-8b\ncheckpoint: {saves: ten}\n",
    "inf.yaml": "extends: llama3-8b\ntraining: {step_seconds: .inf}\n",
    "loop.yaml": "extends: loop.yaml\n",
    "extends5.yaml": "extends: 5\n",
    "extendsnope.yaml": "extends: nope-preset\n",
    "deep.yaml": "model: " + "[" * 3000 + "]" * 3000 + "\n",
    "designbad.yaml": "extends: default\ndesign: {node: {local: {write: fastGB/s, read: 7GB/s}}}\n",
    "designinf.yaml": "extends: default\ndesign: {global: {write: 2GB/s, read: 4GB/s, latency_ms: .inf}}\n",
    "killbad.yaml": "extends: llama3-8b-subset\nfailures: {kill: [{rank: 99, checkpoint: 1, phase: staging}]}\n",
    "afile": "a file, not a folder\n",
}


@pytest.fixture
def workspace(monkeypatch):
    """A fresh working folder and HOME holding the cases' files (the second user can reach it:
    it plants a folder and a link of its own there); yields it."""
    base = Path(tempfile.mkdtemp(prefix="ckpt-emu-bad-input-", dir="/tmp"))
    ws = base / "ws"
    ws.mkdir()
    for name, text in _FILES.items():
        (ws / name).write_text(text)
    (ws / "binary.yaml").write_bytes(b"\xff\xfe\x00model: 1\n")
    (ws / "huge.yaml").write_text("#" * (2 << 20) + "\n")
    (ws / "folder.yaml").mkdir()
    os.mkfifo(ws / "fifo.yaml")
    (ws / "emptydir").mkdir()
    (ws / "project").mkdir()
    (ws / "project" / "data").mkdir()
    (ws / "project" / "notes.txt").write_text("someone's notes")
    (ws / "open").mkdir()
    os.chmod(ws / "open", 0o777)
    if os.geteuid() == 0:
        from planting import plant_folder, plant_link
        os.chmod(base, 0o755)
        os.chmod(ws, 0o1777)
        plant_folder(ws / "other-users", 0o755)
        plant_link(ws / "their-link", Path("/tmp"))
    monkeypatch.chdir(ws)
    monkeypatch.setenv("HOME", str(ws))
    try:
        yield ws
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def busy(workspace):
    """TMP/busy: a folder another run holds (its owner lock taken here)."""
    from tiers.locking import Holder, claim_dir
    (workspace / "busy").mkdir()
    claim = claim_dir(workspace / "busy", Holder(job="the-other-run"), what="dir tier")
    yield claim
    claim.release()


@pytest.fixture
def busy_port():
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        yield sock.getsockname()[1]


def _tree(root: Path) -> dict:
    """Every name under ``root`` (links not followed) with its kind, size and mtime."""
    out = {}
    if not root.exists():
        return out
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            st = os.lstat(os.path.join(dirpath, name))
            out[os.path.join(dirpath, name)] = (stat.S_IFMT(st.st_mode), st.st_size, st.st_mtime_ns)
    return out


def _default_places() -> list[Path]:
    """Where a command may write when not told: the per-user tier folder, the simulation's outputs."""
    return [Path(f"/dev/shm/ckpt-emu-{os.geteuid()}")]


@pytest.mark.parametrize("argv, expected", CASES, ids=[" ".join(a)[:80] or "(none)" for a, _ in CASES])
def test_bad_input_is_one_line_exit_2_and_nothing_written(argv, expected, workspace, busy, busy_port, capsys):
    if ("other-users" in " ".join(argv) or "their-link" in " ".join(argv)) and os.geteuid() != 0:
        pytest.skip("planting as a second user needs root")
    ws = str(workspace)
    argv = [a.replace("TMP", ws).replace("BUSY_PORT", str(busy_port))
            .replace("RANKS_OVER_CAP", str(8 * (os.cpu_count() or 1) + 1)) for a in argv]
    expected = expected.replace("TMP", ws)
    before = {p: _tree(p) for p in [workspace, *_default_places()]}
    rc = main(argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1, (rc, err)
    assert lines[0].startswith("ckpt-emu: error: ") and expected in lines[0], lines[0]
    assert len(lines[0]) <= 1100, len(lines[0])
    assert {p: _tree(p) for p in before} == before, "something was written"


def test_the_corpus_is_large_and_covers_every_subcommand():
    used = {a[0] if a else "" for a, _ in CASES}
    assert len(CASES) >= 100
    assert {"run", "sizes", "plan", "simulate", "tune", "compare"} <= used


def test_a_tiny_scale_is_accepted(capsys):
    """YAML 1.1 reads 1e-05 as text: ``--scale 0.00001`` was refused ("expected a number, got '1e-05'")."""
    from emulator.config import load_config
    assert main(["sizes", "llama3-8b", "--scale", "0.00001"]) == 0
    assert load_config("llama3-8b", ["run.scale=1e-05"]).run.scale == 1e-05
    assert load_config("llama3-8b", ["run.scale=2.5E-3"]).run.scale == 0.0025


@pytest.mark.parametrize("command", [["run"], ["sizes"], ["simulate"]])
def test_a_config_name_too_long_for_a_file_is_one_line(tmp_path, capsys, command):
    """The twin of plan's --size=999...9: a config named past the file-name limit raised ENAMETOOLONG
    while the loader looked for the file, an internal error with a traceback."""
    out = [] if command == ["sizes"] else ["--out", tmp_path / "out"]
    line = refused(capsys, *command, "a" * 400, *out)
    assert "unknown preset" in line and not (tmp_path / "out").exists()
