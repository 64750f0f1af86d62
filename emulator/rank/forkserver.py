"""What torchrun's fork server imports before it forks the ranks (emulator/rank/agent.py).

Imported in the fork server only: the rank's code and torch, once per run, and the server's
lifeline. The server outlived a ``kill -9`` of its agent (its ranks with it), so here it asks the
kernel to end it with the agent, the parent that started it (``AGENT_PID``).
"""
import os

from emulator.job.lifeline import AGENT_PID, die_with_parent
from emulator.rank import run  # noqa: F401  (torch and the rank's code, for every fork)

if AGENT_PID in os.environ:
    die_with_parent(int(os.environ[AGENT_PID]))
