"""The peer tier: copies of each node's checkpoint files in the host memory of R other nodes.

As NVIDIA's resiliency extension (NVRx local checkpointing with a replication
factor and a "jump") does, a node's files survive the loss of that node when
another node holds a copy. Where the copies go: ``emulator/checkpoint/placement.py``.

The copies travel as real bytes between the ranks' processes over a gloo
process group (``PeerTransport``): rank (node n, local rank l) sends its own
files to rank (h, l) of every holder h and receives those of rank (s, l) of
every source s. Every exchange is collective over the group: every rank calls
it, each stream (one sender, one receiver) runs in its own thread on both ends,
so no stream waits on another and no send/recv order can deadlock, and the call
ends with an all_gather of every rank's errors, so all ranks return the same
``PeerResult.errors``. A file that cannot be read or stored, or arrives wrong, is
an error in that list and the streams go on; only a failure of the process group
itself raises (and leaves the other ranks to gloo's timeout). On a stream: a header (file count), then per file a
header (size, CRC32C, key length, status), the key, and the bytes in chunks of
``chunk`` bytes, so a rank holds at most one chunk buffer per stream. The
receiver checks size and CRC32C against the sender's header and publishes the
copy in its ``store`` tier only when both match; a mismatch aborts the sink.

Pacing: ``pacer`` (a ``tiers.pacing`` token bucket, bytes/s) stands for the
node's NIC on the sending side. The node's drain to the global tier leaves
through the same NIC: to emulate that, the caller gives both the same bucket
(a ``FileTokenBucket`` shared by the node's processes). Each chunk's bytes are
booked from the start of its send, as a tier's transfer is (tiers/emulated.py),
and logged as paced time of the caller's phase (tiers/paced.py).
"""
from __future__ import annotations

import contextvars
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import crc32c
import torch
import torch.distributed as dist

from emulator.checkpoint.integrity import format_crc
from emulator.checkpoint.placement import PeerLayout
from tiers import paced
from tiers.base import Tier, TierError
from tiers.emulated import current_phase

#: bytes per message of a file's body: what a stream holds in memory at once
CHUNK = 64 << 20
_OK, _MISSING = 0, 1
_HEADER = 4  # int64s: size, crc32c, key length, status


class PeerError(Exception):
    """A copy that did not arrive whole (refused on receipt, or unreadable at its sender)."""


# --------------------------------------------------------------------------- results

@dataclass
class PeerReceipt:
    """A copy received and published: from which node, its key, size, CRC32C, seconds."""

    node: int
    key: str
    size: int
    crc32c: str
    seconds: float


@dataclass
class PeerResult:
    """One rank's outcome of a collective exchange; ``errors`` are every rank's, the same on all."""

    received: list = field(default_factory=list)  # PeerReceipt
    sent_bytes: int = 0
    errors: list = field(default_factory=list)  # "rank R: what"
    #: seconds this rank's streams took, first message to last (the exchange's set-up and its
    #: gather of every rank's errors are outside)
    stream_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.errors

    def raise_for_errors(self) -> None:
        if self.errors:
            raise PeerError("; ".join(self.errors))


# --------------------------------------------------------------------------- transport

def _isend(tensor: torch.Tensor, peer: int, group, tag: int):
    """One message out (a seam for tests that corrupt bytes in flight)."""
    return dist.isend(tensor, group=group, group_dst=peer, tag=tag)


def _irecv(tensor: torch.Tensor, peer: int, group, tag: int):
    return dist.irecv(tensor, group=group, group_src=peer, tag=tag)


def paced_send(send, nbytes: float, pacer) -> None:
    """``send()`` ``nbytes``; with a ``pacer``, then wait until they are due from the send's start (the
    real send overlaps the NIC's time), the span logged as paced time of the current phase."""
    if pacer is None:
        send()
        return
    start, wall = pacer.clock(), time.time()
    send()
    due = pacer.reserve(nbytes, start)
    paced.record_due(current_phase(), wall, due - pacer.clock())
    pacer.wait_until(due)


