"""Errors that end a command with one clear line and exit status 2 (never a traceback); a run that
failed (not its input) ends with exit status 1."""
import os


class UserError(Exception):
    """Bad input or an unusable environment: reported as one line, exit status 2."""

    exit_code = 2


class RunFailed(UserError):
    """The run ran on good input and failed at what it set out to do (e.g. no checkpoint could be
    loaded back): one line after its report, exit status 1."""

    exit_code = 1


class ConfigError(UserError):
    """A config key is unknown, mistyped or impossible; the message names the key."""


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
