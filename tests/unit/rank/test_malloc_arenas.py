"""A rank's threads share two malloc arenas: sixteen threads that each allocate and free a 4 MiB
buffer in turn (a soak's drains and read-backs) leave the process at most two buffers larger. Each
thread kept its buffer in an arena of its own before (64 MiB here)."""
from __future__ import annotations

import subprocess
import sys

THREADS_IN_TURN = """
import threading
from emulator.rank.malloc import cap_arenas

def rss():
    return next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmRSS:"))

assert cap_arenas()
PIECE = 4 << 20
del bytearray(PIECE)[:]  # glibc's mmap threshold rises past a freed block: later ones come from arenas
before = rss()
everyone, one_at_a_time = threading.Barrier(16), threading.Lock()
def work():
    everyone.wait()
    with one_at_a_time:
        bytearray(PIECE)
threads = [threading.Thread(target=work) for _ in range(16)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(rss() - before)
"""


def test_sixteen_threads_in_turn_keep_at_most_two_buffers():
    grown = int(subprocess.run([sys.executable, "-c", THREADS_IN_TURN], capture_output=True, text=True,
                               check=True).stdout)
    assert grown <= 2 * (4 << 20) + (1 << 20), f"grew {grown / 2**20:.1f} MiB"
