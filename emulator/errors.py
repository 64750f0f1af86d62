"""The exit statuses of every command, and the errors that end one with one clear line.

======  ==========================================================================
status  meaning
======  ==========================================================================
0       it ran, and the design met its goals (or the command checks none)
1       it ran, and the design missed (``--fail-on-miss`` / ``run.fail_on_miss``):
        deadline misses, incomplete checkpoints, a failed load or recovery,
        ``tune``'s confirmation run (emulator/results/verdict.py)
2       bad input: a config, a flag, the environment; found before anything is written
3       it failed to run to its end: a rank died, a checkpoint could not be made
        durable and ``drain.on_failure`` says stop, an internal error
130     interrupted (a second Ctrl-C)
======  ==========================================================================
"""

EXIT_OK = 0
EXIT_MISSED = 1
EXIT_BAD_INPUT = 2
EXIT_FAILED = 3
EXIT_INTERRUPTED = 130


class UserError(Exception):
    """Bad input or an unusable environment: reported as one line, exit status 2."""

    exit_code = EXIT_BAD_INPUT


class ConfigError(UserError):
    """A config key is unknown, mistyped or impossible; the message names the key."""


class RunFailed(UserError):
    """The run started and could not finish: one line like bad input, exit status 3. A UserError
    so that every place reporting one line reports it too."""

    exit_code = EXIT_FAILED
