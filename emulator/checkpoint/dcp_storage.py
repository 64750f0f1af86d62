"""PyTorch DCP's storage layer over our tiers: ``torch.distributed.checkpoint`` saves and loads through them.

DCP splits a save into a planner and a storage layer (``StorageWriter``/``StorageReader``); its own
``FileSystemWriter`` writes one ``__<rank>_<n>.distcp`` file per rank and writer thread through a
small file-system interface, and the coordinator writes ``.metadata``. :class:`TierStorageWriter` is
that writer, the library's own code and file format, with the file system replaced by a tier
(:class:`TierFileSystem`): every file goes through the tier's sink, so it is paced, published
atomically and durably on commit, and its size and CRC32C are recorded for our manifest
(``files``); ``.metadata`` is written the same way, in one atomic publish instead of DCP's rename.
:class:`TierStorageReader` reads a checkpoint back for ``dcp.load``: each file it opens is read whole
and checked against its manifest entry (size and CRC32C) before DCP sees a byte of it. Tiers
without files (S3, the memory tier) work the same way; a key is the step's folder and the name.
"""
from __future__ import annotations

import io
import pickle
import time
from contextlib import closing, contextmanager, nullcontext

import crc32c

from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import CURRENT_DCP_VERSION, FileSystemBase

from emulator.checkpoint.integrity import DEFAULT_READ_TIMEOUT_S, BoundedReader, ChecksumSink, format_crc
from emulator.checkpoint.layout import FileEntry
from tiers.base import TierError, validate_key
from tiers.emulated import anchored_at, counted_as
from tiers.runsync import run_sync

#: DCP's name for the checkpoint's global metadata (torch/distributed/checkpoint/filesystem.py)
METADATA = ".metadata"


class ChecksumMismatch(TierError):
    """A file read back is not the one the manifest lists: its size or CRC32C differ."""

    def __init__(self, *args):
        super().__init__(*args, transient=False)


def rank_error(exc: BaseException) -> BaseException:
    """What failed inside a DCP call: its ``CheckpointException`` (a BaseException: ``except
    Exception`` does not catch it) carries each failed rank's error; the lowest rank's, else ``exc``."""
    failures = getattr(exc, "failures", None)
    if isinstance(exc, CheckpointException) and failures:
        return failures[min(failures)][0]
    return exc


class _TierStream(io.RawIOBase):
    """What DCP writes a file to: a tier's sink behind a CRC32C, with the position DCP records
    each item's offset by (``tell``)."""

    def __init__(self, sink: ChecksumSink):
        super().__init__()
        self.sink = sink

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        return self.sink.write(data)

    def tell(self) -> int:
        return self.sink.bytes_written

    def close(self) -> None:  # DCP closes the stream before it leaves the context: the commit comes then
        pass


class TierFileSystem(FileSystemBase):
    """DCP's file operations on a tier: a path is a tier key. Files written are recorded in ``written``
    (their entries for the manifest, ``rank``'s); a file read is checked against ``expected`` (key ->
    its manifest entry) first, and one the manifest does not list is refused. ``phase`` and
    ``anchor``: what the paced writes count as and when their bytes are booked from (tiers/emulated.py
    ``counted_as``, ``anchored_at``), held here because DCP writes from threads of its own (an async
    save's, a writer's extra ones), which inherit no context."""

    def __init__(self, tier, *, rank: int = 0, expected: dict | None = None,
                 read_timeout_s: float = DEFAULT_READ_TIMEOUT_S, phase: str | None = None):
        self.tier, self.rank, self.expected, self.read_timeout_s = tier, rank, expected, read_timeout_s
        self.phase = phase
        self.anchor: float | None = None
        self.written: list[FileEntry] = []
        self.read_bytes = 0  # the bytes of the files read

    @contextmanager
    def create_stream(self, path, mode: str):
        key = validate_key(str(path))
        if mode == "wb":
            with self._paced_as():
                sink = ChecksumSink(self.tier.open_write(key))
            with sink:  # commits (durably, atomically) on success, aborts on an error
                yield _TierStream(sink)
            self.written.append(FileEntry(key, self.rank, sink.bytes_written, sink.hexdigest))
        elif mode == "rb":
            yield self._verified(key)
        else:
            raise ValueError(f"unsupported mode {mode!r}")

    @contextmanager
    def _paced_as(self):
        with counted_as(self.phase) if self.phase else nullcontext():
            with anchored_at(self.anchor) if self.anchor is not None else nullcontext():
                yield

    def _verified(self, key: str) -> io.BytesIO:
        """The file's bytes, read once and checked against the manifest's size and CRC32C."""
        entry = None if self.expected is None else self.expected.get(key)
        if self.expected is not None and entry is None:
            raise ChecksumMismatch(f"{key}: not in the checkpoint's manifest")
        with closing(self.tier.open_read(key)) as fh:
            if entry is None:
                data = fh.read()
                self.read_bytes += len(data)
                return io.BytesIO(data)
            reader = BoundedReader(fh, entry.size, timeout_s=self.read_timeout_s, what=key)
            data = bytearray(entry.size)
            view, got = memoryview(data), 0
            while got < entry.size and (n := reader.readinto(view[got:])):
                got += n
            longer = reader.longer()
        self.read_bytes += got
        crc = format_crc(crc32c.crc32c(view[:got]))
        if got != entry.size or longer or crc != entry.crc32c:
            size = f"more than {got}" if longer else str(got)
            raise ChecksumMismatch(f"{key}: {size} bytes, CRC32C {crc}; the manifest lists "
                                   f"{entry.size} bytes, {entry.crc32c}")
        return io.BytesIO(data)

    def concat_path(self, path, suffix: str) -> str:
        return f"{str(path).rstrip('/')}/{suffix}"

    def init_path(self, path) -> str:
        return validate_key(str(path).strip("/"))

    def rename(self, path, new_path) -> None:
        raise NotImplementedError("tiers publish each object atomically: nothing is renamed")

    def mkdir(self, path) -> None:
        pass  # a tier is a flat key space; a directory tier makes the folders a key needs

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id) -> bool:
        try:
            validate_key(str(checkpoint_id).strip("/"))
        except ValueError:
            return False
        return True

    def exists(self, path) -> bool:
        return run_sync(self.tier.size(validate_key(str(path)))) is not None

    def rm_file(self, path) -> None:
        run_sync(self.tier.delete(validate_key(str(path))))


