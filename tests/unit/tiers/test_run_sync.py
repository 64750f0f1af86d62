"""Running a tier's coroutine from sync code with a large bytes result (the backend contract's
``run``, the capacity scan's runner)."""
from __future__ import annotations

import asyncio
import signal
import time

import pytest


def _cpu_s(runner, nbytes: int) -> float:
    async def read():
        return bytes(nbytes)

    start = time.process_time()
    assert len(runner(read())) == nbytes
    return time.process_time() - start


def _contract_run(coro):
    from tiers.testing import run
    return run(coro)


def _run_sync(coro):
    from tiers.runsync import run_sync
    return run_sync(coro)


@pytest.fixture
def default_sigint():
    """Python's own SIGINT handler, as a command's main thread has it: ``asyncio.run`` installs its
    own (and later formats the task) only over that one, and a test run beside others in one worker
    may find another (the baseline then costs nothing, and the comparison says nothing)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


@pytest.mark.parametrize("runner", [_contract_run, _run_sync])
def test_a_large_result_costs_no_cpu_per_byte(runner, default_sigint):
    """``asyncio.run`` in the main thread (CPython 3.11) formats its task's repr, the whole
    result included, when it puts the SIGINT handler back: seconds of CPU per GiB."""
    nbytes = 32 << 20
    old = _cpu_s(asyncio.run, nbytes)
    new = min(_cpu_s(runner, nbytes) for _ in range(3))
    assert new < old / 20, (old, new)


def test_errors_and_results_come_through():
    from tiers.runsync import run_sync

    async def fail():
        raise FileNotFoundError("k")

    async def value():
        return 7

    assert run_sync(value()) == 7
    with pytest.raises(FileNotFoundError):
        run_sync(fail())


def test_runs_from_inside_a_running_loop():
    from tiers.runsync import run_sync

    async def inner():
        return b"x" * 10

    async def outer():
        return run_sync(inner())

    assert asyncio.run(outer()) == b"x" * 10
