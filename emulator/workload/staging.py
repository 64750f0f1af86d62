"""Staging: a rank's live tensors to host buffers (the snapshot) and back (a restore), on any device.

A ``Copier`` is the device side; the ``Stager`` decides where the host copy lives and
drives the copier, so the CPU path and the GPU path run the same code:

- ``CpuCopier``: the state lives in host memory; a copy is one ``memmove`` per tensor
  (releases the GIL, never slower than ``copy_`` on one thread), done when it returns.
- ``CudaCopier``: copies run on a side CUDA stream with ``non_blocking=True``; an event
  marks them done. The side stream first waits for the training (current) stream, so
  a copy sees every update enqueued before it; the host waits on the event (the stall
  ends when the bytes are on the host, not when the copies are enqueued); and the
  training stream is made to wait on the same event, so the next step's update can
  never overwrite a tensor the copy still reads.

Host memory: always exactly one staging copy of the state (the bytes ``torch.save``
writes). On a GPU it is pinned when it fits ``state.pinned_budget_gib`` (default: the
state's size), so device-to-host copies run at full speed straight into it; pinned
buffers are packed per dtype into one allocation of their own size and locked with
``cudaHostRegister`` (``pin_memory=True`` rounds up to a power of two). Over the
budget the staging copy is pageable and the copies go through pinned bucket slots
(the budget split in two, reused): bucket k's device copy runs while bucket k-1 is
moved from its slot into the staging copy; a slot is refilled only after its previous
bucket left it. Restores run the same way backwards (host to device). Every buffer is
allocated and touched once and reused, since fresh pages are slow (docs/performance.md).
"""
from __future__ import annotations

import ctypes
import time
import weakref
from collections import deque
from dataclasses import dataclass

import torch

from emulator.errors import UserError

