"""The results folder (``run.out``): every file and folder a run keeps there, by name.

One owner for these names, so the CLI, the launcher, the ranks and the report
agree without importing each other (the launcher must not import torch).

Visible files are the run's outputs: a finished run's results (``FINISHED``)
are never replaced unasked (``run --force``, emulator/launch/runner.py); dot-folders
are working state that the next run in the same place sweeps: ``.spool/node<N>`` (drains from a tier
without files), ``.shared/<tier>`` (emulated bandwidth and capacity shared by
the processes of a node or job), ``.metrics/node<N>`` (Prometheus multiprocess
files), ``.records`` (each
rank's checkpoint records, appended as they finish, one file per torchrun
attempt, so results.json covers attempts that were killed), ``.torchrun`` (torchrun's logs).

The results folder must be this user's and not writable by others without the
sticky bit; every name in it is opened without following a link and the
working folders are made by the CLI, refusing a link of another user's (a link
of the user's own at a working folder is the user's choice: followed, and it
and its target never emptied, e.g. ``.shared`` shared by two agents of one
job on one machine; docs/security.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CONFIG = "config.json"      # the resolved config the ranks read
DESIGN = "design.json"      # the run's design, resolved once by the launcher (emulator/design/codec.py)
RESULTS = "results.json"    # every figure, per-rank records, the timeline
REPORT = "report.txt"       # the summary table
TIMELINE = "timeline.png"
LOG = "torchrun.log"        # everything the ranks printed
STOP = "stop"               # created by the CLI on Ctrl-C; rank 0 polls it every step
STATUS = "status.json"      # rank 0's last checkpoint: step, stall, misses (rewritten at each)
PROGRESS = "progress.json"  # rank 0's progress through the modes, about every second (the CLI's display)
DLIO = "dlio"               # mlperf protocol: the DLIO-compatible results folder (dlio-write, dlio-read by phase)
MLPERF_WRITE = "mlperf-write.json"  # mlperf protocol: when the write phase ended (kept for the read phase)

#: outputs of a previous run, removed before a new one starts (only with --force where they hold
#: a finished run's results: ``finished_outputs``)
OUTPUTS = (STOP, STATUS, PROGRESS, RESULTS, REPORT, TIMELINE, LOG)
#: a finished run's results, which a new run replaces only when asked (``run --force``)
FINISHED = (RESULTS, REPORT, TIMELINE)
#: an MLPerf write phase's results, kept under these names when its read phase takes the folder
WRITE_PHASE = {RESULTS: "results-write.json", REPORT: "report-write.txt"}
SPOOL, SHARED, METRICS, RECORDS = ".spool", ".shared", ".metrics", ".records"
#: torchrun's log folder (``--log-dir``; a folder per rank, empty unless a rank failed), which it
#: would otherwise make anew in the system's temporary folder at every run and never remove
AGENT_LOGS = ".torchrun"
#: the working folders, made by the CLI before the ranks start (never through a link, see docs/security.md)
WORKING = (SPOOL, SHARED, METRICS, RECORDS, AGENT_LOGS)
#: the working folders a new run starts empty (the others are emptied per node by the ranks)
EMPTIED = (SHARED, RECORDS, AGENT_LOGS)


def finished_outputs(out: Path) -> list[str]:
    """The names of a finished run's results in ``out`` (none: a new folder, or one a run that
    failed or was killed left: its config.json and torchrun.log are replaced, its checkpoints
    are on the tiers)."""
    out = Path(out)
    dlio = sorted(p.name for p in out.glob(f"{DLIO}*") if p.is_dir()) if out.is_dir() else []
    return [n for n in FINISHED if (out / n).exists()] + dlio


def dlio_folder(phase: str) -> str:
    """The DLIO folder of an mlperf run: ``dlio``, or one per phase so a read run keeps the write run's."""
    return DLIO if phase == "both" else f"{DLIO}-{phase}"


@dataclass(frozen=True)
class OutDir:
    root: Path

    def __post_init__(self):
        object.__setattr__(self, "root", Path(self.root))

    def __truediv__(self, name: str) -> Path:
        return self.root / name

    def spool(self, node: int) -> Path:
        return self.root / SPOOL / f"node{node}"

    def shared(self, tier: str) -> Path:
        return self.root / SHARED / tier

    def nic(self, node: int) -> Path:
        """The node's NIC send bucket: the global tier's writes and the peer tier's sends share it."""
        return self.root / SHARED / "nic" / f"node{node}-send.bucket"

    def fabric(self, node: int) -> Path:
        """The node's compute fabric send bucket, where the design states one: the peer tier's sends."""
        return self.root / SHARED / "fabric" / f"node{node}-send.bucket"

    @property
    def shared_root(self) -> Path:
        return self.root / SHARED

    def metrics(self, node: int) -> Path:
        return self.root / METRICS / f"node{node}"

    @property
    def records_root(self) -> Path:
        return self.root / RECORDS

    def records(self, rank: int, attempt: int) -> Path:
        return self.records_root / f"rank{rank:05d}.attempt{attempt}.jsonl"

    def trained(self, rank: int) -> Path:
        """The last step the rank trained, in any attempt (``emulator/rank/training.TrainedMark``)."""
        return self.records_root / f"rank{rank:05d}.trained"
