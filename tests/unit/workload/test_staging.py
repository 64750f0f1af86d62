"""Staging on any device (emulator/workload/staging.py): the bucket plan, the pinned budget, and the order of
copies, waits and fences, checked on the CPU with a copier that behaves like a GPU's: its copies
only happen when the host waits for them, reading the bytes as they are then."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from emulator.workload.staging import CpuCopier, Stager, byte_view, plan_buckets


class LazyCopier(CpuCopier):
    """A stand-in device, at either end of what a GPU may do: lazy, its copies run only when the
    host waits on a later event (a stager that reads a slot before waiting gets old bytes);
    eager, they run at once (a stager that refills a slot before emptying it loses a bucket)."""

    device_copies = True
    wants_pinned = True

    def __init__(self, eager=False):
        self.queue, self.done, self.log, self.pinned, self.eager = [], 0, [], 0, eager

    def host_tensors(self, specs, pinned):
        out = super().host_tensors(specs, False)
        self.pinned += sum(t.numel() * t.element_size() for t in out) if pinned else 0
        return out

    def begin(self):
        self.log.append(("begin",))

    def copy(self, dst, src):
        self.queue.append((dst, src))
        self.log.append(("copy",))
        if self.eager:
            self.wait(len(self.queue))
            self.log.pop()

    def record(self):
        self.log.append(("record", len(self.queue)))
        return len(self.queue)

    def wait(self, event):
        while self.done < event:
            dst, src = self.queue[self.done]
            dst.copy_(src)
            self.done += 1
        self.log.append(("wait", event))

    def fence(self, event):
        self.log.append(("fence", event))

    def flush(self):
        self.wait(len(self.queue))


def tensors(sizes, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (n,), dtype=torch.uint8, generator=gen) for n in sizes]


SIZES = [5000, 17, 0, 12000, 3000, 1]


@given(st.lists(st.integers(0, 5000), max_size=12), st.integers(1, 3000))
@settings(max_examples=200, deadline=None)
def test_buckets_cover_every_byte_once_in_order_within_the_bucket_size(sizes, bucket):
    buckets = plan_buckets(sizes, bucket)
    pieces = [p for b in buckets for p in b]
    assert all(sum(p.length for p in b) <= bucket for b in buckets)
    assert all(sum(p.length for p in b) == bucket for b in buckets[:-1])  # only the last one is short
    assert all(p.length > 0 for p in pieces)
    expected = [(i, off) for i, n in enumerate(sizes) for off in range(0, n, 1)]
    covered = [(p.tensor, p.offset + k) for p in pieces for k in range(p.length)]
    assert covered == expected


def test_cpu_copies_directly_and_pins_nothing():
    live = tensors(SIZES)
    stager = Stager([t.numel() for t in live], CpuCopier(), pinned_budget=1)
    host = stager.host_buffers(live)
    assert all(torch.equal(h, t) for h, t in zip(host, live))
    d = stager.describe()
    assert not d["bucketed"] and d["pinned_bytes"] == 0 and d["buckets"] == 1 and not d["device_copies"]
    live[0][:10] = 7
    timing = stager.to_host(live, host)
    assert torch.equal(host[0], live[0]) and timing.device_s == 0 and timing.bytes == sum(SIZES)


@pytest.mark.parametrize("budget", [None, 1 << 20])
def test_within_the_budget_one_pinned_copy_one_event(budget):
    live, copier = tensors(SIZES), LazyCopier()
    stager = Stager([t.numel() for t in live], copier, pinned_budget=budget)
    host = stager.host_buffers(live)
    assert all(torch.equal(h, t) for h, t in zip(host, live))
    assert not stager.bucketed and copier.pinned == sum(SIZES) == stager.pinned_bytes
    assert [x[0] for x in copier.log].count("record") == 1


@pytest.fixture(params=[False, True], ids=["lazy", "eager"])
def eager(request):
    return request.param


def _bucketed(budget=4096, eager=False):
    live, copier = tensors(SIZES), LazyCopier(eager)
    stager = Stager([t.numel() for t in live], copier, pinned_budget=budget, min_bucket=1)
    return live, copier, stager


def test_over_the_budget_stages_in_buckets_through_pinned_slots_within_it(eager):
    live, copier, stager = _bucketed(eager=eager)
    host = stager.host_buffers(live)
    assert stager.bucketed and stager.bucket_bytes == 2048
    assert len(stager.buckets) == -(-sum(SIZES) // 2048)
    assert copier.pinned == stager.pinned_bytes == 4096  # only the slots are pinned, within the budget
    assert all(torch.equal(h, t) for h, t in zip(host, live))  # the one staging copy is pageable
    assert stager.describe()["buckets"] == len(stager.buckets)


def test_a_snapshot_is_complete_when_it_returns_and_the_next_update_cannot_race_it(eager):
    live, copier, stager = _bucketed(eager=eager)
    host = stager.host_buffers(live)
    for t in live:
        t.add_(1)
    before = [t.clone() for t in live]
    copier.log.clear()
    timing = stager.to_host(live, host)
    assert copier.done == len(copier.queue)  # nothing left in flight: the stall covered every copy
    for t in live:  # the next training step
        t.add_(1)
    copier.flush()
    assert all(torch.equal(h, b) for h, b in zip(host, before))
    kinds = [x[0] for x in copier.log]
    assert kinds[0] == "begin"  # after what the loop did before
    fences = [x for x in copier.log if x[0] == "fence"]
    assert fences == [("fence", len(copier.queue))]  # the loop waits for the last copy
    assert timing.buckets == len(stager.buckets) and timing.device_s > 0


def test_slots_are_emptied_before_they_are_refilled():
    """Every wait for bucket k comes before the copy of bucket k + SLOTS into the same slot."""
    live, copier, stager = _bucketed()
    host = stager.host_buffers(live)
    copier.log.clear()
    stager.to_host(live, host)
    log = copier.log
    records = [i for i, x in enumerate(log) if x[0] == "record"]
    assert len(records) == len(stager.buckets) >= 4
    for k in range(len(records) - 2):
        waited = log.index(("wait", log[records[k]][1]))
        refill = log.index(("copy",), records[k + 1])  # the first copy of bucket k + 2, into bucket k's slot
        assert waited < refill


def test_restore_goes_host_to_device_in_buckets(eager):
    live, copier, stager = _bucketed(eager=eager)
    host = stager.host_buffers(live)
    saved = [h.clone() for h in host]
    for t in live:
        t.zero_()
    timing = stager.to_device(host, live)
    assert copier.done == len(copier.queue)
    assert all(torch.equal(t, s) for t, s in zip(live, saved))
    assert timing.bytes == sum(SIZES) and timing.device_s > 0


def test_direct_restore_with_a_device():
    live, copier = tensors(SIZES), LazyCopier()
    stager = Stager([t.numel() for t in live], copier)
    host = stager.host_buffers(live)
    for t in live:
        t.zero_()
    stager.to_device(host, live)
    assert all(torch.equal(t, h) for t, h in zip(live, host))


def test_byte_view_of_any_dtype():
    t = torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)
    assert byte_view(t).numel() == 12 and byte_view(t).dtype == torch.uint8


class _FakeCuda:
    """torch.cuda's stream and event calls as a log: enough to run CudaCopier on the CPU."""

    def __init__(self):
        self.log = []

    def install(self, monkeypatch):
        import contextlib
        fake = self

        class Stream:
            def __init__(self, device=None, name="side"):
                self.name = name

            def wait_stream(self, other):
                fake.log.append(("wait_stream", self.name, other.name))

            def wait_event(self, event):
                fake.log.append(("wait_event", self.name, event.id))

        class Event:
            count = 0

            def record(self, stream):
                Event.count += 1
                self.id = Event.count
                fake.log.append(("record", stream.name, self.id))

            def synchronize(self):
                fake.log.append(("synchronize", self.id))

        @contextlib.contextmanager
        def stream(s):
            fake.log.append(("on", s.name))
            yield

        monkeypatch.setattr(torch.cuda, "Stream", Stream)
        monkeypatch.setattr(torch.cuda, "Event", Event)
        monkeypatch.setattr(torch.cuda, "stream", stream)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream(name="train"))


