"""Errors that end a command with one clear line and exit status 2 (never a traceback); a run that
failed (not its input) ends with exit status 1."""


class UserError(Exception):
    """Bad input or an unusable environment: reported as one line, exit status 2."""

    exit_code = 2


class RunFailed(UserError):
    """The run ran on good input and failed at what it set out to do (e.g. no checkpoint could be
    loaded back): one line after its report, exit status 1."""

    exit_code = 1


class ConfigError(UserError):
    """A config key is unknown, mistyped or impossible; the message names the key."""
