"""Property tests (hypothesis) for the three things every guarantee rests on.

* The manifest: it round-trips, and a torn (truncated) or garbled one never
  reads as complete: it reads as nothing, or as exactly the original.
* Keys: whatever string is offered, either it is refused or it names a path
  inside the tier's root; a manifest can never point a reader outside it.
* Retention: whatever mix of complete, incomplete, half-deleted and garbled
  checkpoints a tier holds, it keeps the newest ``keep`` complete ones intact
  and never leaves a checkpoint that looks complete with files missing, even
  when it crashes part way (the next run's retention then finishes the job).
"""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from emulator.checkpoint import layout
from emulator.checkpoint.layout import (FileEntry, Manifest, manifest_key, rank_file_key, read_manifest,
                                        step_dir)
from tiers.base import InvalidKey, validate_key
from tiers.directory import DirTier
from tiers.memory import MemoryTier

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

def run(coro):
    """Drive a coroutine that never suspends (MemoryTier's are plain): ~100x cheaper than asyncio.run."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    raise RuntimeError("the coroutine suspended; use asyncio.run")


json_scalars = st.none() | st.booleans() | st.integers(-2**53, 2**53) | \
    st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12)
meta_values = st.recursive(json_scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(
    st.text(max_size=6), c, max_size=3), max_leaves=8)


@st.composite
def manifests(draw):
    step = draw(st.integers(0, 10**8 - 1))
    ranks = draw(st.lists(st.integers(0, 4095), min_size=1, max_size=8, unique=True))
    files = [FileEntry(rank_file_key(step, r, draw(st.integers(0, 64)), draw(st.integers(0, 99))), r,
                       draw(st.integers(0, 2**40)), f"{draw(st.integers(0, 2**32 - 1)):08x}") for r in ranks]
    return Manifest(step=step, files=files, tier=draw(st.sampled_from(["local", "global"])),
                    mode=draw(st.sampled_from(["sync", "async", "resume"])), world=draw(st.integers(1, 4096)),
                    created=draw(st.floats(0, 4e9)), meta=draw(st.dictionaries(st.text(max_size=8), meta_values,
                                                                             max_size=4)))


def _read(raw: bytes, step: int):
    tier = MemoryTier()
    run(tier.put(manifest_key(step), raw))
    return run(read_manifest(tier, step))


@SETTINGS
@given(manifests())
def test_manifest_round_trips(m):
    assert Manifest.from_json(m.to_json()) == m
    assert _read(m.to_json(), m.step) == m


@SETTINGS
@given(manifests(), st.data())
def test_torn_manifest_is_never_complete(m, data):
    raw = m.to_json()
    cut = data.draw(st.integers(0, len(raw) - 1))
    assert _read(raw[:cut], m.step) is None


@SETTINGS
@given(manifests(), st.data())
def test_garbled_manifest_is_never_complete_unless_unchanged(m, data):
    raw = bytearray(m.to_json())
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    got = _read(bytes(raw), m.step)
    assert got is None or got == m  # e.g. a space that became a newline changes nothing


@SETTINGS
@given(manifests(), st.integers(0, 10**8 - 1))
def test_manifest_of_another_step_is_not_this_steps(m, other):
    assume(other != m.step)
    assert _read(m.to_json(), other) is None


# --------------------------------------------------------------------------- keys

segments = st.sampled_from(["step_00000001", "a", ".", "..", "", "...", "..a", "a..", " ", "x\\y", "n\x00l",
                            "é", "~", "$HOME", "*"])
keys = st.lists(segments, min_size=0, max_size=5).map("/".join) | st.text(max_size=20)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("root")


@SETTINGS
@given(keys)
def test_no_key_escapes_the_root(root, key):
    tier = DirTier(root)
    try:
        validate_key(key)
    except InvalidKey:
        with pytest.raises(InvalidKey):
            tier.local_path(key)
        with pytest.raises(InvalidKey):
            run(MemoryTier().put(key, b"x"))
        return
    path = tier.local_path(key)
    real_root = os.path.realpath(root)
    assert os.path.realpath(path).startswith(real_root + os.sep)
    assert ".." not in key.split("/") and not key.startswith("/")


@SETTINGS
@given(manifests(), keys)
def test_manifest_cannot_point_outside_the_tier(m, key):
    m.files[0].key = key
    try:
        validate_key(key)
        valid = True
    except InvalidKey:
        valid = False
    assert (_read(m.to_json(), m.step) is not None) == valid


@SETTINGS
@given(st.integers(0, 10**8 - 1), st.integers(0, 10**6), st.integers(0, 10**4), st.integers(0, 99))
def test_generated_keys_are_valid(step, rank, dp, mp):
    assert validate_key(rank_file_key(step, rank, dp, mp)) and validate_key(manifest_key(step))
    assert rank_file_key(step, rank, dp, mp).startswith(step_dir(step) + "/")


# --------------------------------------------------------------------------- retention

KINDS = ["complete", "incomplete", "half_deleted", "garbled", "complete"]  # complete twice: more common


class CrashingTier(MemoryTier):
    """A MemoryTier whose process dies (an exception) after ``budget`` deletes."""

    def __init__(self, objects: dict, budget: int | None):
        super().__init__()
        self._objects = dict(objects)
        self.budget = budget

    async def delete(self, key):
        if self.budget is not None:
            if self.budget == 0:
                raise RuntimeError("crash")
            self.budget -= 1
        await super().delete(key)


def _populate(plan: dict) -> dict:
    """Objects of a tier holding, per step, a checkpoint of the given kind."""
    tier = MemoryTier()
    for step, (kind, nfiles) in plan.items():
        files = [FileEntry(f"{step_dir(step)}/rank{r}.pt", r, 3, "0badc0de") for r in range(nfiles)]
        for i, f in enumerate(files):
            if kind == "half_deleted" and i == 0:
                continue
            run(tier.put(f.key, b"abc"))
        raw = Manifest(step=step, files=files).to_json()
        if kind == "complete":
            run(tier.put(manifest_key(step), raw))
        elif kind == "garbled":
            run(tier.put(manifest_key(step), raw[: len(raw) // 2]))
    return tier._objects


def _looks_complete_but_is_not(tier: MemoryTier) -> list[int]:
    bad = []
    for step in run(layout.list_steps(tier))[1]:
        m = run(read_manifest(tier, step))
        if m is not None and any(f.key not in tier._objects for f in m.files):
            bad.append(step)
    return bad


plans = st.dictionaries(st.integers(1, 40), st.tuples(st.sampled_from(KINDS), st.integers(1, 3)), max_size=10)


@SETTINGS
@given(plans, st.integers(1, 4), st.none() | st.integers(0, 12))
def test_retention_keeps_newest_complete_and_never_leaves_a_false_complete(plan, keep, crash_after):
    objects = _populate(plan)
    seen = set(run(layout.list_steps(CrashingTier(objects, None)))[1])
    complete = sorted(s for s, (k, _) in plan.items() if k == "complete")
    newest_kept = complete[-keep:]
    tier = CrashingTier(objects, crash_after)
    try:
        run(layout.apply_retention(tier, keep))
    except RuntimeError:
        assert crash_after is not None
    assert _looks_complete_but_is_not(tier) == []  # at every instant, crash or not
    for step in newest_kept:  # the newest `keep` complete checkpoints are untouched
        assert run(read_manifest(tier, step)) is not None
        assert all(k in tier._objects for k in objects if k.startswith(step_dir(step) + "/"))
    # the next run's retention (no crash) finishes the job: only the kept ones and newer
    # incomplete ones (possibly in flight) remain
    tier.budget = None
    run(layout.apply_retention(tier, keep))
    left = set(run(layout.list_steps(tier))[1])
    expect = set(newest_kept) | {s for s in seen if s > complete[-1]} if complete else seen
    assert left == expect, (plan, keep)
    assert _looks_complete_but_is_not(tier) == []