def test_cuda_copier_orders_side_stream_copies_between_the_training_stream(monkeypatch):
    from emulator.workload.staging import CudaCopier
    fake = _FakeCuda()
    fake.install(monkeypatch)

    class Copier(CudaCopier):
        def host_tensors(self, specs, pinned):  # pinned memory needs a GPU build
            return CpuCopier().host_tensors(specs, False)

        def copy(self, dst, src):
            super().copy(dst, src)
            fake.log.append(("copied",))

    live = tensors(SIZES)
    stager = Stager([t.numel() for t in live], Copier("cpu"))
    host = stager.host_buffers(live)
    assert all(torch.equal(h, t) for h, t in zip(host, live))
    fake.log.clear()
    stager.to_host(live, host)
    copies = sum(1 for n in SIZES if n)
    assert fake.log == [("wait_stream", "side", "train")] + [("on", "side"), ("copied",)] * copies + [
        ("record", "side", 2), ("wait_event", "train", 2), ("synchronize", 2)]


def test_pinned_views_are_packed_from_a_page_inside_their_own_buffer():
    from emulator.workload.staging import PAGE, _packed
    specs = [((3, 5), torch.float32), ((0,), torch.float32), ((7,), torch.float32), ((1024,), torch.float32)]
    flat, start, size, views = _packed(specs)
    assert [tuple(v.shape) for v in views] == [s for s, _ in specs] and all(v.dtype == torch.float32 for v in views)
    base = flat.data_ptr() + start
    assert base % PAGE == 0 and size % PAGE == 0 and start + size <= flat.numel()  # locked pages: ours alone
    assert views[0].data_ptr() == base and views[3].data_ptr() == base + (64 + 64) * 1  # 64-byte steps
    for i, v in enumerate(views):
        v.fill_(i + 1)
    for i, v in enumerate(views):  # no view overlaps another
        assert bool((v == i + 1).all())
    assert len({v.untyped_storage().data_ptr() for v in views}) == 1  # one storage for torch.save