class PeerTransport:
    """Collective file exchanges over a gloo group whose rank is node * ranks_per_node + local_rank.

    ``group``: a ``torch.distributed`` gloo group of every rank of the job (None: the
    default group); give the transport a group of its own (``dist.new_group``), as each
    ``DistComm`` user has, so its messages never interleave with another thread's
    collectives. ``pacer``: optional token bucket on this rank's sends (the NIC).
    """

    def __init__(self, group=None, *, ranks_per_node: int, chunk: int = CHUNK, pacer=None, tag: int = 24):
        self.group = group
        self.rank = dist.get_rank(group)
        self.ranks_per_node = ranks_per_node
        self.node, self.local_rank = divmod(self.rank, ranks_per_node)
        self.chunk = int(chunk)
        self.pacer = pacer
        #: the design's bytes per byte sent (emulator/checkpoint/rank_file.py ``design_bytes_weight``)
        self.bytes_weight = 1.0
        self.tag = tag

    def _peer(self, node: int) -> int:
        return node * self.ranks_per_node + self.local_rank

    # ---- the two exchanges

    def send_replicas(self, layout: PeerLayout, files: Sequence, source: Tier, store: Tier) -> PeerResult:
        """Collective: send this rank's ``files`` (objects with ``key``, ``size``, ``crc32c``, as
        ``layout.FileEntry``) from ``source`` to the same local rank of each holder node, and
        receive the files of each source node's same local rank into ``store``."""
        sends = {self._peer(h): files for h in layout.holders(self.node)}
        recvs = [self._peer(s) for s in layout.sources(self.node)]
        return self._exchange(layout, sends, recvs, source, store)

    def fetch_back(self, layout: PeerLayout, lost: Sequence[int], held: Mapping[int, Sequence],
                   store: Tier, dest: Tier) -> PeerResult:
        """Collective: each node in ``lost`` gets its files back from its first surviving holder.

        ``held``: on a holder, node -> the entries (key, size, crc32c) of that node's files it holds
        in ``store`` (e.g. from ``PeerResult.received``); others pass {}. A replacement rank writes
        what it receives into ``dest``."""
        sends, recvs = {}, []
        for node in lost:
            server = layout.server(node, lost)
            if server is None:
                continue  # every holder is lost too: nothing to fetch (an error below)
            if server == self.node:
                sends[self._peer(node)] = held.get(node, [])
            if node == self.node:
                recvs.append(self._peer(server))
        result = self._exchange(layout, sends, recvs, store, dest)
        result.errors += [f"node {n}: every holder of its copies is lost" for n in lost
                          if layout.server(n, lost) is None]  # the same on every rank
        return result

    # ---- one collective exchange: every stream in its own thread, then the outcomes

    def _exchange(self, layout: PeerLayout, sends: Mapping[int, Sequence], recvs: Sequence[int],
                  source: Tier, store: Tier) -> PeerResult:
        world = dist.get_world_size(self.group)
        if world != layout.nodes * self.ranks_per_node:
            raise ValueError(f"the group has {world} ranks, the layout {layout.nodes} nodes x "
                             f"{self.ranks_per_node} ranks")
        result, errors = PeerResult(), []
        streams = len(sends) + len(recvs)
        if streams:
            start = time.time()
            with ThreadPoolExecutor(streams, thread_name_prefix="peer") as pool:
                # each stream in a copy of the caller's context: its phase (tiers.emulated.counted_as)
                outs = [pool.submit(contextvars.copy_context().run, self._send_stream, peer, list(files), source,
                                    errors) for peer, files in sends.items()]
                ins = [pool.submit(contextvars.copy_context().run, self._recv_stream, peer, store, errors)
                       for peer in recvs]
                result.sent_bytes = sum(f.result() for f in outs)
                result.received = [r for f in ins for r in f.result()]
            result.stream_s = time.time() - start
        everyone = [None] * world
        dist.all_gather_object(everyone, errors, group=self.group)
        result.errors = [f"rank {r}: {e}" for r, errs in enumerate(everyone) for e in errs]
        return result

    def _send_stream(self, peer: int, files: list, source: Tier, errors: list) -> int:
        self._send(torch.tensor([len(files)], dtype=torch.int64), peer)
        buf, sent = None, 0
        for f in files:
            try:
                reader = source.open_read(f.key)
            except (OSError, TierError) as exc:
                errors.append(f"cannot read {f.key}: {exc}")
                self._send_header(peer, f.key, -1, 0, _MISSING)
                continue
            with reader:
                self._send_header(peer, f.key, f.size, int(f.crc32c, 16), _OK)
                if buf is None or buf.numel() < min(self.chunk, f.size):
                    buf = torch.empty(min(self.chunk, f.size), dtype=torch.uint8)
                for off in range(0, f.size, self.chunk):
                    part = buf[:min(self.chunk, f.size - off)]
                    _read_into(reader, part)  # a short file sends zeros: the receiver refuses it
                    paced_send(lambda: self._send(part, peer), part.numel() * self.bytes_weight, self.pacer)
                    sent += part.numel()
        return sent

    def _recv_stream(self, peer: int, store: Tier, errors: list) -> list[PeerReceipt]:
        count = torch.empty(1, dtype=torch.int64)
        self._recv(count, peer)
        buf, got = None, []
        for _ in range(int(count)):
            t = time.perf_counter()
            size, crc, key, status = self._recv_header(peer)
            if status != _OK:
                errors.append(f"node {peer // self.ranks_per_node} could not send {key}")
                continue
            if buf is None or buf.numel() < min(self.chunk, size):
                buf = torch.empty(min(self.chunk, size), dtype=torch.uint8)
            receipt = self._recv_file(peer, store, key, size, crc, buf, errors)
            if receipt is not None:
                receipt.seconds = time.perf_counter() - t
                got.append(receipt)
        return got

    def _recv_file(self, peer, store, key, size, crc, buf, errors) -> PeerReceipt | None:
        """Receive every chunk (the stream keeps its shape whatever happens), publish only a match."""
        sink, have, error = None, 0, ""
        try:
            sink = store.open_write(key)
        except (OSError, TierError) as exc:
            error = f"cannot store {key}: {exc}"
        for off in range(0, size, self.chunk):
            part = buf[:min(self.chunk, size - off)]
            self._recv(part, peer)
            view = memoryview(part.numpy())
            have = crc32c.crc32c(view, have)
            if sink is not None and not error:
                try:
                    sink.write(view)
                except (OSError, TierError) as exc:
                    error = f"cannot store {key}: {exc}"
        if not error and have != crc:
            error = f"refused {key} from node {peer // self.ranks_per_node}: CRC32C {format_crc(have)}, " \
                    f"its sender's {format_crc(crc)}"
        if sink is not None:
            if error:
                sink.abort()
            else:
                sink.commit()
        if error:
            errors.append(error)
            return None
        return PeerReceipt(peer // self.ranks_per_node, key, size, format_crc(crc), 0.0)

    # ---- messages

    def _send(self, tensor: torch.Tensor, peer: int) -> None:
        _isend(tensor, peer, self.group, self.tag).wait()

    def _recv(self, tensor: torch.Tensor, peer: int) -> None:
        _irecv(tensor, peer, self.group, self.tag).wait()

    def _send_header(self, peer: int, key: str, size: int, crc: int, status: int) -> None:
        raw = key.encode()
        self._send(torch.tensor([size, crc, len(raw), status], dtype=torch.int64), peer)
        self._send(torch.frombuffer(bytearray(raw), dtype=torch.uint8), peer)

    def _recv_header(self, peer: int) -> tuple[int, int, str, int]:
        head = torch.empty(_HEADER, dtype=torch.int64)
        self._recv(head, peer)
        size, crc, n, status = (int(v) for v in head)
        raw = torch.empty(n, dtype=torch.uint8)
        self._recv(raw, peer)
        return size, crc, bytes(raw.numpy()).decode(), status


def _read_into(reader, part: torch.Tensor) -> None:
    """Fill ``part`` from ``reader``; what the file lacks stays zero."""
    view, n = memoryview(part.numpy()), 0
    while n < len(view):
        got = reader.readinto(view[n:])
        if not got:
            view[n:] = bytes(len(view) - n)
            return
        n += got
