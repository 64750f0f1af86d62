"""A directory tier that recycles its pages (the memory tier's default, issue 24).

Deleting a file moves it into a bounded pool inside the tier; the next write
takes a pooled file, overwrites it in place and publishes it by the same atomic
rename. The pool is never visible as objects, a crash leaves only a partial
that recovery sweeps, and the pool never holds more than its bound.
"""
import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from dataclasses import replace

import crc32c
import pytest

from emulator.checkpoint.integrity import ChecksumSink, crc_of_stream, format_crc
from tiers.base import TierScope
from tiers.directory import POOL_DIR, DirOptions, DirTier
from tiers.testing import TierContract


def write(tier, key, data):
    with ChecksumSink(tier.open_write(key)) as sink:
        sink.write(data[: len(data) // 2])
        sink.write(data[len(data) // 2:])
    return sink


def pool(tier):
    folder = tier.root / POOL_DIR
    return sorted(folder.iterdir()) if folder.is_dir() else []


class TestRecyclingDirTier(TierContract):
    """Recycling changes where pages come from, not what a tier promises."""

    @pytest.fixture
    def tier(self, tmp_path):
        return DirTier(tmp_path / "tier", recycle=True, pool_files=2)


@pytest.fixture
def tier(tmp_path):
    return DirTier(tmp_path / "mem", recycle=True, pool_files=2)


def test_next_write_after_a_delete_reuses_the_inode(tier):
    old = os.urandom(3 << 20)
    write(tier, "step_1/rank0.pt", old)
    ino = tier.local_path("step_1/rank0.pt").stat().st_ino
    asyncio.run(tier.delete("step_1/rank0.pt"))
    assert asyncio.run(tier.list()) == [] and len(pool(tier)) == 1
    new = os.urandom((2 << 20) + 123)  # smaller: the old tail must not survive
    sink = write(tier, "step_2/rank0.pt", new)
    path = tier.local_path("step_2/rank0.pt")
    assert path.stat().st_ino == ino
    assert path.read_bytes() == new
    assert sink.hexdigest == format_crc(crc32c.crc32c(new))
    with open(path, "rb") as fh:
        assert crc_of_stream(fh) == (sink.hexdigest, len(new))
    assert pool(tier) == []


def test_a_larger_write_grows_the_recycled_file(tier):
    write(tier, "a", b"x" * 1000)
    asyncio.run(tier.delete("a"))
    data = os.urandom(5000)
    write(tier, "b", data)
    assert tier.local_path("b").read_bytes() == data


def test_pool_keeps_only_the_largest_files_up_to_its_bound(tier):
    for i, size in enumerate((300, 100, 200)):
        asyncio.run(tier.put(f"step_{i}/f", os.urandom(size)))
    for i in range(3):
        asyncio.run(tier.delete(f"step_{i}/f"))
    assert sorted(p.stat().st_size for p in pool(tier)) == [200, 300]
    assert asyncio.run(tier.list()) == [] and asyncio.run(tier.list("step_")) == []
    assert [p.name for p in tier.root.iterdir()] == [POOL_DIR]  # step folders gone


def test_an_error_in_the_sink_leaves_nothing_visible_and_the_pool_bounded(tier):
    write(tier, "a", os.urandom(4096))
    asyncio.run(tier.delete("a"))
    with pytest.raises(RuntimeError):
        with ChecksumSink(tier.open_write("b")) as sink:
            sink.write(os.urandom(1000))
            raise RuntimeError("torch.save failed")
    assert asyncio.run(tier.list()) == []
    assert len(pool(tier)) <= 2
    assert not [f for _, _, files in os.walk(tier.root) for f in files if f.endswith(".partial")]


def test_a_killed_writer_leaves_a_partial_recovery_sweeps(tier):
    write(tier, "step_1/rank0.pt", os.urandom(1 << 20))
    asyncio.run(tier.delete("step_1/rank0.pt"))
    script = textwrap.dedent(f"""
        import os, signal
        from tiers.directory import DirTier
        sink = DirTier({str(tier.root)!r}, recycle=True, pool_files=2).open_write("step_2/rank0.pt")
        sink.write(b"y" * 1000)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=os.getcwd())
    assert proc.returncode == -signal.SIGKILL
    assert asyncio.run(tier.list()) == []  # the half-written file is no object
    assert pool(tier) == []  # the writer had taken it
    note = asyncio.run(tier.recover_after_crash())
    assert "1 partial" in note
    assert [p for p in tier.root.rglob("*") if p.is_file()] == []


def test_clean_up_after_run_empties_the_pool(tier):
    asyncio.run(tier.put("a", b"abc"))
    asyncio.run(tier.delete("a"))
    assert len(pool(tier)) == 1
    asyncio.run(tier.clean_up_after_run())
    assert pool(tier) == []


def test_without_recycle_a_delete_unlinks(tmp_path):
    plain = DirTier(tmp_path / "plain")
    asyncio.run(plain.put("a", b"abc"))
    asyncio.run(plain.delete("a"))
    assert pool(plain) == [] and not any(plain.root.iterdir())


def test_the_option_and_its_pool_bound_come_from_options_and_scope(tmp_path):
    opts = DirOptions(path=str(tmp_path / "m"), recycle=True)
    tier = DirTier.from_options(opts, scope=TierScope(ranks_per_node=4))
    assert tier.recycle and tier.pool_files == 4
    assert not DirTier.from_options(replace(opts, recycle=None), scope=TierScope()).recycle


def test_the_memory_tier_recycles_unless_told_not_to(tmp_path):
    from emulator.config import load_config
    from emulator.job.rank_tiers import memory_tier_config
    cfg = load_config(None, [f"tiers.memory.path={tmp_path}/shm"])
    assert memory_tier_config(cfg).options.recycle is True
    cfg = load_config(None, [f"tiers.memory.path={tmp_path}/shm", "tiers.memory.recycle=false"])
    assert memory_tier_config(cfg).options.recycle is False


def test_the_peer_store_recycles_when_the_memory_tier_does(tmp_path):
    """The copies a node holds for its peers are host memory too, rewritten every peer checkpoint."""
    from emulator.checkpoint.replicas import store_config
    from emulator.config import load_config
    from emulator.job.rank_tiers import memory_tier_config
    cfg = load_config(None, [f"tiers.memory.path={tmp_path}/shm"])
    store = store_config(memory_tier_config(cfg))
    assert store.options.recycle is True and store.options.path == f"{tmp_path}/shm-peers"
    cfg = load_config(None, [f"tiers.memory.path={tmp_path}/shm", "tiers.memory.recycle=false"])
    assert store_config(memory_tier_config(cfg)).options.recycle is False


# ----------------------------------------------------------------- the kept mapping (memcpy, not write())

def cycle(tier, key, data, *, delete=True):
    """Write ``data`` under ``key`` through the pipeline's sink stack; then (by default) delete it
    into the pool, as retention does. Returns the inner sink."""
    inner = tier.open_write(key)
    with ChecksumSink(inner) as sink:
        sink.write(data)
    assert tier.local_path(key).read_bytes() == data
    assert sink.hexdigest == format_crc(crc32c.crc32c(data))
    if delete:
        asyncio.run(tier.delete(key))
    return inner


def test_a_reused_file_is_written_through_a_kept_mapping(tier):
    torch = pytest.importorskip("torch")
    state = {"w": torch.arange(300_000, dtype=torch.float32), "b": torch.ones(7, dtype=torch.int64)}
    first = tier.open_write("step_1/rank0.pt")
    with ChecksumSink(first) as sink:
        torch.save(state, sink)
    assert first.bytes_mapped == 0  # a new file: nothing to map yet
    asyncio.run(tier.delete("step_1/rank0.pt"))
    for step in (2, 3):  # the same inode twice: mapped once, copied into twice
        state["w"] += 1
        inner = tier.open_write(f"step_{step}/rank0.pt")
        with ChecksumSink(inner) as sink:
            torch.save(state, sink)
        path = tier.local_path(f"step_{step}/rank0.pt")
        assert inner.bytes_mapped == sink.bytes_written == path.stat().st_size
        assert torch.equal(torch.load(path)["w"], state["w"])
        assert sink.hexdigest == format_crc(crc32c.crc32c(path.read_bytes()))
        asyncio.run(tier.delete(f"step_{step}/rank0.pt"))
    assert len(tier.maps) == 1


def test_a_smaller_write_through_the_mapping_is_cut_on_commit(tier):
    cycle(tier, "a", os.urandom(3 << 20))
    new = os.urandom((1 << 20) + 5)
    inner = cycle(tier, "b", new, delete=False)
    assert inner.bytes_mapped == len(new)
    assert tier.local_path("b").stat().st_size == len(new)


def test_a_larger_write_maps_what_the_file_had_and_writes_the_rest(tier):
    cycle(tier, "a", os.urandom(1 << 20))
    inner = cycle(tier, "b", os.urandom((3 << 20) + 17))
    assert inner.bytes_mapped == 1 << 20
    inner = cycle(tier, "c", os.urandom((3 << 20) + 17))  # the grown file: mapped again, whole
    assert inner.bytes_mapped == (3 << 20) + 17


def test_an_aborted_mapped_write_leaves_nothing_and_lets_the_mapping_go(tier):
    cycle(tier, "a", os.urandom(1 << 20))
    cycle(tier, "b", os.urandom(1 << 20))  # mapped now
    assert len(tier.maps) == 1
    with pytest.raises(RuntimeError):
        with ChecksumSink(tier.open_write("c")) as sink:
            sink.write(os.urandom(1000))
            raise RuntimeError("torch.save failed")
    assert asyncio.run(tier.list()) == []
    assert [p for p in tier.root.rglob("*") if p.is_file()] == []  # no partial, nothing pooled
    assert len(tier.maps) == 0  # the unlinked file's pages are not held by a mapping


def test_a_mapped_write_dropped_without_commit_leaves_a_partial_recovery_sweeps(tier):
    cycle(tier, "a", os.urandom(1 << 20))
    cycle(tier, "b", os.urandom(1 << 20))
    sink = tier.open_write("step_3/rank0.pt")
    sink.write(b"z" * 4096)
    del sink  # a crash: no commit, no abort
    assert asyncio.run(tier.list()) == []
    assert "1 partial" in asyncio.run(tier.recover_after_crash())
    assert [p for p in tier.root.rglob("*") if p.is_file()] == []
    cycle(tier, "c", os.urandom(1 << 20))  # the next write lets go of the swept file's mapping
    assert len(tier.maps) == 0


def test_two_writers_recycling_one_tier_each_see_their_own_bytes(tmp_path):
    """Two ranks (own tier objects, own mappings) take each other's files from one pool."""
    root = tmp_path / "mem"
    ranks = [DirTier(root, recycle=True, pool_files=1) for _ in range(2)]
    held, mapped = {}, 0
    for step in range(8):
        key = f"step_{step}/rank{step % 2}.pt"
        held[key] = os.urandom((1 << 20) + (step % 3) * 1000)
        mapped += cycle(ranks[step % 2], key, held[key], delete=False).bytes_mapped
        if step >= 2:  # retention deletes an older file: the other rank takes it next
            old = f"step_{step - 2}/rank{step % 2}.pt"
            asyncio.run(ranks[0].delete(old))
            del held[old]
        assert {k: ranks[0].local_path(k).read_bytes() for k in held} == held
    assert mapped > 0  # pooled files did go through mappings
    live = len(held) + len(pool(ranks[0]))
    assert all(len(r.maps) <= live for r in ranks)  # no mapping of a file that has gone


def test_a_writer_in_another_process_does_not_disturb_a_kept_mapping(tier):
    cycle(tier, "a", os.urandom(1 << 20))
    cycle(tier, "b", os.urandom(1 << 20))  # this process keeps the pooled file mapped
    other = os.urandom((1 << 20) + 3)
    (tier.root.parent / "other.bin").write_bytes(other)
    script = textwrap.dedent(f"""
        from pathlib import Path
        from tiers.directory import DirTier
        tier = DirTier({str(tier.root)!r}, recycle=True, pool_files=2)
        with tier.open_write("theirs") as sink:
            sink.write(Path({str(tier.root.parent / "other.bin")!r}).read_bytes())
        assert sink.bytes_mapped == 1 << 20
    """)
    subprocess.run([sys.executable, "-c", script], cwd=os.getcwd(), check=True)
    assert tier.local_path("theirs").read_bytes() == other
    ours = os.urandom(1 << 19)
    inner = cycle(tier, "c", ours, delete=False)  # the pool is empty: a new file
    assert inner.bytes_mapped == 0
    assert tier.local_path("theirs").read_bytes() == other



def test_the_checksum_follows_each_chunk_while_it_is_in_cache():
    """A large write reaches the inner sink in CRC_CHUNK pieces, each checksummed right after
    it is copied (still in the CPU's cache), and the CRC is the whole write's."""
    from emulator.checkpoint.integrity import CRC_CHUNK
    from tiers.base import Sink

    class Recorder(Sink):
        def __init__(self):
            self.sizes, self.data = [], bytearray()

        def write(self, data):
            self.sizes.append(len(data))
            self.data += data
            return len(data)

        def commit(self):
            pass

        def abort(self):
            pass

    data = os.urandom(CRC_CHUNK * 5 // 2 + 3)
    inner = Recorder()
    sink = ChecksumSink(inner)
    sink.write(b"head")
    sink.write(memoryview(data).cast("B"))
    assert inner.sizes == [4, CRC_CHUNK, CRC_CHUNK, CRC_CHUNK // 2 + 3]
    assert bytes(inner.data) == b"head" + data and sink.bytes_written == len(data) + 4
    assert sink.hexdigest == format_crc(crc32c.crc32c(b"head" + data))


def test_each_rank_takes_back_the_file_it_keeps_mapped(tmp_path):
    """Ranks of a node share one pool: a rank that took another's file would map it anew (page
    tables filled again); it takes the one it already has mapped when that one is there."""
    root = tmp_path / "mem"
    ranks = [DirTier(root, recycle=True, pool_files=2) for _ in range(2)]
    inodes = {}
    for step in range(8):
        for r, tier in enumerate(ranks):
            cycle(tier, f"step_{step}/rank{r}.pt", os.urandom(1 << 20), delete=False)
        for r, tier in enumerate(ranks):
            ino = tier.local_path(f"step_{step}/rank{r}.pt").stat().st_ino
            if step >= 2:  # the first reuse may take either file; from then on its own
                assert ino == inodes[r], (step, r)
            inodes[r] = ino
        for r in (1, 0) if step % 2 else (0, 1):  # retention: the node's old files into the pool
            asyncio.run(ranks[0].delete(f"step_{step}/rank{r}.pt"))


def test_a_mapping_in_use_is_not_let_go_by_another_write(tier):
    """Writes in other threads (a peer's copy arriving during a save) keep mappings too; the
    limit on kept mappings must never close one a sink is still copying into."""
    tier.maps.limit = 1
    for key in ("a", "b"):
        cycle(tier, key, os.urandom(1 << 20), delete=False)
    for key in ("a", "b"):
        asyncio.run(tier.delete(key))
    first = os.urandom(1 << 20)
    with ChecksumSink(tier.open_write("c")) as sink:
        sink.write(first[: 1 << 19])
        cycle(tier, "d", os.urandom(1 << 20), delete=False)  # maps the other pooled file, keeps it
        sink.write(first[1 << 19:])
    assert tier.local_path("c").read_bytes() == first


def test_a_file_that_cannot_be_mapped_is_written_as_before(tier, monkeypatch):
    import tiers.mapped

    def refuse(*args, **kwargs):
        raise OSError(12, "Cannot allocate memory")

    cycle(tier, "a", os.urandom(1 << 20))
    monkeypatch.setattr(tiers.mapped.mmap, "mmap", refuse)
    data = os.urandom(1 << 20)
    assert cycle(tier, "b", data, delete=False).bytes_mapped == 0  # cycle checks the bytes and CRC
    assert len(tier.maps) == 0


def test_the_mapped_part_is_checksummed_in_its_copy_and_the_rest_as_written(tier, monkeypatch):
    """A ChecksumSink hands a mapped sink its bytes whole (copy and CRC32C in one pass, fused where
    built); bytes past the mapping go through write() in CRC_CHUNK pieces. One CRC over both."""
    from tiers import directory
    passes = []
    real = directory.copy_crc32c
    monkeypatch.setattr(directory, "copy_crc32c", lambda *a: passes.append(len(a[2])) or real(*a))
    cycle(tier, "a", os.urandom(1 << 20))
    data = os.urandom((3 << 20) + 17)
    inner = cycle(tier, "b", data, delete=False)  # 1 MiB mapped, the rest written
    assert passes == [1 << 20] and inner.bytes_mapped == 1 << 20
    assert tier.local_path("b").read_bytes() == data
    asyncio.run(tier.delete("b"))
    with ChecksumSink(tier.open_write("c")) as sink:  # a write says it took all it was given
        assert sink.write(data) == len(data) and sink.bytes_written == len(data)


@pytest.fixture
def shm_tier():
    """A recycling tier in host memory, as the memory tier is (on a disk's file system a mapped page
    written back is write-protected again, so every rewrite faults it)."""
    import shutil
    import uuid
    from pathlib import Path
    root = Path("/dev/shm") / f"ckpt-emu-test-{uuid.uuid4().hex[:8]}"
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm here")
    yield DirTier(root / "mem", recycle=True, pool_files=2)
    shutil.rmtree(root, ignore_errors=True)


def test_a_warm_save_copies_each_byte_once_into_pages_already_mapped(shm_tier, monkeypatch):
    """The memory tier's save at its floor (issue 58): from the second reuse of a pooled file on,
    every byte is copied once, with its CRC32C in the same pass (no checksum of its own, no
    write()), into pages the process already has mapped: no page is faulted in or allocated."""
    import resource

    from emulator.checkpoint import integrity
    from tiers import directory
    tier = shm_tier
    data = os.urandom(8 << 20)
    cycle(tier, "a", data)  # allocates the file's pages
    cycle(tier, "b", data)  # maps them (page tables filled once)
    copied, checksummed = [], []
    real_copy, real_crc = directory.copy_crc32c, integrity.crc32c.crc32c
    monkeypatch.setattr(directory, "copy_crc32c", lambda *a: copied.append(len(a[2])) or real_copy(*a))
    monkeypatch.setattr(integrity.crc32c, "crc32c", lambda b, c=0: checksummed.append(len(b)) or real_crc(b, c))
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    inner = tier.open_write("c")
    with ChecksumSink(inner) as sink:
        sink.write(data)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    assert sum(copied) == inner.bytes_mapped == len(data) and checksummed == []
    assert faults < len(data) // os.sysconf("SC_PAGE_SIZE") // 64, faults  # 2048 pages: a few faults at most
    monkeypatch.undo()
    assert tier.local_path("c").read_bytes() == data and sink.hexdigest == format_crc(crc32c.crc32c(data))