def test_a_checkpoint_from_packed_staging_buffers_restores_bit_for_bit(tmp_path, monkeypatch):
    """On a GPU the pinned staging copy is one buffer per dtype (views into it): torch.save then
    writes shared storages, and the restore must find every tensor's bytes at its offset."""
    import emulator.workload.state as state_mod
    from emulator.checkpoint.checkpointer import Checkpointer
    from emulator.checkpoint.restore import Restorer
    from emulator.config import load_config
    from rundesign import rank_state
    from emulator.rank.comm import SoloComm
    from emulator.workload.staging import packed_by_dtype
    from tiers.directory import DirTier

    class PackedCopier(CpuCopier):
        def host_tensors(self, specs, pinned):
            return packed_by_dtype(specs)[1]

    monkeypatch.setattr(state_mod, "copier_for", lambda device: PackedCopier())
    cfg = load_config("llama3-8b", ["run.scale=0.0002", "parallelism.ranks=1"])
    state = rank_state(cfg, 0)
    assert len({t.untyped_storage().data_ptr() for t in state.tensors("staging")}) == 2  # bf16 and fp32
    local, glob = DirTier(tmp_path / "l"), DirTier(tmp_path / "g")
    ckpt = Checkpointer(state, local, glob, SoloComm(), keep=2)
    state.mutate(1)
    assert ckpt.checkpoint(1, "sync").global_complete
    saved = [t.clone() for t in state.tensors("live")]
    state.mutate(2)
    load = Restorer(state, [("local", local)], SoloComm(), loop=ckpt.loop).load()
    ckpt.close()
    assert load.ok and load.step == 1 and not load.fallbacks
    assert all(torch.equal(a.view(-1).view(torch.uint8), b.view(-1).view(torch.uint8))
               for a, b in zip(state.tensors("live"), saved))


def test_a_rank_with_nothing_to_copy_snapshots_nothing():
    """A rank that holds no state (a ZeRO-0 replica's reader: its state comes by broadcast) copies an
    empty list; it crashed with AttributeError: 'CpuCopier' object has no attribute '_plan'."""
    from emulator.workload.staging import CpuCopier
    copier = CpuCopier()
    copier.copy_all([], [])
    src, dst = torch.arange(4, dtype=torch.float32), torch.zeros(4)
    copier.copy_all([dst], [src])
    assert torch.equal(dst, src)