#: slots a bucketed stager cycles through: one filling on the device while one empties on the host
SLOTS = 2
MIN_BUCKET = 1 << 20
#: page size: the unit cudaHostRegister locks
PAGE = 4096
#: each tensor's start inside a packed buffer (small gaps, aligned copies)
TENSOR_ALIGN = 64


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def byte_view(t: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor's bytes as a flat uint8 view."""
    return t.reshape(-1).view(torch.uint8)


def _same_layout(dst: torch.Tensor, src: torch.Tensor) -> bool:
    return (dst.dtype == src.dtype and dst.shape == src.shape and dst.device.type == src.device.type == "cpu"
            and dst.is_contiguous() and src.is_contiguous())


def host_copy(dst: torch.Tensor, src: torch.Tensor) -> None:
    """``dst.copy_(src)`` for same-layout host tensors, as one memmove (releases the GIL)."""
    if _same_layout(dst, src):
        ctypes.memmove(dst.data_ptr(), src.data_ptr(), nbytes(src))
    else:
        dst.copy_(src)


@dataclass(frozen=True)
class Piece:
    """``length`` bytes of tensor ``tensor`` from byte ``offset``: part of one bucket."""

    tensor: int
    offset: int
    length: int


def plan_buckets(sizes: list[int], bucket_bytes: int) -> list[list[Piece]]:
    """Tensors of ``sizes`` bytes, in order, cut into buckets of at most ``bucket_bytes``
    (a tensor larger than a bucket spans several; empty tensors are left out)."""
    if bucket_bytes < 1:
        raise ValueError("bucket_bytes must be >= 1")
    buckets, current, room = [], [], bucket_bytes
    for index, size in enumerate(sizes):
        offset = 0
        while offset < size:
            take = min(size - offset, room)
            current.append(Piece(index, offset, take))
            offset, room = offset + take, room - take
            if room == 0:
                buckets.append(current)
                current, room = [], bucket_bytes
    if current:
        buckets.append(current)
    return buckets


class CpuCopier:
    """The state lives in host memory: every copy is a memmove, finished when it returns."""

    device_copies = False  # no device: nothing to report as device-to-host time
    wants_pinned = False

    def host_tensors(self, specs: list[tuple], pinned: bool) -> list[torch.Tensor]:
        """Host tensors of these (shape, dtype)s; ``pinned``: page-locked (where a device needs it)."""
        return [torch.empty(shape, dtype=dtype) for shape, dtype in specs]

    def begin(self) -> None:
        """Order the copies after everything the training loop did so far."""

    def copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        host_copy(dst, src)

    def copy_all(self, dsts: list[torch.Tensor], srcs: list[torch.Tensor]) -> None:
        """``copy`` of each pair; host tensors never move, so the memmoves are planned once per pair of
        lists (a snapshot of hundreds of tensors costs a few microseconds of Python each, not tens)."""
        key = (len(dsts), dsts[0].data_ptr(), srcs[0].data_ptr()) if dsts else ()
        if getattr(self, "_plan_key", None) != key:  # () for no pairs: still a plan, an empty one
            self._plan_key, self._plan = key, [
                (d.data_ptr(), s.data_ptr(), nbytes(s)) if _same_layout(d, s) else (d, s, None)
                for d, s in zip(dsts, srcs)]
        for d, s, n in self._plan:
            if n is None:
                d.copy_(s)
            elif n:
                ctypes.memmove(d, s, n)

    def record(self):
        """A marker of the copies issued so far."""
        return None

    def wait(self, event) -> None:
        """Block the host until the copies before ``event`` are done."""

    def fence(self, event) -> None:
        """Make the training loop's next device work wait for the copies before ``event``."""


class CudaCopier(CpuCopier):
    """Copies between a GPU and host memory on a side stream, non-blocking, with events."""

    device_copies = True
    wants_pinned = True

    def __init__(self, device: torch.device):
        self.device = torch.device(device)
        self.stream = torch.cuda.Stream(self.device)

    def host_tensors(self, specs: list[tuple], pinned: bool) -> list[torch.Tensor]:
        """Pinned: per dtype, views packed into one allocation of their size, page-locked with
        ``cudaHostRegister`` (``pin_memory=True`` rounds every allocation up to a power of two:
        up to twice the pinned memory asked for). One storage per dtype, because ``torch.save``
        refuses views of one storage as different dtypes."""
        if not pinned:
            return super().host_tensors(specs, pinned)
        buffers, views = packed_by_dtype(specs)
        for flat, start, size in buffers:
            ptr = flat.data_ptr() + start
            err = torch.cuda.cudart().cudaHostRegister(ptr, size, 0)
            if int(err) != 0:
                raise UserError(f"pinning {size / (1 << 30):.2f} GiB of host memory failed (cudaHostRegister "
                                f"error {int(err)}): lower state.pinned_budget_gib or raise the locked-memory limit")
            weakref.finalize(self, _unregister, ptr, flat)  # holds the buffer until it is unlocked
        return views

    def begin(self) -> None:
        self.stream.wait_stream(torch.cuda.current_stream(self.device))

    def copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        with torch.cuda.stream(self.stream):
            dst.copy_(src, non_blocking=True)

    def copy_all(self, dsts: list[torch.Tensor], srcs: list[torch.Tensor]) -> None:
        for d, s in zip(dsts, srcs):  # each on the side stream, as copy issues it
            self.copy(d, s)

    def record(self):
        event = torch.cuda.Event()
        event.record(self.stream)
        return event

    def wait(self, event) -> None:
        event.synchronize()

    def fence(self, event) -> None:
        torch.cuda.current_stream(self.device).wait_event(event)


def packed_by_dtype(specs: list[tuple]) -> tuple[list[tuple], list[torch.Tensor]]:
    """Tensors of ``specs`` packed per dtype (``_packed``): ([(buffer, start, bytes)], views in order)."""
    buffers, views = [], [None] * len(specs)
    for dtype in dict.fromkeys(d for _, d in specs):
        group = [i for i, (_, d) in enumerate(specs) if d == dtype]
        flat, start, size, packed = _packed([specs[i] for i in group])
        buffers.append((flat, start, size))
        for i, v in zip(group, packed):
            views[i] = v
    return buffers, views


def _packed(specs: list[tuple]) -> tuple[torch.Tensor, int, int, list[torch.Tensor]]:
    """Tensors of ``specs`` (one dtype) packed from a page boundary inside one new buffer, each
    at a multiple of TENSOR_ALIGN bytes, so the pages to lock hold nothing else:
    (buffer, start, pages' bytes, views)."""
    dtype = specs[0][1]
    item = torch.empty((), dtype=dtype).element_size()
    step = max(1, TENSOR_ALIGN // item)
    offsets, at = [], 0
    for shape, _ in specs:
        offsets.append(at)
        at += -(-torch.Size(shape).numel() // step) * step
    size = -(-max(1, at * item) // PAGE) * PAGE
    flat = torch.zeros(size + PAGE, dtype=torch.uint8)
    start = -flat.data_ptr() % PAGE
    elems = flat[start:start + at * item].view(dtype)
    views = [elems[o:o + torch.Size(shape).numel()].view(shape) for (shape, _), o in zip(specs, offsets)]
    return flat, start, size, views


def _unregister(ptr: int, flat: torch.Tensor) -> None:
    """Unlock host memory registered with CUDA; ``flat`` (kept alive until now) stays valid for its views."""
    try:
        torch.cuda.cudart().cudaHostUnregister(ptr)
    except Exception:  # noqa: BLE001 - at interpreter exit CUDA may already be gone
        pass


def copier_for(device: torch.device) -> CpuCopier:
    return CudaCopier(device) if torch.device(device).type == "cuda" else CpuCopier()


@dataclass
class StageTiming:
    """One staging pass: wall seconds, the device-copy part of it (0 without a device), bytes, buckets."""

    seconds: float
    device_s: float
    bytes: int
    buckets: int


class Stager:
    """Plans and runs the copies between a rank's live tensors and its one host staging copy."""

    def __init__(self, sizes: list[int], copier: CpuCopier, pinned_budget: int | None = None, *,
                 min_bucket: int = MIN_BUCKET):
        """``pinned_budget``: bytes of pinned host memory allowed (None: the state's size);
        ``min_bucket``: the smallest bucket slot (a budget below two of them is raised to that)."""
        self.copier, self.sizes = copier, list(sizes)
        self.total = sum(self.sizes)
        self.budget = self.total if pinned_budget is None else int(pinned_budget)
        self.bucketed = copier.wants_pinned and self.total > self.budget
        self.bucket_bytes = max(min_bucket, self.budget // SLOTS) if self.bucketed else self.total
        self.buckets = plan_buckets(self.sizes, self.bucket_bytes) if self.bucketed else \
            [[Piece(i, 0, n) for i, n in enumerate(self.sizes) if n]]
        self.slots = copier.host_tensors([((self.bucket_bytes,), torch.uint8)] * min(SLOTS, len(self.buckets)),
                                         True) if self.bucketed else []

    @property
    def pinned_bytes(self) -> int:
        if not self.copier.wants_pinned:
            return 0
        return len(self.slots) * self.bucket_bytes if self.bucketed else self.total

    def host_buffers(self, live: list[torch.Tensor]) -> list[torch.Tensor]:
        """The host staging copy (same layouts as ``live``), allocated and filled (touched) once."""
        pinned = self.copier.wants_pinned and not self.bucketed
        host = self.copier.host_tensors([(t.shape, t.dtype) for t in live], pinned)
        self.to_host(live, host)
        return host

    def describe(self) -> dict:
        return {"host_bytes": self.total, "pinned_bytes": self.pinned_bytes, "budget_bytes": self.budget,
                "bucketed": self.bucketed, "buckets": len(self.buckets), "bucket_bytes": self.bucket_bytes,
                "device_copies": self.copier.device_copies}

    # ------------------------------------------------------------------ device to host

    def to_host(self, live: list[torch.Tensor], host: list[torch.Tensor]) -> StageTiming:
        """Copy ``live`` into ``host``; returns when every byte is there and the training
        loop's next device work is ordered after the copies."""
        c, t0 = self.copier, time.perf_counter()
        c.begin()
        if self.bucketed:
            device_done = self._to_host_in_buckets(live, host)
        else:
            pieces = self.buckets[0]
            c.copy_all([host[p.tensor] for p in pieces], [live[p.tensor] for p in pieces])
            event = c.record()
            c.fence(event)
            c.wait(event)
            device_done = time.perf_counter()
        return self._timing(t0, device_done)

    def _to_host_in_buckets(self, live, host) -> float:
        c, pending, device_done = self.copier, deque(), 0.0
        for k, bucket in enumerate(self.buckets):
            slot = self.slots[k % len(self.slots)]
            if len(pending) == len(self.slots):  # the slot still holds bucket k - SLOTS: empty it first
                device_done = self._unload(*pending.popleft(), host)
            for p, at in _placed(bucket):
                c.copy(slot[at:at + p.length], _bytes(live[p.tensor], p))
            pending.append((bucket, slot, c.record()))
        c.fence(pending[-1][2])  # events complete in stream order: the last one covers every copy
        while pending:
            device_done = self._unload(*pending.popleft(), host)
        return device_done

    def _unload(self, bucket, slot, event, host) -> float:
        """Wait for a bucket's device copy, then move it from its slot into the staging copy."""
        self.copier.wait(event)
        done = time.perf_counter()
        for p, at in _placed(bucket):
            host_copy(_bytes(host[p.tensor], p), slot[at:at + p.length])
        return done

    # ------------------------------------------------------------------ host to device

    def to_device(self, host: list[torch.Tensor], live: list[torch.Tensor]) -> StageTiming:
        """Copy ``host`` into ``live`` (a verified restore); returns when every byte is there."""
        c, t0 = self.copier, time.perf_counter()
        c.begin()
        if self.bucketed:
            event = self._to_device_in_buckets(host, live)
        else:
            for p in self.buckets[0]:
                c.copy(live[p.tensor], host[p.tensor])
            event = c.record()
        c.fence(event)
        c.wait(event)
        return self._timing(t0, time.perf_counter())

    def _to_device_in_buckets(self, host, live):
        c, pending = self.copier, deque()
        for k, bucket in enumerate(self.buckets):
            slot = self.slots[k % len(self.slots)]
            if len(pending) == len(self.slots):  # the slot's previous bucket must have left it
                c.wait(pending.popleft())
            for p, at in _placed(bucket):
                host_copy(slot[at:at + p.length], _bytes(host[p.tensor], p))
            for p, at in _placed(bucket):
                c.copy(_bytes(live[p.tensor], p), slot[at:at + p.length])
            pending.append(c.record())
        return pending[-1]

    def _timing(self, t0: float, device_done: float) -> StageTiming:
        seconds = time.perf_counter() - t0
        device_s = device_done - t0 if self.copier.device_copies else 0.0
        return StageTiming(seconds, device_s, self.total, len(self.buckets))


def _placed(bucket: list[Piece]):
    """Each piece of a bucket with its byte offset in the slot."""
    at = 0
    for p in bucket:
        yield p, at
        at += p.length


def _bytes(t: torch.Tensor, p: Piece) -> torch.Tensor:
    return byte_view(t)[p.offset:p.offset + p.length]
