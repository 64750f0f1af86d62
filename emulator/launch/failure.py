"""Why a run failed, in one line, from its torchrun.log and the host's out-of-memory count.

torchrun.log holds every rank's output. Each rank writes an error as one whole line, but when one
rank dies the others fail after it with consequences (gloo's "Connection closed by peer"), and a
line may still carry two messages glued together (a writer that wrote a line in two pieces). So:

1. a rank the kernel killed for lack of memory (signal 9 in torchrun's summary while the host's or
   this process's cgroup's ``oom_kill`` count rose) is named as such;
2. else the first ``ckpt-emu: error:`` message that is not a consequence of another rank's death,
   each glued message apart;
3. else a rank a signal ended (torchrun's summary: a negative exit code), the signal named, other
   than the SIGTERM torchrun stops the survivors with;
4. else the first ``ckpt-emu: error:`` message at all;
5. else the first Python exception of a rank that is not a consequence of another rank's death;
6. else the first exception line at all; else a rank that SIGTERM ended.
"""
from __future__ import annotations

import os
import re
import signal
from pathlib import Path

ERROR = "ckpt-emu: error:"
WARNING = "ckpt-emu: warning:"
#: what a rank fails with because another one died first: never the reason a run failed
CONSEQUENCE = re.compile(r"Connection closed by peer|Connection reset by peer|Broken pipe|Socket Timeout|"
                         r"timed out|DistNetworkError|DistBackendError|ChildFailedError|SignalException",
                         re.IGNORECASE)
_EXCEPTION = re.compile(r"^\[rank(\d+)\]: ((?:\w+\.)*\w*(?:Error|Exception|Interrupt|error)\b.*)$")
#: the last line of a traceback torchrun's agent printed itself (a rank's lines begin ``[rankN]:``)
_AGENT_EXCEPTION = re.compile(r"^((?:\w+\.)*\w*(?:Error|Exception|Interrupt)\b.*)$")
_SUMMARY_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_SUMMARY_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")


def read_lines(log: Path) -> list[str]:
    try:
        return log.read_text(errors="replace").splitlines()
    except OSError:
        return []


def warnings(lines: list[str]) -> list[str]:
    """The ranks' ``ckpt-emu: warning:`` lines, each once, in order."""
    return list(dict.fromkeys(m for line in lines for m in _messages(line, WARNING)))


def _messages(line: str, marker: str) -> list[str]:
    """Every ``marker`` message in ``line``: two glued onto one line are two messages."""
    if marker not in line:
        return []
    return [marker + part.rstrip() for part in line.split(marker)[1:] if part.strip()]


def oom_kills() -> int:
    """How many processes the kernel has killed for lack of memory: the host's count plus this
    process's cgroup's (a container's limit), so a rise during a run means one of its processes."""
    total = 0
    for line in read_lines(Path("/proc/vmstat")):
        if line.startswith("oom_kill "):
            total += int(line.split()[1])
    for line in read_lines(Path("/proc/self/cgroup")):
        if line.startswith("0::"):
            for event in read_lines(Path("/sys/fs/cgroup") / line[3:].lstrip("/") / "memory.events"):
                if event.startswith("oom_kill "):
                    total += int(event.split()[1])
    return total


def exit_codes(lines: list[str]) -> dict[int, int]:
    """{rank: exit code} of the ranks torchrun's failure summary lists (a signal: its negative number)."""
    codes, rank = {}, None
    for line in lines:
        m = _SUMMARY_RANK.match(line)
        if m:
            rank = int(m.group(1))
            continue
        m = _SUMMARY_EXIT.match(line)
        if m and rank is not None:
            codes.setdefault(rank, int(m.group(1)))
    return codes


def killed_ranks(lines: list[str]) -> list[int]:
    """The ranks torchrun's failure summary says ended by signal 9 (SIGKILL)."""
    return sorted(r for r, code in exit_codes(lines).items() if code == -signal.SIGKILL)


def signal_name(number: int) -> str:
    """``SIGKILL (9)`` for 9; ``signal 99`` for a number no signal has."""
    try:
        return f"{signal.Signals(number).name} ({number})"
    except ValueError:
        return f"signal {number}"


def _signalled(lines: list[str], *, stopped: bool) -> str | None:
    """The ranks a signal ended, in words: those torchrun stops survivors with (SIGTERM) when
    ``stopped``, else every other signal."""
    hit = {r: -code for r, code in exit_codes(lines).items() if code < 0 and (-code == signal.SIGTERM) == stopped}
    if not hit:
        return None
    first = min(hit)
    who = f"rank {first}" if len(hit) == 1 else f"ranks {', '.join(map(str, sorted(hit)))}"
    if stopped:
        return f"{who} ended by signal {signal_name(hit[first])}"
    return (f"{who} killed by signal {signal_name(hit[first])}: not by the run itself (another process or the "
            "operator sent it; the kernel's out-of-memory killer is named as such)")


def first_error(lines: list[str], *, oom_killed: bool = False) -> str | None:
    """The one line that says why the run failed (module docstring), or None."""
    if oom_killed:
        ranks = killed_ranks(lines)
        if ranks:
            who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
            return (f"{who} killed by the kernel for lack of memory (out of memory: SIGKILL); lower --scale, run "
                    "fewer ranks, or free host memory")
    messages = [m[len(ERROR):].strip() for line in lines for m in _messages(line, ERROR)]
    cause = next((m for m in messages if not CONSEQUENCE.search(m)), None) or _signalled(lines, stopped=False)
    if cause or messages:
        return cause or messages[0]
    found = [m for m in (_EXCEPTION.match(line) for line in lines) if m]
    real = [m for m in found if not CONSEQUENCE.search(m.group(2))]
    for m in real or found:
        return f"rank {m.group(1)} failed: {m.group(2)}"
    return _signalled(lines, stopped=True)


def agent_error(lines: list[str]) -> str | None:
    """The exception torchrun's agent ended with, printed by itself (its traceback's last line), or None."""
    found = [m.group(1).rstrip() for m in map(_AGENT_EXCEPTION.match, lines) if m]
    return found[-1] if found else None


#: a folder with less than this free (to this user) counts as full: no log line or result fits
FULL_BELOW_BYTES = 1 << 20


def full_folder(folders: list[tuple[str, Path]]) -> tuple[str, Path, int] | None:
    """(what, folder, bytes free) of the first of ``folders`` whose filesystem is full (root may
    also use the blocks kept for it), or None: a full results folder leaves an empty torchrun.log,
    so the launcher looks at the disks itself."""
    for what, folder in folders:
        try:
            st = os.statvfs(folder)
        except OSError:
            continue
        free = (st.f_bfree if os.geteuid() == 0 else st.f_bavail) * st.f_frsize
        if free < FULL_BELOW_BYTES:
            return what, Path(folder), free
    return None
