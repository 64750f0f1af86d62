"""Running a tier's coroutine to completion from sync code, its result however large.

CPython 3.11's ``asyncio.run`` in the main thread formats its task's repr, the whole result
included, when it puts the SIGINT handler back (``Runner.run`` passes the handler, which holds
the task, through ``signal``'s enum conversion): seconds of CPU per GiB of a bytes result. Here
the task returns nothing and the result comes back beside it.
"""
from __future__ import annotations

import asyncio
import concurrent.futures as cf


def _run_keeping_result(coro):
    result = []

    async def main():
        result.append(await coro)

    asyncio.run(main())
    return result[0]


def run_sync(coro):
    """Run a coroutine to completion from sync code, whether or not this thread runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run_keeping_result(coro)
    with cf.ThreadPoolExecutor(1) as ex:  # a loop thread: use a private loop elsewhere
        return ex.submit(_run_keeping_result, coro).result()
