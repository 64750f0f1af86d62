"""A live progress line for terminals: steps, last stall, misses, time to next checkpoint.

Reads the status file rank 0 rewrites at every checkpoint; silent unless
stdout is a terminal and --quiet is not given.
"""
from __future__ import annotations

import json
import time
from pathlib import Path


class Progress:
    def __init__(self, total_seconds: float | None = None):
        from rich.console import Console
        from rich.live import Live
        self.console = Console(stderr=True)
        self.live = Live(console=self.console, refresh_per_second=4, transient=True)
        self.live.start()
        self.started = time.time()
        self.total = total_seconds

    def update(self, status_path: Path) -> None:
        try:
            st = json.loads(status_path.read_text())
        except (OSError, ValueError):
            self.live.update(f"starting ranks... {time.time() - self.started:.0f}s")
            return
        next_in = max(0.0, st["time"] + st["interval_s"] - time.time())
        total = f" / {self.total:.0f}s" if self.total else ""
        self.live.update(
            f"[bold]{st['mode']}[/] step {st['step']}  checkpoints {st['checkpoints']}  "
            f"last stall {st['last_stall_s'] * 1000:.0f} ms  misses {st['misses']}  "
            f"next checkpoint in {next_in:.1f}s  elapsed {time.time() - self.started:.0f}s{total}")

    def close(self) -> None:
        self.live.stop()
