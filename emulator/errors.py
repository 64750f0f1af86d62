"""The exit statuses of every command, and the errors that end one with one clear line.

======  ==========================================================================
status  meaning
======  ==========================================================================
0       it ran, and the design met its goals (or the command checks none)
1       it ran, and the design missed (``--fail-on-miss`` / ``run.fail_on_miss``):
        deadline misses, incomplete checkpoints, a failed recovery,
        ``tune``'s confirmation run (emulator/results/verdict.py); a load that
        restored no checkpoint, always
2       bad input: a config, a flag, the environment; found before anything is written
3       it failed to run to its end: a rank died or a signal killed it, the
        ranks' launcher was killed, a disk filled during the run, a checkpoint
        could not be made durable and ``drain.on_failure`` says stop, an
        internal error
130     interrupted (a second Ctrl-C)
======  ==========================================================================
"""
import os

EXIT_OK = 0
EXIT_MISSED = 1
EXIT_BAD_INPUT = 2
EXIT_FAILED = 3
EXIT_INTERRUPTED = 130


class UserError(Exception):
    """Bad input or an unusable environment: reported as one line, exit status 2."""

    exit_code = EXIT_BAD_INPUT


class Interrupted(UserError):
    """The user stopped a command (Ctrl-C) before it had what it needed: one line, exit status 130."""

    exit_code = EXIT_INTERRUPTED


class ConfigError(UserError):
    """A config key is unknown, mistyped or impossible; the message names the key."""


class RunFailed(UserError):
    """The run started and could not finish: one line like bad input, exit status 3. A UserError
    so that every place reporting one line reports it too."""

    exit_code = EXIT_FAILED


#: the most characters of a value an error message quotes
QUOTE_LIMIT = 60


def shown(value, limit: int = QUOTE_LIMIT, *, quote: bool = True) -> str:
    """``repr(value)`` (or ``str`` when not ``quote``) cut to ``limit`` characters: a message quotes
    what it refuses, never a megabyte of it. Containers are cut before their repr is built."""
    if isinstance(value, (list, tuple, dict, set)) and len(value) > limit:
        return f"<a {type(value).__name__} of {len(value)} items>"
    text = repr(value) if quote else str(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


#: the longest error line printed; past it the message is cut (it quotes too much)
LINE_LIMIT = 1000


def one_line(text: str, limit: int = LINE_LIMIT) -> str:
    """``text`` as one line (newlines folded into spaces) of at most ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def say(line: str) -> None:
    """Write ``line`` to stderr as one whole line in one write: the ranks share torchrun.log, and a
    line written in pieces can be glued to another rank's (``print`` writes the text and the newline
    apart). Newlines inside are folded into spaces."""
    os.write(2, (one_line(line, 4 * LINE_LIMIT) + "\n").encode(errors="replace"))
