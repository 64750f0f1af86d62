"""How the ranks write a checkpoint's files: one swappable mechanism behind a small interface.

An engine saves one rank's file into a tier (through the tier's sink, published durably on commit)
and returns its bytes and CRC32C, and says how many bytes that file has without writing it. The
pipeline (emulator/checkpoint/first_write.py), the dilation's probe and the benches call only that.
``torch_save``: one ``torch.save`` of the rank's staged payload through a CRC32C-computing sink. A
new engine is one class plus one line in :data:`ENGINES`.
"""
from __future__ import annotations

import torch
import torch.utils.serialization as serialization

from emulator.checkpoint.integrity import ChecksumSink


class RankFileEngine:
    """The interface: :meth:`stage` the snapshot in the training loop's stall, :meth:`write` this rank's
    files of a checkpoint into a tier in the pipeline's write stage (every rank at once), through
    :meth:`save` one rank's file; :meth:`file_bytes` its size unwritten."""

    name = ""
    #: whether a write that found the first tier full may go to global storage instead, and a direct
    #: write there be retried, rank by rank (an engine whose write is collective may not)
    falls_back = True

    def stage(self, state, rec, *, paced: bool, tier):
        """The snapshot of checkpoint ``rec`` (its first tier: ``tier``): the live state into the
        staging buffers (a paced CPU state's swap). Returns its StageTiming."""
        return state.snapshot(paced=paced)

    def write(self, state, tier, receipt, rec, *, after_write=None) -> None:
        """This rank's files of checkpoint ``rec`` into ``tier``, into ``receipt`` (its key given)."""
        receipt.size, receipt.crc32c = self.save(state, tier, receipt.key, rec.step, after_write=after_write)

    def save(self, state, tier, key: str, step: int, *, after_write=None) -> tuple[int, str]:
        """Write rank ``state``'s file of ``step`` to ``tier`` at ``key``; ``after_write()`` runs when
        every byte is written and nothing is published yet (fault injection). Returns (bytes, crc32c)."""
        raise NotImplementedError

    def file_bytes(self, state, step: int = 0) -> int:
        """The bytes of the rank's file, counted without writing it."""
        raise NotImplementedError


class _Counter:
    """A sink that counts what torch.save writes (it hands over views of the tensors: no copy)."""

    def __init__(self):
        self.n = 0

    def write(self, data) -> int:
        n = memoryview(data).nbytes
        self.n += n
        return n

    def flush(self) -> None:
        pass


class TorchSave(RankFileEngine):
    """One ``torch.save`` of the staged payload per rank, through a CRC32C-computing sink."""

    name = "torch_save"

    def save(self, state, tier, key: str, step: int, *, after_write=None) -> tuple[int, str]:
        sink = ChecksumSink(tier.open_write(key))
        with sink:
            torch.save(state.payload(step), sink)
            if after_write is not None:
                after_write()
        return sink.bytes_written, sink.hexdigest

    def file_bytes(self, state, step: int = 0) -> int:
        """Its tensors plus torch.save's structure (a zip entry and a pickle record a tensor)."""
        counter, config = _Counter(), serialization.config.save
        crc, config.compute_crc32 = config.compute_crc32, False  # the zip CRC reads every byte, changes none
        try:
            torch.save(state.payload(step), counter)
        finally:
            config.compute_crc32 = crc
        return counter.n


#: the engines by name
ENGINES = {TorchSave.name: TorchSave}
#: the engine the pipeline uses unless told
DEFAULT = TorchSave()


def engine(name: str) -> RankFileEngine:
    """The engine called ``name`` (KeyError with the choices if none)."""
    if name not in ENGINES:
        raise KeyError(f"unknown checkpoint engine {name!r} (use {', '.join(ENGINES)})")
    return ENGINES[name]()


def save_rank_file(state, tier, key: str, step: int, *, after_write=None) -> tuple[int, str]:
    """The default engine's write of one rank's file (:meth:`RankFileEngine.save`)."""
    return DEFAULT.save(state, tier, key, step, after_write=after_write)


def serialized_size(state, step: int = 0) -> int:
    """The bytes of the rank's file as the default engine writes it."""
    return DEFAULT.file_bytes(state, step)


def design_bytes_weight(state, scale: float, engine_: RankFileEngine = DEFAULT) -> float:
    """The design's bytes (of the rank, at ``scale``) per byte of the rank's file: its tiers book each
    byte moved at this weight, so the file takes the time the design gives the rank's state. The
    structure does not shrink with the scale (about 280 bytes a tensor): counted as bytes, it would
    lengthen every paced phase by its share / scale at full size (3 % for a Llama-3 70B rank at 0.005)."""
    return min(1.0, state.emulated_bytes * scale / max(1, engine_.file_bytes(state)))
