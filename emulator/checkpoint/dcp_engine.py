"""``checkpoint.engine: dcp``: a rank's checkpoints saved by PyTorch's ``torch.distributed.checkpoint``.

Every rank calls DCP together, on a gloo group of its own (DCP's collectives must not interleave with
the pipeline's): ``dcp.save`` in sync mode, ``dcp.async_save`` in async mode with one stager reused
by every save (DCP's ``DefaultStager``, its buffers cached; pinned where CUDA can pin them), its
writes in DCP's background thread. The state dict is the rank's live tensors under their replica
keys (emulator/sizing.py ``replica_key``: the same on every rank that holds a tensor), so DCP's own
planner deduplicates what replicas hold. Files go through a tier (emulator/checkpoint/dcp_storage.py).

The library's own costs are timed on each rank (:class:`DcpTimes`): staging (``async_save``'s
blocking call), planning (its local plan, the plans' gather and scatter, the coordinator's global
plan), the writes, and the metadata (the results' gather, the coordinator's ``.metadata``, the
broadcast that ends the save).
"""
from __future__ import annotations

import pickle
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

from emulator import sizing
from emulator.checkpoint import layout
from emulator.checkpoint.dcp_storage import METADATA, TierFileSystem, TierStorageReader, TierStorageWriter, rank_error
from emulator.checkpoint.rank_file import RankFileEngine
from emulator.checkpoint.records import Receipt
from emulator.workload.staging import StageTiming


@dataclass
class DcpTimes:
    """One save's seconds on one rank, as DCP spent them (0: not part of this save)."""

    staging_s: float = 0.0
    planning_s: float = 0.0
    write_s: float = 0.0
    metadata_s: float = 0.0
    #: the coordinator's own writing of ``.metadata`` (0 on the other ranks)
    finish_s: float = 0.0
    marks: dict = field(default_factory=dict, repr=False)

    def mark(self, name: str) -> None:
        self.marks[name] = time.perf_counter()

    def settle(self) -> None:
        """The phases from the marks the planner and the writer left."""
        m = self.marks
        if "plan_start" in m and "plan_end" in m:
            self.planning_s = m["plan_end"] - m["plan_start"]
        if "write_start" in m and "write_end" in m:
            self.write_s = m["write_end"] - m["write_start"]
        if "write_end" in m and "done" in m:
            self.metadata_s = m["done"] - m["write_end"]
        if "finish_start" in m and "finish_end" in m:
            self.finish_s = m["finish_end"] - m["finish_start"]

    def to_dict(self) -> dict:
        return {"staging_s": self.staging_s, "planning_s": self.planning_s, "write_s": self.write_s,
                "metadata_s": self.metadata_s, "finish_s": self.finish_s}


class _TimedPlanner(DefaultSavePlanner):
    """DCP's default planner, leaving marks where this rank's planning begins and ends."""

    def __init__(self, times: DcpTimes):
        super().__init__()
        self.times = times

    def set_up_planner(self, state_dict, storage_meta=None, is_coordinator: bool = False) -> None:
        self.times.mark("plan_start")
        super().set_up_planner(state_dict, storage_meta, is_coordinator)

    def finish_plan(self, new_plan):
        plan = super().finish_plan(new_plan)
        self.times.mark("plan_end")
        return plan


class _TimedWriter(TierStorageWriter):
    """The tier writer, leaving marks around this rank's writes and the coordinator's metadata."""

    def __init__(self, *args, times: DcpTimes, **kwargs):
        super().__init__(*args, **kwargs)
        self.times = times

    def write_data(self, plan, planner):
        self.times.mark("write_start")
        try:
            return super().write_data(plan, planner)
        finally:
            self.times.mark("write_end")

    def finish(self, metadata, results) -> None:
        self.times.mark("finish_start")
        super().finish(metadata, results)
        self.times.mark("finish_end")


def state_dict(state, par, which: str = "live") -> dict:
    """The rank's live (or staging) tensors under their replica keys (what DCP saves and loads into)."""
    tensors = state.live if which == "live" else state.staging
    return {sizing.replica_key(par, state.coords, part, name): t
            for part, group in tensors.items() for name, t in group.items()}


def default_stager() -> DefaultStager:
    """DCP's stager, reused by every async save: its host copies cached; pinned where CUDA is."""
    pinned = torch.cuda.is_available()
    return DefaultStager(StagingOptions(use_pinned_memory=pinned, use_shared_memory=False,
                                        use_async_staging=False, use_non_blocking_copy=False))


