"""Virtual time for pacing tests: each thread keeps its own time and sleeps instantly, so a test
checks the waits that pacing computes without waiting for them (and without the machine's load).
"""
import threading




class FakeClock:
    """Virtual time per thread: threads sleep in parallel, as real ones do.

    ``latest`` is the furthest any thread got, i.e. the elapsed time of the whole run.
    """

    def __init__(self):
        self._local = threading.local()
        self._lock = threading.Lock()
        self.latest = 0.0

    def __call__(self) -> float:
        return getattr(self._local, "t", 0.0)

    def sleep(self, delay: float) -> None:
        assert delay >= 0
        self.advance(delay)

    def advance(self, delay: float) -> None:
        self._local.t = self() + delay
        with self._lock:
            self.latest = max(self.latest, self._local.t)
