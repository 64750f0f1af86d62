"""A background thread running one asyncio event loop: where a rank's checkpoint pipeline runs,
so the training loop (the main thread) only waits for what its mode says it must."""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading


class LoopThread:
    def __init__(self, name: str = "ckpt-pipeline"):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def submit(self, coro) -> concurrent.futures.Future:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro):
        return self.submit(coro).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