class DcpSaver:
    """One rank's DCP saves and loads, on ``group`` (a gloo group only DCP uses)."""

    def __init__(self, state, par, group, *, thread_count: int = 1, read_timeout_s: float | None = None):
        self.state, self.par, self.group, self.thread_count = state, par, group, thread_count
        self.read_timeout_s = read_timeout_s
        self._stager: DefaultStager | None = None
        #: the last save's global metadata (DCP hands it to every rank once the save is done)
        self.metadata = None

    def _writer(self, tier, folder: str, times: DcpTimes) -> _TimedWriter:
        return _TimedWriter(tier, folder, thread_count=self.thread_count, times=times)

    def save(self, tier, folder: str) -> tuple[list, DcpTimes]:
        """A sync save into ``folder`` of ``tier``: (this rank's files as manifest entries, its times)."""
        times = DcpTimes()
        writer = self._writer(tier, folder, times)
        try:
            self.metadata = dcp.save(state_dict(self.state, self.par), storage_writer=writer,
                                     planner=_TimedPlanner(times), process_group=self.group)
        except BaseException as exc:  # noqa: BLE001 - DCP's CheckpointException is a BaseException
            raise _plain(exc) from None
        times.mark("done")
        times.settle()
        return writer.files, times

    def async_save(self, tier, folder: str) -> tuple[Future, DcpTimes]:
        """An async save: returns once DCP staged the state (``staging_s``); the future gives this rank's
        files once DCP's background writer is done (its times settled then)."""
        if self._stager is None:
            self._stager = default_stager()
        times = DcpTimes()
        writer = self._writer(tier, folder, times)
        t0 = time.perf_counter()
        upload = dcp.async_save(state_dict(self.state, self.par), storage_writer=writer,
                                planner=_TimedPlanner(times), process_group=self.group,
                                async_stager=self._stager)
        times.staging_s = time.perf_counter() - t0
        files: Future = Future()

        def done(f: Future) -> None:
            times.mark("done")
            times.settle()
            try:
                self.metadata = f.result()
            except BaseException as exc:  # noqa: BLE001
                files.set_exception(_plain(exc))
                return
            files.set_result(writer.files)
        upload.add_done_callback(done)
        return files, times

    def load(self, tier, folder: str, entries) -> None:
        """DCP's load of ``folder`` into the live tensors, each file checked against ``entries`` first."""
        kw = {} if self.read_timeout_s is None else {"read_timeout_s": self.read_timeout_s}
        reader = TierStorageReader(tier, folder, entries=entries, **kw)
        try:
            dcp.load(state_dict(self.state, self.par), storage_reader=reader, process_group=self.group)
        except BaseException as exc:  # noqa: BLE001
            raise _plain(exc) from None

    def load_staging(self, tier, folder: str, entries) -> int:
        """This rank's restore: DCP's load of ``folder`` into the staging buffers (the restore adopts
        them once every rank has its step), each file checked against ``entries`` first; on its own,
        without collectives (``no_dist``), so each rank falls back through its tiers alone. Returns
        the bytes read."""
        kw = {} if self.read_timeout_s is None else {"read_timeout_s": self.read_timeout_s}
        reader = TierStorageReader(tier, folder, entries=entries, **kw)
        try:
            dcp.load(state_dict(self.state, self.par, "staging"), storage_reader=reader, no_dist=True)
        except BaseException as exc:  # noqa: BLE001
            raise _plain(exc) from None
        return reader.fs.read_bytes

    def close(self) -> None:
        if self._stager is not None:
            self._stager.close()
            self._stager = None


class Dcp(RankFileEngine):
    """``torch.distributed.checkpoint`` on a gloo group of its own (``saver``: a :class:`DcpSaver`);
    ``node_copy``: whether this rank writes its node's copy of ``.metadata`` (a node leader of a node
    without the coordinator)."""

    name = "dcp"
    falls_back = False

    def __init__(self, saver: DcpSaver, *, node_copy: bool):
        self.saver, self.node_copy = saver, node_copy
        self._upload: Future | None = None  # an async save's files, from DCP's background writer
        self._times = None

    def stage(self, state, rec, *, paced: bool, tier):
        """Async: DCP stages the live state and starts its writer into ``tier``; sync: nothing (the
        write saves the live state while training waits)."""
        if rec.mode != "async":
            return StageTiming(0.0, 0.0, 0, 0)
        self._upload, self._times = self.saver.async_save(tier, layout.step_dir(rec.step))
        return StageTiming(0.0, 0.0, 0, 0)

    def save(self, state, tier, key: str, step: int, *, after_write=None) -> tuple[int, str]:
        raise NotImplementedError("a DCP save is collective: the pipeline calls write")

    def file_bytes(self, state, step: int = 0) -> int:
        """The rank's tensors: DCP's files add a torch.save record per tensor, and the weight of a byte
        the tiers book (rank_file.design_bytes_weight) follows torch_save's structure."""
        return sum(t.numel() * t.element_size() for t in state.tensors("live"))

    def write(self, state, tier, receipt: Receipt, rec, *, after_write=None) -> None:
        if self._upload is not None:
            upload, self._upload = self._upload, None
            files, times = upload.result(), self._times
        else:
            files, times = self.saver.save(tier, layout.step_dir(rec.step))
        if after_write is not None:
            after_write()
        rec.engine_s = times.to_dict()
        files = sorted(files, key=lambda f: (f.key.endswith(METADATA), f.key))
        first, receipt.extra = files[0], files[1:]
        receipt.key, receipt.size, receipt.crc32c = first.key, first.size, first.crc32c
        if self.node_copy:
            receipt.node_only = [self._metadata_copy(tier, rec.step, receipt.rank)]

    def _metadata_copy(self, tier, step: int, rank: int):
        """This node's copy of the coordinator's ``.metadata`` (every rank holds it once DCP is done)."""
        fs = TierFileSystem(tier, rank=rank)
        with fs.create_stream(f"{layout.step_dir(step)}/{METADATA}", "wb") as stream:
            stream.write(pickle.dumps(self.saver.metadata))
        return fs.written[0]


class DcpError(RuntimeError):
    """A DCP save or load failed on some rank: the lowest failed rank's error, as an Exception."""


def _plain(exc: BaseException) -> BaseException:
    """DCP's ``CheckpointException`` (a BaseException: ``except Exception`` misses it) as the error of
    its lowest failed rank, an Exception; anything else as it is."""
    if not isinstance(exc, CheckpointException):
        return exc
    inner = rank_error(exc)
    return inner if isinstance(inner, Exception) else DcpError(str(exc))