class TierStorageWriter(FileSystemWriter):
    """DCP's ``FileSystemWriter`` writing into ``folder`` of ``tier`` (see the module docstring).
    ``files``: what this rank wrote in the last save, as manifest entries. ``thread_count``: DCP's
    writer threads, one file each; ``cache_staged_state_dict``: DCP's reusable staging copy
    (``async_save`` without a stager of its own stages through the writer)."""

    def __init__(self, tier, folder: str, *, thread_count: int = 1, cache_staged_state_dict: bool = False,
                 read_timeout_s: float = DEFAULT_READ_TIMEOUT_S):
        super().__init__(folder, sync_files=False, thread_count=thread_count, overwrite=True,
                         cache_staged_state_dict=cache_staged_state_dict)
        # sync_files is off: DCP would fsync a file descriptor, or sync the whole host without one;
        # a tier's sink makes its object durable when it commits
        self.fs = TierFileSystem(tier, read_timeout_s=read_timeout_s, phase="local_write")  # the first tier's
        self.path = self.fs.init_path(folder)

    @property
    def files(self) -> list[FileEntry]:
        return list(self.fs.written)

    def reset(self, checkpoint_id=None) -> None:
        super().reset(checkpoint_id)
        self.fs.written.clear()

    def set_up_storage_writer(self, is_coordinator: bool, *args, **kwargs) -> None:
        super().set_up_storage_writer(is_coordinator, *args, **kwargs)
        self.fs.rank = kwargs.get("rank") or 0

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id) -> bool:
        return TierFileSystem.validate_checkpoint_id(checkpoint_id)

    def prepare_local_plan(self, plan):
        return plan  # no folder to make, and a step's folder is new: nothing to overwrite

    def write_data(self, plan, planner):
        """This rank's files, their bytes booked on the tier from now: DCP's planning before it is the
        software's own time, not the device's."""
        self.fs.anchor = time.time()
        return super().write_data(plan, planner)

    def finish(self, metadata, results) -> None:
        """The coordinator's ``.metadata``, as DCP writes it, published in one atomic write."""
        metadata.version = CURRENT_DCP_VERSION
        metadata.storage_data = {wr.index: wr.storage_data for wr_list in results for wr in wr_list}
        metadata.storage_meta = self.storage_meta()
        self.fs.anchor = time.time()  # after the results' gather
        with self.fs.create_stream(self.fs.concat_path(self.path, METADATA), "wb") as stream:
            stream.write(pickle.dumps(metadata))


class TierStorageReader(FileSystemReader):
    """DCP's ``FileSystemReader`` over ``folder`` of ``tier``; with ``entries`` (the manifest's files)
    every file is checked before it is used, and one the manifest does not list is refused."""

    def __init__(self, tier, folder: str, *, entries=None, read_timeout_s: float = DEFAULT_READ_TIMEOUT_S):
        super().__init__(folder)
        expected = None if entries is None else {e.key: e for e in entries}
        self.fs = TierFileSystem(tier, expected=expected, read_timeout_s=read_timeout_s)
        self.path = self.fs.init_path(folder)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id) -> bool:
        return TierFileSystem.validate_checkpoint_id(checkpoint_id)
